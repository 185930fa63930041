"""HierEncDec's decoding step on a Llama backbone as a fused graph: `hierencdec_llama.LlamaHierEncDec.step`
(its document-scaled attention, `read_documents`) written on `fused_llama.Backbone`'s pieces.

Layouts, for B items, K beams, U documents of L tokens, KV key/value heads of G query heads, d per head: the
summary's queries are (B, 1, KV, G*K, 1, d); the documents' keys and values are viewed (B, U, KV, 1, d, L) and
(B, U, KV, 1, L, d), so a document's scores, masses and readings are (B, U, KV, G*K, 1, .) and the summary's own
(B, 1, KV, G*K, 1, .) broadcast against them. Every product is then one query row against one head's keys or
values, which ONNX Runtime's CPU MatMul reads where they lie (its one-row kernel) instead of copying each
document's keys and values into packed panels first; the scaling is in the queries' rotary codes, as that kernel
takes no factor. A layer's queries are turned once for the summary's own position and every document's (codes built
once per step, (B, 1 + U, ...), then split), its new key by one `RotaryEmbedding`, and its new key and value are
written into its slot cache with one ScatterND at indices built once per step. A part's log-mass comes from its
softmax (`mass_and_probs`), and a document's mass over its text is its mass plus the log of its softmax's share on
the text (kept above float32's smallest normal, so that a document whose text draws no representable share still has
a finite, negligible weight).
"""

from __future__ import annotations

import numpy as np
import onnx
from torch import nn

from .. import constants as C
from ..errors import ExportError
from .fused_llama import Backbone, register_step
from .onnx_builder import MS, GraphBuilder

FLOAT = onnx.TensorProto.FLOAT


