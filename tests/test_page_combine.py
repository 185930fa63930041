"""PageCombine: numpy reference == torch custom op == ONNX function on ONNX Runtime; gradients; padding."""

import numpy as np
import pytest
import torch
from conftest import run_onnx_function

from locsum_sdk.ops import page_combine

ATOL = 1e-6


def example(seed: int = 0, batch: int = 3, units: int = 5, beams: int = 2, dim: int = 7):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(batch, units, beams, dim)).astype(np.float32)
    scores = rng.normal(size=(batch, units, beams)).astype(np.float32) * 3
    mask = np.ones((batch, units), dtype=bool)
    mask[1, 3:] = False
    mask[2, 1:] = False
    return hidden, scores, mask


def test_torch_op_matches_reference():
    hidden, scores, mask = example()
    mixed, weights = page_combine.torch_op()(*map(torch.from_numpy, (hidden, scores, mask)))
    ref_mixed, ref_weights = page_combine.reference(hidden, scores, mask)
    np.testing.assert_allclose(mixed.numpy(), ref_mixed, atol=ATOL)
    np.testing.assert_allclose(weights.numpy(), ref_weights, atol=ATOL)
    assert np.all(ref_weights[~mask] == 0)
    np.testing.assert_allclose(ref_weights.sum(axis=1), 1, atol=ATOL)


def test_onnx_function_matches_reference():
    pytest.importorskip("onnxruntime")
    hidden, scores, mask = example(1)
    mixed, weights = run_onnx_function(page_combine.function(), page_combine.DOMAIN, page_combine.OPSET,
                                       {"hidden": hidden, "scores": scores, "mask": mask}, {"mixed": 3, "weights": 3})
    ref_mixed, ref_weights = page_combine.reference(hidden, scores, mask)
    np.testing.assert_allclose(mixed, ref_mixed, atol=ATOL)
    np.testing.assert_allclose(weights, ref_weights, atol=ATOL)


def test_gradients_match_autograd_of_plain_torch():
    hidden, scores, mask = (torch.from_numpy(a) for a in example(2))
    hidden = hidden.double().requires_grad_()
    scores = scores.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda h, s: page_combine.torch_op()(h, s, mask), (hidden, scores))


def test_padding_units_change_nothing():
    hidden, scores, mask = example(3)
    mixed, weights = page_combine.reference(hidden, scores, mask)
    padded_hidden = np.concatenate([hidden, np.full_like(hidden[:, :1], 1e6)], axis=1)
    padded_scores = np.concatenate([scores, np.full_like(scores[:, :1], 50.0)], axis=1)
    padded_mask = np.concatenate([mask, np.zeros_like(mask[:, :1])], axis=1)
    mixed2, weights2 = page_combine.reference(padded_hidden, padded_scores, padded_mask)
    np.testing.assert_array_equal(mixed, mixed2)
    np.testing.assert_array_equal(weights, weights2[:, :-1])
    assert np.all(weights2[:, -1] == 0)
