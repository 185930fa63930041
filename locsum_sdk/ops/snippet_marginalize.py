"""`locsum.SnippetMarginalize`: DYLE's step, the token distribution marginalized over the snippets.

    log_probs [B, U, K, V]  log p(y | snippet u, y<t) of each snippet u for each beam (or time step) k
    scores    [B, U, K]     dynamic scores l[u] of the snippets
    mask      [B, U]        True for real snippets, False for padding snippets
    ->
    mixed     [B, K, V]     log sum_u p(u | y<t) p(y | u, y<t), computed as a logsumexp over u
    weights   [B, U, K]     p(u | y<t) = softmax over real snippets of the scores; padding snippets get exactly 0

All in log space: no probability is formed before the sum, so nothing underflows in float32. Where every real
snippet gives a token log-probability -inf, the token's mixed log-probability is -inf (never NaN); an item with one
real snippet returns that snippet's log-probabilities.

Three implementations of the same maths: `reference` (numpy), `torch_op()` (a `torch.library` custom op with
autograd, used by modeling and export) and `function()` (the onnxscript body of the ONNX local function).
"""

from __future__ import annotations

import functools

import numpy as np

DOMAIN = "locsum"
NAME = "SnippetMarginalize"
TORCH_NAME = "locsum::snippet_marginalize"
OPSET = 17  # the ONNX opset of the function body


def _log_weights(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log softmax over real snippets of the scores (B, U, K); -inf for padding snippets."""
    masked = np.where(mask[:, :, None], scores, -np.inf)
    top = masked.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    total = np.exp(masked - top).sum(axis=1, keepdims=True)
    return masked - top - np.log(np.where(total > 0, total, 1.0))


def reference(log_probs: np.ndarray, scores: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numpy reference of SnippetMarginalize."""
    log_w = _log_weights(scores.astype(np.float64), mask)  # (B, U, K)
    joint = log_w[..., None] + log_probs.astype(np.float64)  # (B, U, K, V)
    top = joint.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        mixed = np.log(np.exp(joint - top).sum(axis=1)) + top[:, 0]  # (B, K, V)
    return mixed.astype(log_probs.dtype), np.exp(log_w).astype(scores.dtype)


def _torch_math(log_probs, scores, mask):
    """The op's maths in torch: (mixed, weights, joint), joint (B, U, K, V) = log p(u | y<t) + log p(y | u, y<t)."""
    import torch

    log_w = torch.log_softmax(scores.masked_fill(~mask[:, :, None], float("-inf")), dim=1)  # (B, U, K)
    joint = log_w.unsqueeze(-1) + log_probs  # (B, U, K, V)
    top = joint.amax(dim=1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    mixed = torch.log(torch.exp(joint - top).sum(dim=1)) + top.squeeze(1)  # (B, K, V)
    return mixed, torch.exp(log_w), joint


@functools.cache
def torch_op():
    """Register and return the `locsum::snippet_marginalize` torch custom op (differentiable)."""
    import torch

    schema = "(Tensor log_probs, Tensor scores, Tensor mask) -> (Tensor, Tensor)"

    @torch.library.custom_op(TORCH_NAME, mutates_args=(), schema=schema)
    def snippet_marginalize(log_probs, scores, mask):
        mixed, weights, _ = _torch_math(log_probs, scores, mask)
        return mixed, weights

    @snippet_marginalize.register_fake
    def _(log_probs, scores, mask):
        batch, units, beams, vocab = log_probs.shape
        return log_probs.new_empty(batch, beams, vocab), scores.new_empty(batch, units, beams)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad_mixed, grad_weights):
        log_probs, scores, mask = ctx.saved_tensors
        mixed, weights, joint = _torch_math(log_probs, scores, mask)  # recomputed: (B, U, K, V) is not kept
        posterior = torch.exp(joint - mixed.unsqueeze(1)).nan_to_num(0.0)  # p(u | y, y<t); -inf - -inf: impossible y
        grad_log_probs = posterior * grad_mixed.unsqueeze(1)  # (B, U, K, V)
        grad_log_w = grad_log_probs.sum(-1)  # (B, U, K): d mixed / d log w[u] = posterior[u]
        if grad_weights is not None:
            grad_log_w = grad_log_w + grad_weights * weights
        grad_scores = grad_log_w - weights * grad_log_w.sum(dim=1, keepdim=True)
        return grad_log_probs, grad_scores, None

    snippet_marginalize.register_autograd(backward, setup_context=setup_context)
    return snippet_marginalize


@functools.cache
def function():
    """The onnxscript function of SnippetMarginalize (needs onnxscript: export time only)."""
    import onnxscript

    op = onnxscript.values.Opset("", OPSET)
    locsum = onnxscript.values.Opset(DOMAIN, 1)

    @onnxscript.script(locsum, default_opset=op)
    def SnippetMarginalize(log_probs, scores, mask):  # float, float, bool
        neg_inf = op.CastLike(op.Constant(value_float=float("-inf")), scores)
        zero = op.CastLike(op.Constant(value_float=0.0), scores)
        units = op.Constant(value_ints=[1])
        masked = op.Where(op.Unsqueeze(mask, op.Constant(value_ints=[2])), scores, neg_inf)  # (B, U, K)
        weights = op.Softmax(masked, axis=1)  # (B, U, K)
        log_w = op.LogSoftmax(masked, axis=1)
        joint = op.Add(op.Unsqueeze(log_w, op.Constant(value_ints=[3])), log_probs)  # (B, U, K, V)
        top = op.ReduceMax(joint, axes=[1], keepdims=1)  # (B, 1, K, V); axes is an attribute before opset 18
        top = op.Where(op.IsInf(top), zero, top)
        total = op.ReduceSum(op.Exp(op.Sub(joint, top)), units, keepdims=0)  # (B, K, V)
        mixed = op.Add(op.Log(total), op.Squeeze(top, units))
        return mixed, weights

    return SnippetMarginalize