def step(b: Backbone, model: nn.Module) -> onnx.ModelProto:
    g, cfg = b.g, b.config
    kv, heads, d, group = cfg.kv_heads, cfg.heads, cfg.head_dim, cfg.group
    lowest = np.float32(np.finfo(np.float32).min)
    layers = len(b.layers)

    # once per step: sizes, positions, rotary codes, biases, cache indices
    batch_beams = g.op("Shape", C.INPUT_IDS)
    batch, beams = g.op("Slice", batch_beams, g.ints(0), g.ints(1)), g.op("Slice", batch_beams, g.ints(1), g.ints(2))
    units = g.op("Slice", g.op("Shape", C.UNIT_MASK), g.ints(1), g.ints(2))
    length = g.op("Slice", g.op("Shape", C.ENCODER_ATTENTION_MASK), g.ints(1), g.ints(2))
    per_beam = g.op("Concat", batch, beams, g.ints(kv, d), axis=0)  # (B, K, KV, d)
    rotary_keys = g.op("Concat", batch, g.ints(-1, 1, d), axis=0)  # (B, K*KV, 1, d)
    query_shape = g.op("Concat", batch, beams, g.ints(heads, d), axis=0)  # (B, K, H, d)
    doc_keys = g.op("Concat", g.ints(-1), units, g.ints(kv, 1, d), length, axis=0)  # (B, U, KV, 1, d, L)
    doc_values = g.op("Concat", g.ints(-1), units, g.ints(kv, 1), length, g.ints(d), axis=0)  # (B, U, KV, 1, L, d)
    per_doc = g.op("Concat", g.ints(-1), units, g.ints(1, 1, 1), axis=0)

    x = b.embed(g.op("Reshape", C.INPUT_IDS, g.ints(-1)))  # (B*K, D)
    lengths = g.op("ReduceSum", C.ENCODER_ATTENTION_MASK, g.ints(1), keepdims=0)  # (B*U,)
    scaling = g.const(np.float32(attention_scaling(model)))
    # the queries' positions (B, 1 + U): the summary's own p, then each document's L_u + p; their codes scaled
    own_position = g.op("Expand", g.op("Reshape", C.POSITION, g.ints(1, 1)), g.op("Concat", batch, g.ints(1), axis=0))
    doc_positions = g.op("Reshape", g.op("Add", lengths, C.POSITION), g.op("Concat", batch, units, axis=0))
    query_codes = [g.op("Reshape", g.op("Mul", code, scaling), g.ints(0, -1, 1, 1, 1, d))  # (B, 1 + U, 1, 1, 1, d)
                   for code in b.codes(g.op("Concat", own_position, doc_positions, axis=1))]
    parts = g.op("Concat", g.ints(1), units, axis=0)  # split sizes: the summary's own queries, the documents'
    key_cache = b.rotary_cache(C.POSITION)  # (1, d/2): the keys' at p, row 0 of RotaryEmbedding's caches
    key_rows = g.op("Expand", g.const(np.zeros((1, 1), np.int64)), g.op("Concat", batch, g.ints(1), axis=0))
    mask = g.op("Cast", C.ENCODER_ATTENTION_MASK, to=FLOAT)
    unit_bias = g.op("Mul", g.op("Sub", g.const(np.float32(1)), mask), g.const(lowest))  # (B*U, L)
    unit_bias = g.op("Reshape", unit_bias, g.op("Concat", per_doc, length, axis=0))  # (B, U, 1, 1, 1, L)
    real = g.op("Reshape", C.UNIT_MASK, g.op("Concat", per_doc, g.ints(1), axis=0))  # (B, U, 1, 1, 1, 1) bool
    # the summary's slots: beam k reads position c from slot cache_slots[b, k, c] (`bart.slot_bias`)
    slot = g.op("Unsqueeze", g.op("Range", g.const(np.int64(0)), g.op("Squeeze", beams, g.ints(0)),
                                  g.const(np.int64(1))), g.ints(-1))  # (K, 1)
    elsewhere = g.op("Not", g.op("Equal", g.op("Unsqueeze", C.CACHE_SLOTS, g.ints(2)), slot))  # (B, K, K, C)
    own_bias = g.op("Mul", g.op("Cast", elsewhere, to=FLOAT), g.const(lowest))
    own_bias = g.op("Unsqueeze", g.op("Reshape", own_bias, g.ints(0, 0, -1)), g.ints(1, 2, 4))  # (B,1,1,K,1,K*C)
    own_bias = g.op("Concat", *[own_bias] * group, axis=3)  # (B, 1, 1, G*K, 1, K*C)
    # where each beam's key/value goes: cache (B, KV, K, C, d) at [b, h, k, p] for update (b, k, h)
    grid = [g.op("Range", g.const(np.int64(0)), g.op("Squeeze", n, g.ints(0)), g.const(np.int64(1)))
            for n in (batch, beams)]
    b_index = g.op("Reshape", grid[0], g.ints(-1, 1, 1, 1))
    k_index = g.op("Reshape", grid[1], g.ints(1, -1, 1, 1))
    h_index = g.const(np.arange(kv, dtype=np.int64).reshape(1, 1, kv, 1))
    index_shape = g.op("Concat", batch, beams, g.ints(kv, 1), axis=0)
    at = g.op("Concat", *[g.op("Expand", i, index_shape) for i in (b_index, h_index, k_index)],
              g.op("Expand", g.op("Reshape", C.POSITION, g.ints(1, 1, 1, 1)), index_shape), axis=3)  # (B, K, KV, 4)
    head = g.ints(len(cfg.unit_head))
    tiniest = g.const(np.float32(np.finfo(np.float32).tiny))

    hidden, normed, mlp_out, shares = x, None, None, []
    for i, w in enumerate(b.layers):
        if mlp_out is None:
            normed, hidden = b.norm(hidden, w.input_norm)
        else:
            normed, hidden = b.norm(mlp_out, w.input_norm, skip=hidden)
        q, k, v = g.op("Split", b.linear(normed, w.qkv), g.ints(heads * d, kv * d, kv * d), outputs=3, axis=-1)
        k = b.rotary(g.op("Reshape", k, rotary_keys), key_rows, *key_cache)  # (B, K*KV, 1, d), each at row 0
        k = g.op("Reshape", k, per_beam)  # (B, K, KV, d)
        keys = g.op("ScatterND", C.past_key(i), at, k, name=C.present_key(i))
        values = g.op("ScatterND", C.past_value(i), at, g.op("Reshape", v, per_beam), name=C.present_value(i))
        q = g.op("Transpose", g.op("Reshape", q, query_shape), perm=[0, 2, 1, 3])  # (B, H, K, d)
        q = g.op("Reshape", q, g.ints(0, 1, kv, -1, 1, d))  # (B, 1, KV, G*K, 1, d)
        turned = g.op("MatMul", q, b.turn)
        q_self, q_docs = g.op("Split", b.rotate(q, turned, *query_codes), parts, outputs=2, axis=1)  # (B, 1|U, ...)

        # the summary's own attention: its mass (log) and reading
        own_keys = g.op("Reshape", keys, g.ints(0, 1, kv, 1, -1, d))  # (B, 1, KV, 1, K*C, d)
        own_values = g.op("Reshape", values, g.ints(0, 1, kv, 1, -1, d))
        scores = g.op("Add", g.op("FusedMatMul", q_self, own_keys, domain=MS, transB=1), own_bias)
        own_mass, probs = mass_and_probs(g, scores)  # (B, 1, KV, G*K, 1, 1)
        own_context = g.op("MatMul", probs, own_values)

        # every document: mass, mass over its text (the prompt's head left out), reading
        doc_scores = g.op("Add", g.op("MatMul", q_docs, g.op("Reshape", C.cross_key(i), doc_keys)), unit_bias)
        mass, probs = mass_and_probs(g, doc_scores)  # (B, U, KV, G*K, 1, 1)
        text_share = g.op("ReduceSum", g.op("Slice", probs, head, g.ints(np.iinfo(np.int64).max), g.ints(-1)),
                          g.ints(-1), keepdims=1)
        text = g.op("Add", mass, g.op("Log", g.op("Max", text_share, tiniest)))
        context = g.op("MatMul", probs, g.op("Reshape", C.cross_value(i), doc_values))

        share = g.op("Softmax", g.op("Where", real, text, g.const(lowest)), axis=1)  # padding documents: exactly 0
        shares.append(share)
        share = g.op("Mul", share, g.op("Sigmoid", g.op("Sub", mass, own_mass)))  # w[u] r[u]
        # sum_u w[u] r[u] context[u] + (1 - sum_u w[u] r[u]) own = own + sum_u w[u] r[u] (context[u] - own)
        read = g.op("ReduceSum", g.op("Mul", share, g.op("Sub", context, own_context)), g.ints(1), keepdims=1)
        out = g.op("Add", own_context, read)  # (B, 1, KV, G*K, 1, d)
        out = g.op("Transpose", g.op("Reshape", out, g.ints(0, heads, -1, d)), perm=[0, 2, 1, 3])  # (B, K, H, d)
        attended = b.linear(g.op("Reshape", out, g.ints(-1, heads * d)), w.output)
        normed, hidden = b.norm(attended, w.post_norm, skip=hidden)
        mlp_out = b.mlp(normed, w)

    final, _ = b.norm(mlp_out, b.final_norm, skip=hidden)
    g.op("Reshape", b.log_probs(final), g.op("Concat", batch, beams, g.ints(-1), axis=0), name=C.LOG_PROBS)
    unit_weights = g.op("Reshape", g.op("Sum", *shares), g.ints(0, 0, heads, -1))  # (B, U, H, K)
    g.op("Div", g.op("ReduceMean", unit_weights, axes=[2], keepdims=0), g.const(np.float32(layers)),
         name=C.UNIT_WEIGHTS)

    cache = ["batch", kv, "beams", "capacity", d]
    inputs = [(C.INPUT_IDS, "int64", ["batch", "beams"]), (C.UNIT_MASK, "bool", ["batch", "units"]),
              (C.ENCODER_ATTENTION_MASK, "int64", ["rows", "length"]), (C.POSITION, "int64", [1]),
              (C.CACHE_SLOTS, "int64", ["batch", "beams", "capacity"])]
    inputs += [(name(i), "float32", cache) for i in range(layers) for name in (C.past_key, C.past_value)]
    inputs += [t for i in range(layers) for t in ((C.cross_key(i), "float32", ["rows", kv, d, "length"]),
                                                   (C.cross_value(i), "float32", ["rows", kv, "length", d]))]
    outputs = [(C.LOG_PROBS, "float32", ["batch", "beams", cfg.vocab_size]),
               (C.UNIT_WEIGHTS, "float32", ["batch", "units", "beams"])]
    outputs += [(name(i), "float32", cache) for i in range(layers) for name in (C.present_key, C.present_value)]
    return g.model(inputs, outputs)


def attention_scaling(model: nn.Module) -> float:
    """The factor every layer's attention scores take (Llama's head_dim ** -0.5, one for all layers)."""
    scalings = {float(layer.self_attn.scaling) for layer in model.model.layers}
    if len(scalings) != 1:
        raise ExportError(f"the fused step scales every layer's scores alike; this model's layers take {scalings}")
    return scalings.pop()


def mass_and_probs(g: GraphBuilder, scores: str) -> tuple[str, str]:
    """scores (..., S) -> their log-sum-exp (..., 1) and softmax: the log-sum-exp is max(s) - log(max(softmax(s)))
    (the softmax at the top score is exp(top) / sum exp), one Softmax and two maxima, several times faster on the
    CPU than ReduceLogSumExp."""
    probs = g.op("Softmax", scores, axis=-1)
    top = g.op("ReduceMax", scores, axes=[-1], keepdims=1)
    return g.op("Sub", top, g.op("Log", g.op("ReduceMax", probs, axes=[-1], keepdims=1))), probs


register_step("hierencdec", step)
