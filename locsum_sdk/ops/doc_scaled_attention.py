"""`locsum.DocScaledAttention`: HierEncDec's cross-attention, a softmax over documents times a softmax inside each.

    query     [B, H, Q, d]     Q query rows per item (K beams x T positions), already scaled by 1/sqrt(d)
    key       [B, D, H, d, L]  each document's keys, stored transposed (the cross keys of its grid row)
    value     [B, D, H, L, d]
    key_mask  [B, D, L]        True for real tokens
    doc_mask  [B, D]           True for real documents
    ->
    out       [B, H, Q, d]     sum over documents n and tokens l of w[n] * p[n, l] * value[n, l]
    doc_w     [B, D, H, Q]     w = softmax over real documents of the score of each document's first token (<s>)

a[n, l] = query . key[n, l]; p[n, :] = softmax over the real tokens of document n of a[n, :]. Padding documents
get weight exactly 0, padding tokens probability exactly 0; an item with no real document (or a document with no
real token) yields zeros, never NaN. The beams of an item share its documents' keys and values (broadcast on the
query axis), so nothing is copied per beam.

Three implementations of the same maths: `reference` (numpy), `torch_op()` (a `torch.library` custom op with
autograd, used by modeling and export) and `function()` (the onnxscript body of the ONNX local function). A model
that copies also reads where the attention went token by token, w[n] * p[n, l] averaged over heads:
`token_attention` (torch, from the op's document weights; `token_reference` in numpy).
"""

from __future__ import annotations

import functools

import numpy as np

DOMAIN = "locsum"
NAME = "DocScaledAttention"
TORCH_NAME = "locsum::doc_scaled_attention"
OPSET = 17  # the ONNX opset of the function body


