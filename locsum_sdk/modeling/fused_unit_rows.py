"""HierEncDec's decoding step on a Llama backbone with one `GroupQueryAttention` a layer: each grid row holds its
unit's keys and values followed by the summary's own (`model.unit_rows` 32: float32, 8: int8), so a row's
attention over [unit | summary] is one fused operator, and the document-scaled combination of `fused_hierencdec`
comes out of it exactly:

- the summary's attention within document u (its joint softmax over the document's tokens and the summary's own,
  `read_documents`' `own + r (context - own)`) is GroupQueryAttention over row u, the query and the new key
  rotated at L_u + p (the row's length: relative positions are the step's, L_u + p - j to a document token and
  p - p' to the summary's);
- a document's weight, softmax over the documents of the log-mass on its text, is the share of one softmax over
  every row's text scores (`output_qk`: the scaled scores before softmax) that falls on the row's text.

Rows are laid out (B, K, U): every beam of an item reads its own copy of each document's row, whose summary part
the backend reorders when the beams' histories cross. The new token's key and value are written into each row at
L_u + p by the operator itself; an int8 row is quantized with fixed per-channel scales (each layer's key and
value, (KV, d)) that the encoder's outputs share (`encoder_rows`).
"""

from __future__ import annotations

import numpy as np
import onnx
from torch import nn

from .. import constants as C
from ..errors import ExportError
from .fused_hierencdec import attention_scaling
from .fused_llama import Backbone, register_step
from .onnx_builder import MS

INT32 = onnx.TensorProto.INT32


