"""A unit's own causal self-attention (`llama.Attention.extend` without a past: the encoder's) as one operator,
exported as ONNX Runtime's fused `GroupQueryAttention` (com.microsoft): the rotary codes of both queries and keys, the
scores, the causal softmax and the reading in one kernel, for the graphs ONNX Runtime runs (`fuse`, the `blocks`
export), where the graph as written spends most of an encoder layer's time in its score tensors' separate passes.

`torch_op` is the same maths as `extend` (it calls `llama.heads_of`, `attend` and `merged`), so torch and every graph
exported without it compute what they did; the operator takes the projections' outputs, unrotated, and returns the
output before the output projection with the rotated keys and the values (its `present_key`, `present_value`), which
are the unit's encoding.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from .llama import Attention, attend, causal_bias, heads_of, merged, stacked

TORCH_NAME = "locsum::unit_attention"
DOMAIN = "com.microsoft"
HEAD_MULTIPLE = 16  # GroupQueryAttention's CPU kernel refuses other head widths


@functools.cache
def torch_op():
    """Register and return `locsum::unit_attention` (inference only: export)."""
    schema = ("(Tensor query, Tensor key, Tensor value, Tensor cos, Tensor sin, int heads, int kv_heads, "
              "float scaling) -> (Tensor, Tensor, Tensor)")

    @torch.library.custom_op(TORCH_NAME, mutates_args=(), schema=schema)
    def unit_attention(query, key, value, cos, sin, heads, kv_heads, scaling):
        """query (R, T, H*d), key and value (R, T, KV*d), cos and sin (T, d/2) of positions 0..T-1 -> the output
        (R, T, H*d), the rotated keys (R, KV, T, d) and the values (R, KV, T, d)."""
        rows, length, width = query.shape
        cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)  # (T, d)
        q, k, v = heads_of(query.reshape(-1, width), key.reshape(rows * length, -1), value.reshape(rows * length, -1),
                           heads, kv_heads, length, cos, sin)
        causal = stacked(causal_bias(length, query.dtype, query.device), heads // kv_heads)
        out = merged(attend(q, [(k.transpose(2, 3), v, causal)], scaling), heads, length).view(rows, length, width)
        return out, k.contiguous(), v.contiguous()

    @unit_attention.register_fake
    def _(query, key, value, cos, sin, heads, kv_heads, scaling):
        rows, length, width = query.shape
        kv = (rows, kv_heads, length, width // heads)
        return query.new_empty(rows, length, width), query.new_empty(kv), query.new_empty(kv)

    return unit_attention


def extend(attention: Attention, x: torch.Tensor, length: int | torch.Tensor, cos: torch.Tensor,
           sin: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """`Attention.extend` without a past, through the operator: x (R*T, D), cos and sin (1, 1, T, d) of positions
    0..T-1 -> (R*T, D), and key_t (R, KV, d, T) and value (R, KV, T, d)."""
    rows = (-1, length, attention.heads * attention.head_dim)
    kv_rows = (-1, length, attention.kv_heads * attention.head_dim)
    half = attention.head_dim // 2
    out, key, value = torch_op()(attention.q_proj(x).view(rows), attention.k_proj(x).view(kv_rows),
                                 attention.v_proj(x).view(kv_rows), cos[0, 0, :, :half], sin[0, 0, :, :half],
                                 attention.heads, attention.kv_heads, attention.scaling)
    return attention.o_proj(out.reshape(-1, rows[-1])), (key.transpose(2, 3), value)


@contextmanager
def fuse(model: nn.Module) -> Iterator[None]:
    """Within the block, every Llama attention of `model` whose heads the kernel takes (`fusable`) runs `extend`
    without a past through the operator, and an export writes it as `GroupQueryAttention` (the symbolic
    registered); the others run as written."""
    register_symbolic()
    attentions = [module for module in model.modules() if isinstance(module, Attention) and fusable(module)]
    for attention in attentions:
        attention.unit_attention = extend
    try:
        yield
    finally:
        for attention in attentions:
            attention.unit_attention = None


def fusable(attention: Attention) -> bool:
    """Whether ONNX Runtime's kernel takes the attention's heads (their width a multiple of 16)."""
    return attention.head_dim % HEAD_MULTIPLE == 0


@functools.cache
def register_symbolic(opset: int = 17) -> None:
    """Export `locsum::unit_attention` as one `com.microsoft.GroupQueryAttention` node: every row's T positions
    (seqlens_k T - 1, total T), rotary codes from the given caches, halves not interleaved."""
    from torch.onnx import symbolic_helper

    torch_op()

    @symbolic_helper.parse_args("v", "v", "v", "v", "v", "i", "i", "f")
    def symbolic(g, query, key, value, cos, sin, heads, kv_heads, scaling):
        int32 = torch.onnx.TensorProtoDataType.INT32
        shape = g.op("Shape", query)
        total = g.op("Cast", g.op("Gather", shape, g.op("Constant", value_t=torch.tensor(1))), to_i=int32)  # T
        rows = g.op("Slice", shape, g.op("Constant", value_t=torch.tensor([0])),
                    g.op("Constant", value_t=torch.tensor([1])))
        last = g.op("Sub", total, g.op("Constant", value_t=torch.tensor(1, dtype=torch.int32)))
        seqlens = g.op("Expand", g.op("Unsqueeze", last, g.op("Constant", value_t=torch.tensor([0]))), rows)
        absent = g.op("prim::Constant")
        absent.setType(torch._C.OptionalType.ofTensor())
        out, present_key, present_value = g.op(
            f"{DOMAIN}::GroupQueryAttention", query, key, value, absent, absent, seqlens, total, cos, sin,
            num_heads_i=heads, kv_num_heads_i=kv_heads, scale_f=scaling, do_rotary_i=1, rotary_interleaved_i=0,
            outputs=3)
        out.setType(query.type())
        present_key.setType(query.type().with_sizes([None, kv_heads, None, None]))
        present_value.setType(query.type().with_sizes([None, kv_heads, None, None]))
        return out, present_key, present_value

    torch.onnx.register_custom_op_symbolic(TORCH_NAME, symbolic, opset)