def _masked_softmax(x: np.ndarray, mask: np.ndarray, axis: int) -> np.ndarray:
    """Softmax over `axis` of the entries `mask` keeps; zeros where it keeps none."""
    masked = np.where(mask, x, -np.inf)
    top = masked.max(axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted = np.exp(masked - top)  # masked entries: exp(-inf) = 0
    total = shifted.sum(axis=axis, keepdims=True)
    return shifted / np.where(total > 0, total, 1.0)


def reference(query: np.ndarray, key: np.ndarray, value: np.ndarray, key_mask: np.ndarray,
              doc_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numpy reference of DocScaledAttention."""
    scores = np.matmul(query[:, None], key)  # (B, D, H, Q, L)
    inner = _masked_softmax(scores, key_mask[:, :, None, None, :], axis=-1)  # (B, D, H, Q, L)
    outer = _masked_softmax(scores[..., 0], doc_mask[:, :, None, None], axis=1)  # (B, D, H, Q)
    context = np.matmul(inner, value)  # (B, D, H, Q, d)
    out = (outer[..., None] * context).sum(axis=1)  # (B, H, Q, d)
    return out.astype(query.dtype), outer.astype(query.dtype)


def token_reference(query: np.ndarray, key: np.ndarray, key_mask: np.ndarray, doc_mask: np.ndarray) -> np.ndarray:
    """Numpy reference of `token_attention`."""
    scores = np.matmul(query[:, None], key)  # (B, D, H, Q, L)
    inner = _masked_softmax(scores, key_mask[:, :, None, None, :], axis=-1)
    outer = _masked_softmax(scores[..., 0], doc_mask[:, :, None, None], axis=1)
    return (outer[..., None] * inner).mean(axis=2).astype(query.dtype)


def _torch_masked_softmax(x, mask, dim: int):
    """Softmax over `dim` of the entries `mask` keeps; zeros where it keeps none (torch)."""
    import torch

    masked = x.masked_fill(~mask, float("-inf"))
    top = masked.amax(dim=dim, keepdim=True).detach()
    top = torch.where(top > float("-inf"), top, torch.zeros_like(top))  # not isfinite: ONNX casts it to float64
    shifted = torch.exp(masked - top)
    total = shifted.sum(dim=dim, keepdim=True)
    return shifted / torch.where(total > 0, total, torch.ones_like(total))


def token_attention(query, key, key_mask, doc_weights):
    """Where the attention went token by token, averaged over heads (torch, what a copy distribution reads):
    w[n] * p[n, l] of the op's maths for each document n and token l -> (B, D, Q, L), summing to 1 over D and L
    for an item with a real token. `doc_weights` (B, D, H, Q) is the op's second output."""
    scores = query.unsqueeze(1).matmul(key)  # (B, D, H, Q, L)
    inner = _torch_masked_softmax(scores, key_mask[:, :, None, None, :], dim=-1)  # (B, D, H, Q, L)
    return (doc_weights.unsqueeze(-1) * inner).mean(dim=2)


@functools.cache
def torch_op():
    """Register and return the `locsum::doc_scaled_attention` torch custom op (differentiable)."""
    import torch

    def math(query, key, value, key_mask, doc_mask):
        scores = torch.matmul(query.unsqueeze(1), key)  # (B, D, H, Q, L)
        inner = _torch_masked_softmax(scores, key_mask[:, :, None, None, :], dim=-1)  # (B, D, H, Q, L)
        outer = _torch_masked_softmax(scores[..., 0], doc_mask[:, :, None, None], dim=1)  # (B, D, H, Q)
        context = torch.matmul(inner, value)  # (B, D, H, Q, d)
        return (outer.unsqueeze(-1) * context).sum(dim=1), outer  # (B, H, Q, d), (B, D, H, Q)

    schema = "(Tensor query, Tensor key, Tensor value, Tensor key_mask, Tensor doc_mask) -> (Tensor, Tensor)"

    @torch.library.custom_op(TORCH_NAME, mutates_args=(), schema=schema)
    def doc_scaled_attention(query, key, value, key_mask, doc_mask):
        return math(query, key, value, key_mask, doc_mask)

    @doc_scaled_attention.register_fake
    def _(query, key, value, key_mask, doc_mask):
        batch, heads, queries, _ = query.shape
        return query.new_empty(batch, heads, queries, value.shape[-1]), query.new_empty(batch, key.shape[1], heads,
                                                                                         queries)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad_out, grad_weights):
        query, key, value, key_mask, doc_mask = ctx.saved_tensors
        _, vjp = torch.func.vjp(lambda q, k, v: math(q, k, v, key_mask, doc_mask), query, key, value)
        if grad_weights is None:
            grad_weights = query.new_zeros(query.shape[0], key.shape[1], query.shape[1], query.shape[2])
        outputs = (grad_out, grad_weights)
        return (*vjp(outputs), None, None)

    doc_scaled_attention.register_autograd(backward, setup_context=setup_context)
    return doc_scaled_attention


@functools.cache
def function():
    """The onnxscript function of DocScaledAttention (needs onnxscript: export time only)."""
    import onnxscript

    op = onnxscript.values.Opset("", OPSET)
    locsum = onnxscript.values.Opset(DOMAIN, 1)

    @onnxscript.script(locsum, default_opset=op)
    def DocScaledAttention(query, key, value, key_mask, doc_mask):  # float, float, float, bool, bool
        neg_inf = op.CastLike(op.Constant(value_float=float("-inf")), query)
        zero = op.CastLike(op.Constant(value_float=0.0), query)
        one = op.CastLike(op.Constant(value_float=1.0), query)
        scores = op.MatMul(op.Unsqueeze(query, op.Constant(value_ints=[1])), key)  # (B, D, H, Q, L)
        tokens = op.Unsqueeze(key_mask, op.Constant(value_ints=[2, 3]))  # (B, D, 1, 1, L)
        masked = op.Where(tokens, scores, neg_inf)
        top = op.ReduceMax(masked, axes=[4], keepdims=1)  # opset 17: axes an attribute
        top = op.Where(op.IsInf(top), zero, top)
        shifted = op.Exp(op.Sub(masked, top))
        total = op.ReduceSum(shifted, op.Constant(value_ints=[4]), keepdims=1)
        inner = op.Div(shifted, op.Where(op.Greater(total, zero), total, one))  # (B, D, H, Q, L)
        first = op.Squeeze(op.Slice(scores, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]),
                                    op.Constant(value_ints=[4])), op.Constant(value_ints=[4]))  # (B, D, H, Q)
        docs = op.Unsqueeze(doc_mask, op.Constant(value_ints=[2, 3]))  # (B, D, 1, 1)
        masked_docs = op.Where(docs, first, neg_inf)
        top_doc = op.ReduceMax(masked_docs, axes=[1], keepdims=1)
        top_doc = op.Where(op.IsInf(top_doc), zero, top_doc)
        shifted_docs = op.Exp(op.Sub(masked_docs, top_doc))
        total_docs = op.ReduceSum(shifted_docs, op.Constant(value_ints=[1]), keepdims=1)
        weights = op.Div(shifted_docs, op.Where(op.Greater(total_docs, zero), total_docs, one))  # (B, D, H, Q)
        context = op.MatMul(inner, value)  # (B, D, H, Q, d)
        weighted = op.Mul(op.Unsqueeze(weights, op.Constant(value_ints=[4])), context)
        out = op.ReduceSum(weighted, op.Constant(value_ints=[1]), keepdims=0)  # (B, H, Q, d)
        return out, weights

    return DocScaledAttention
