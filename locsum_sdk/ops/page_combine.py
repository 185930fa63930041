"""`locsum.PageCombine`: masked softmax over units, then the weighted sum of their hidden states.

    hidden  [B, U, K, D]  decoder states of each unit u for each beam (or time step) k
    scores  [B, U, K]     unit confidences
    mask    [B, U]        True for real units, False for padding units
    ->
    mixed   [B, K, D]     sum_u w[u] * hidden[u]
    weights [B, U, K]     w = softmax over u of scores, padding units get exactly 0

Three implementations of the same maths: `reference` (numpy), `torch_op()` (a `torch.library` custom op with
autograd, used by modeling and export) and `function()` (the onnxscript body of the ONNX local function).
"""

from __future__ import annotations

import functools

import numpy as np

DOMAIN = "locsum"
NAME = "PageCombine"
TORCH_NAME = "locsum::page_combine"


def reference(hidden: np.ndarray, scores: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numpy reference of PageCombine."""
    masked = np.where(mask[:, :, None], scores, -np.inf)  # (B, U, K)
    shifted = np.exp(masked - masked.max(axis=1, keepdims=True))  # (B, U, K)
    weights = shifted / shifted.sum(axis=1, keepdims=True)  # (B, U, K)
    mixed = (weights[..., None] * hidden).sum(axis=1)  # (B, K, D)
    return mixed.astype(hidden.dtype), weights.astype(scores.dtype)


@functools.cache
def torch_op():
    """Register and return the `locsum::page_combine` torch custom op (differentiable)."""
    import torch

    def math(hidden: torch.Tensor, scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        masked = scores.masked_fill(~mask[:, :, None], float("-inf"))  # (B, U, K)
        weights = torch.softmax(masked, dim=1)  # (B, U, K)
        mixed = (weights.unsqueeze(-1) * hidden).sum(dim=1)  # (B, K, D)
        return mixed, weights

    schema = "(Tensor hidden, Tensor scores, Tensor mask) -> (Tensor, Tensor)"

    @torch.library.custom_op(TORCH_NAME, mutates_args=(), schema=schema)
    def page_combine(hidden, scores, mask):
        return math(hidden, scores, mask)

    @page_combine.register_fake
    def _(hidden, scores, mask):
        batch, units, beams, dim = hidden.shape
        return hidden.new_empty(batch, beams, dim), scores.new_empty(batch, units, beams)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output[1])

    def backward(ctx, grad_mixed, grad_weights):
        hidden, weights = ctx.saved_tensors  # (B, U, K, D), (B, U, K)
        grad_hidden = weights.unsqueeze(-1) * grad_mixed.unsqueeze(1)  # (B, U, K, D)
        grad_w = (hidden * grad_mixed.unsqueeze(1)).sum(-1)  # (B, U, K)
        if grad_weights is not None:
            grad_w = grad_w + grad_weights
        grad_scores = weights * (grad_w - (weights * grad_w).sum(dim=1, keepdim=True))  # (B, U, K)
        return grad_hidden, grad_scores, None

    page_combine.register_autograd(backward, setup_context=setup_context)
    return page_combine


OPSET = 17  # the ONNX opset of the function body and of the graphs that use it


@functools.cache
def function():
    """The onnxscript function of PageCombine (needs onnxscript: export time only)."""
    import onnxscript

    op = onnxscript.values.Opset("", OPSET)
    locsum = onnxscript.values.Opset(DOMAIN, 1)

    @onnxscript.script(locsum, default_opset=op)
    def PageCombine(hidden, scores, mask):  # float, float, bool
        unit_mask = op.Unsqueeze(mask, op.Constant(value_ints=[2]))  # (B, U, 1)
        neg_inf = op.CastLike(op.Constant(value_float=float("-inf")), scores)
        weights = op.Softmax(op.Where(unit_mask, scores, neg_inf), axis=1)  # (B, U, K)
        weighted = op.Mul(op.Unsqueeze(weights, op.Constant(value_ints=[3])), hidden)  # (B, U, K, D)
        mixed = op.ReduceSum(weighted, op.Constant(value_ints=[1]), keepdims=0)  # (B, K, D)
        return mixed, weights

    return PageCombine