def step(b: Backbone, model: nn.Module, rows: int, scales: np.ndarray | None = None) -> onnx.ModelProto:
    """The step over unit `rows` (32: float32, 8: int8); `scales` (layers, 2, KV, d): each layer's key and value
    scales of int8 rows."""
    g, cfg = b.g, b.config
    kv, heads, d, layers = cfg.kv_heads, cfg.heads, cfg.head_dim, len(b.layers)
    quantized = rows == 8
    if d % 16:
        raise ExportError(f"unit rows are read by GroupQueryAttention, whose heads are a multiple of 16 values wide; "
                          f"this model's are {d}: export it with unit_rows 0")
    if quantized and (scales is None or scales.shape != (layers, 2, kv, d)):
        raise ExportError(f"int8 unit rows need each layer's key and value scales, ({layers}, 2, {kv}, {d})")
    lowest = g.const(np.float32(np.finfo(np.float32).min))
    zero, one = g.const(np.int64(0)), g.const(np.int64(1))

    # once per step: sizes, each row's length and position, the rotary caches, the text of each row
    batch_beams = g.op("Shape", C.INPUT_IDS)
    batch, beams = g.op("Slice", batch_beams, g.ints(0), g.ints(1)), g.op("Slice", batch_beams, g.ints(1), g.ints(2))
    units = g.op("Slice", g.op("Shape", C.UNIT_MASK), g.ints(1), g.ints(2))
    length = g.op("Slice", g.op("Shape", C.ENCODER_ATTENTION_MASK), g.ints(1), g.ints(2))
    queries = g.op("Mul", batch, beams)  # (1,): B*K
    lengths = g.op("ReduceSum", C.ENCODER_ATTENTION_MASK, g.ints(1), keepdims=0)  # (B*U,)
    lengths = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", g.op("Reshape", lengths, g.op(
        "Concat", batch, units, axis=0)), g.ints(1)), g.op("Concat", batch, beams, units, axis=0)), g.ints(-1))
    seen = g.op("Cast", g.op("Add", lengths, C.POSITION), to=INT32)  # (B*K*U,): each row's tokens before this one
    total = g.op("Squeeze", g.op("Add", g.op("Add", length, C.POSITION), g.ints(1)), g.ints(0))  # every row's bound
    cos, sin = b.rotary_cache(g.op("Range", zero, total, one))  # (T, d/2)
    row_query = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", g.op("Range", zero, g.op(
        "Squeeze", queries, g.ints(0)), one), g.ints(1)), g.op("Concat", queries, units, axis=0)), g.ints(-1))
    place = g.op("Unsqueeze", g.op("Range", zero, total, one), g.ints(0))  # (1, T)
    text = g.op("And", g.op("GreaterOrEqual", place, g.const(np.int64(len(cfg.unit_head)))),
                g.op("Less", place, g.op("Unsqueeze", lengths, g.ints(1))))  # (B*K*U, T): the row's text
    text = g.op("Unsqueeze", text, g.ints(1, 2))  # (B*K*U, 1, 1, T)
    by_row = g.op("Concat", queries, units, g.ints(heads, -1), axis=0)  # (B*K, U, H, T)
    flat = g.op("Concat", queries, g.ints(heads, -1), axis=0)  # (B*K, H, U*T)
    by_unit = g.op("Concat", queries, g.ints(heads), units, g.ints(-1), axis=0)  # (B*K, H, U, T)
    reading = g.op("Concat", queries, units, g.ints(heads, d), axis=0)  # (B*K, U, H, d)
    row_total = g.op("Cast", total, to=INT32)
    quantization = dict(k_quant_type="PER_CHANNEL", v_quant_type="PER_CHANNEL", kv_cache_bit_width=8)

    hidden, normed, mlp_out, shares = b.embed(g.op("Reshape", C.INPUT_IDS, g.ints(-1))), None, None, []
    for i, w in enumerate(b.layers):
        if mlp_out is None:
            normed, hidden = b.norm(hidden, w.input_norm)
        else:
            normed, hidden = b.norm(mlp_out, w.input_norm, skip=hidden)
        packed = g.op("Unsqueeze", g.op("Gather", b.linear(normed, w.qkv), row_query), g.ints(1))  # (R, 1, (H+2KV)d)
        extra = ["", "", "", g.const(scales[i, 0].reshape(1, kv, 1, d), "key_scale"),
                 g.const(scales[i, 1].reshape(1, kv, 1, d), "value_scale")] if quantized else []
        joint, _, _, scores = g.op(
            "GroupQueryAttention", packed, "", "", C.unit_key(i), C.unit_value(i), seen, row_total, cos, sin, *extra,
            outputs=4, domain=MS, num_heads=heads, kv_num_heads=kv, do_rotary=1, scale=attention_scaling(model),
            qk_output=1, **(quantization if quantized else {}))
        node = g.nodes[-1]
        node.output[1], node.output[2] = C.present_unit_key(i), C.present_unit_value(i)
        # a document's weight: its text's share of one softmax over every row's text scores
        # (scores past a row's own length are not written: selected away, never added to)
        scores = g.op("Transpose", g.op("Reshape", g.op("Where", text, scores, lowest), by_row), perm=[0, 2, 1, 3])
        share = g.op("ReduceSum", g.op("Reshape", g.op("Softmax", g.op("Reshape", scores, flat), axis=-1), by_unit),
                     g.ints(-1), keepdims=0)  # (B*K, H, U)
        shares.append(share)
        share = g.op("Unsqueeze", g.op("Transpose", share, perm=[0, 2, 1]), g.ints(-1))  # (B*K, U, H, 1)
        read = g.op("ReduceSum", g.op("Mul", g.op("Reshape", joint, reading), share), g.ints(1), keepdims=0)
        attended = b.linear(g.op("Reshape", read, g.ints(-1, heads * d)), w.output)
        normed, hidden = b.norm(attended, w.post_norm, skip=hidden)
        mlp_out = b.mlp(normed, w)

    final, _ = b.norm(mlp_out, b.final_norm, skip=hidden)
    g.op("Reshape", b.log_probs(final), g.op("Concat", batch, beams, g.ints(-1), axis=0), name=C.LOG_PROBS)
    weights = g.op("ReduceMean", g.op("Sum", *shares), axes=[1], keepdims=0)  # (B*K, U)
    weights = g.op("Transpose", g.op("Reshape", weights, g.op("Concat", batch, beams, units, axis=0)), perm=[0, 2, 1])
    g.op("Div", weights, g.const(np.float32(layers)), name=C.UNIT_WEIGHTS)
    return g.model(*rows_io(cfg, rows))


def rows_io(config, rows: int) -> tuple[list, list]:
    """The unit-row step's inputs and outputs as `GraphBuilder.model` takes them (`kinds.hierencdec` declares the
    same)."""
    dtype = "int8" if rows == 8 else "float32"
    row = ["rows", config.kv_heads, "capacity", config.head_dim]
    inputs = [(C.INPUT_IDS, "int64", ["batch", "beams"]), (C.UNIT_MASK, "bool", ["batch", "units"]),
              (C.ENCODER_ATTENTION_MASK, "int64", ["rows", "length"]), (C.POSITION, "int64", [1])]
    inputs += [(name(i), dtype, row) for i in range(config.layers) for name in (C.unit_key, C.unit_value)]
    outputs = [(C.LOG_PROBS, "float32", ["batch", "beams", config.vocab_size]),
               (C.UNIT_WEIGHTS, "float32", ["batch", "units", "beams"])]
    outputs += [(name(i), dtype, row) for i in range(config.layers)
                for name in (C.present_unit_key, C.present_unit_value)]
    return inputs, outputs


register_step("hierencdec", step, form="rows")
