"""SnippetMarginalize: numpy reference == torch custom op == ONNX function on ONNX Runtime; gradients; padding;
stability where probabilities underflow or all but one snippet is masked."""

import numpy as np
import pytest
import torch
from conftest import run_onnx_function

from locsum_sdk.ops import snippet_marginalize as op

ATOL = 1e-5


def example(seed: int = 0, batch: int = 3, units: int = 5, beams: int = 2, vocab: int = 11):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, units, beams, vocab)) * 4
    log_probs = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)
    scores = (rng.normal(size=(batch, units, beams)) * 3).astype(np.float32)
    mask = np.ones((batch, units), dtype=bool)
    mask[1, 3:] = False
    mask[2, 1:] = False  # one real snippet
    return log_probs, scores, mask


def plain(log_probs, scores, mask):
    """The definition with probabilities, in float64: sum_u softmax(l)[u] * p(y | u)."""
    s = np.where(mask[:, :, None], scores.astype(np.float64), -np.inf)
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    return np.log((w[..., None] * np.exp(log_probs.astype(np.float64))).sum(1)), w


def test_reference_is_the_definition_and_masks_padding():
    log_probs, scores, mask = example()
    mixed, weights = op.reference(log_probs, scores, mask)
    want_mixed, want_weights = plain(log_probs, scores, mask)
    np.testing.assert_allclose(mixed, want_mixed, atol=ATOL)
    np.testing.assert_allclose(weights, want_weights, atol=1e-6)
    assert np.all(weights[~mask] == 0) and mixed.dtype == np.float32
    np.testing.assert_allclose(np.exp(mixed).sum(-1), 1, atol=1e-5)  # still a distribution
    np.testing.assert_allclose(mixed[2], log_probs[2, 0], atol=1e-6)  # one real snippet: its own distribution


def test_torch_op_matches_reference():
    log_probs, scores, mask = example(1)
    mixed, weights = op.torch_op()(*map(torch.from_numpy, (log_probs, scores, mask)))
    ref_mixed, ref_weights = op.reference(log_probs, scores, mask)
    np.testing.assert_allclose(mixed.numpy(), ref_mixed, atol=ATOL)
    np.testing.assert_allclose(weights.numpy(), ref_weights, atol=1e-6)


def test_onnx_function_matches_reference():
    pytest.importorskip("onnxruntime")
    log_probs, scores, mask = example(2)
    mixed, weights = run_onnx_function(op.function(), op.DOMAIN, op.OPSET,
                                       {"log_probs": log_probs, "scores": scores, "mask": mask},
                                       {"mixed": 3, "weights": 3})
    ref_mixed, ref_weights = op.reference(log_probs, scores, mask)
    np.testing.assert_allclose(mixed, ref_mixed, atol=ATOL)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-6)


def test_gradients_match_autograd_of_plain_torch():
    log_probs, scores, mask = (torch.from_numpy(a) for a in example(3, vocab=5))
    log_probs = log_probs.double().requires_grad_()
    scores = scores.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda lp, s: op.torch_op()(lp, s, mask), (log_probs, scores))


def test_padding_snippets_change_nothing():
    log_probs, scores, mask = example(4)
    mixed, weights = op.reference(log_probs, scores, mask)
    padded = op.reference(np.concatenate([log_probs, np.zeros_like(log_probs[:, :1])], axis=1),
                          np.concatenate([scores, np.full_like(scores[:, :1], 80.0)], axis=1),
                          np.concatenate([mask, np.zeros_like(mask[:, :1])], axis=1))
    np.testing.assert_array_equal(mixed, padded[0])
    np.testing.assert_array_equal(weights, padded[1][:, :-1])
    assert np.all(padded[1][:, -1] == 0)


def test_underflow_and_impossible_tokens_stay_finite_or_minus_infinity():
    pytest.importorskip("onnxruntime")
    log_probs, scores, mask = example(5)
    log_probs = log_probs - 300.0  # exp underflows to 0 in float32: a probability-space sum would give -inf
    log_probs[:, :, :, 0] = -np.inf  # impossible after every snippet
    log_probs[0, 1, :, 1] = -np.inf  # impossible after one snippet only
    inputs = tuple(map(torch.from_numpy, (log_probs, scores, mask)))
    results = [op.reference(log_probs, scores, mask), [t.numpy() for t in op.torch_op()(*inputs)],
               run_onnx_function(op.function(), op.DOMAIN, op.OPSET,
                                 {"log_probs": log_probs, "scores": scores, "mask": mask}, {"mixed": 3, "weights": 3})]
    for mixed, weights in results:
        assert not np.isnan(mixed).any() and not np.isnan(weights).any()
        assert np.all(mixed[..., 0] == -np.inf) and np.isfinite(mixed[..., 1:]).all()
        np.testing.assert_allclose(mixed[..., 2:], results[0][0][..., 2:], atol=1e-4)
    log_probs_t = inputs[0].clone().requires_grad_()
    mixed, _ = op.torch_op()(log_probs_t, inputs[1], inputs[2])
    mixed[..., 1:].sum().backward()
    assert torch.isfinite(log_probs_t.grad).all()


def test_permuting_snippets_permutes_the_weights_and_nothing_else():
    log_probs, scores, mask = example(6)
    mask[:] = True
    order = np.array([3, 0, 4, 1, 2])
    mixed, weights = op.reference(log_probs, scores, mask)
    mixed2, weights2 = op.reference(log_probs[:, order], scores[:, order], mask)
    np.testing.assert_allclose(mixed2, mixed, atol=1e-6)
    np.testing.assert_allclose(weights2, weights[:, order], atol=1e-7)


def test_a_duplicated_snippet_counts_twice_unless_its_score_says_otherwise():
    log_probs, scores, mask = example(7)
    mask[:] = True
    twice = op.reference(np.concatenate([log_probs, log_probs[:, :1]], 1), np.concatenate([scores, scores[:, :1]], 1),
                         np.ones((3, 6), dtype=bool))
    boosted = scores.copy()
    boosted[:, 0] += np.log(2.0)  # the same as weighing snippet 0 twice
    np.testing.assert_allclose(twice[0], op.reference(log_probs, boosted, mask)[0], atol=1e-5)
    halved = np.concatenate([scores, scores[:, :1]], 1)
    halved[:, [0, 5]] -= np.log(2.0)  # two copies at half weight each: the input without the copy
    once = op.reference(np.concatenate([log_probs, log_probs[:, :1]], 1), halved, np.ones((3, 6), dtype=bool))
    np.testing.assert_allclose(once[0], op.reference(log_probs, scores, mask)[0], atol=1e-5)
