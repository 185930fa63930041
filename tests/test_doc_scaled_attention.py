"""DocScaledAttention: numpy reference == torch custom op == ONNX function on ONNX Runtime; gradients; padding;
what the maths says of permuted, added and single documents."""

import numpy as np
import pytest
import torch
from conftest import run_onnx_function

from locsum_sdk.ops import doc_scaled_attention as op

ATOL = 1e-5


def example(seed: int = 0, batch: int = 3, docs: int = 4, heads: int = 2, queries: int = 3, dim: int = 5,
            length: int = 6):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(batch, heads, queries, dim)).astype(np.float32)
    key = rng.normal(size=(batch, docs, heads, dim, length)).astype(np.float32) * 2
    value = rng.normal(size=(batch, docs, heads, length, dim)).astype(np.float32)
    key_mask = np.ones((batch, docs, length), dtype=bool)
    if docs > 2:
        key_mask[0, 1, 3:] = False  # a short document
        key_mask[1, 2:, :] = False  # padding documents
    doc_mask = key_mask.any(axis=-1)
    return query, key, value, key_mask, doc_mask


def test_torch_op_matches_reference():
    inputs = example()
    out, weights = op.torch_op()(*map(torch.from_numpy, inputs))
    ref_out, ref_weights = op.reference(*inputs)
    np.testing.assert_allclose(out.numpy(), ref_out, atol=ATOL)
    np.testing.assert_allclose(weights.numpy(), ref_weights, atol=ATOL)
    np.testing.assert_allclose(ref_weights.sum(axis=1), 1, atol=ATOL)
    assert np.all(ref_weights[1, 2:] == 0)


def test_token_attention_matches_its_reference_and_spreads_the_document_weights_over_tokens():
    query, key, value, key_mask, doc_mask = example(2)
    _, weights = op.torch_op()(*map(torch.from_numpy, (query, key, value, key_mask, doc_mask)))
    tokens = op.token_attention(torch.from_numpy(query), torch.from_numpy(key), torch.from_numpy(key_mask), weights)
    np.testing.assert_allclose(tokens.numpy(), op.token_reference(query, key, key_mask, doc_mask), atol=ATOL)
    np.testing.assert_allclose(tokens.sum(dim=-1).numpy(), weights.mean(dim=2).numpy(), atol=ATOL)  # (B, D, Q)
    np.testing.assert_allclose(tokens.sum(dim=(1, 3)).numpy(), 1, atol=ATOL)
    padding = torch.from_numpy(~key_mask)[:, :, None, :].expand_as(tokens)  # (B, D, Q, L)
    assert torch.all(tokens[padding] == 0)


def test_onnx_function_matches_reference():
    pytest.importorskip("onnxruntime")
    inputs = example(1)
    names = ["query", "key", "value", "key_mask", "doc_mask"]
    out, weights = run_onnx_function(op.function(), op.DOMAIN, op.OPSET, dict(zip(names, inputs)),
                                     {"out": 4, "weights": 4})
    ref_out, ref_weights = op.reference(*inputs)
    np.testing.assert_allclose(out, ref_out, atol=ATOL)
    np.testing.assert_allclose(weights, ref_weights, atol=ATOL)


def test_gradients_match_finite_differences():
    query, key, value, key_mask, doc_mask = (torch.from_numpy(a) for a in example(2, batch=2, docs=3, length=4))
    tensors = [t.double().requires_grad_() for t in (query, key, value)]
    assert torch.autograd.gradcheck(lambda q, k, v: op.torch_op()(q, k, v, key_mask, doc_mask), tensors)


def test_padding_documents_and_tokens_change_nothing():
    query, key, value, key_mask, doc_mask = example(3)
    out, weights = op.reference(query, key, value, key_mask, doc_mask)
    pad = lambda a, fill: np.concatenate([a, np.full_like(a[:, :1], fill)], axis=1)  # noqa: E731
    out2, weights2 = op.reference(query, pad(key, 1e3), pad(value, 1e6), pad(key_mask, False), pad(doc_mask, False))
    np.testing.assert_allclose(out, out2, atol=ATOL)
    np.testing.assert_array_equal(weights, weights2[:, :-1])
    assert np.all(weights2[:, -1] == 0)


def test_permuting_documents_permutes_the_weights_only():
    inputs = example(4)
    out, weights = op.reference(*inputs)
    order = np.array([2, 0, 3, 1])
    permuted = [a[:, order] if a.ndim > 1 and i > 0 else a for i, a in enumerate(inputs)]
    out2, weights2 = op.reference(*permuted)
    np.testing.assert_allclose(out, out2, atol=ATOL)
    np.testing.assert_allclose(weights[:, order], weights2, atol=ATOL)


def test_one_document_is_ordinary_attention():
    query, key, value, key_mask, doc_mask = example(5, docs=1)
    out, weights = op.reference(query, key, value, key_mask, doc_mask)
    scores = np.matmul(query, key[:, 0])  # (B, H, Q, L)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, np.matmul(probs, value[:, 0]), atol=ATOL)
    assert np.all(weights == 1)


def test_no_real_document_gives_zeros_and_large_scores_no_nan():
    query, key, value, key_mask, doc_mask = example(6)
    key_mask[2], doc_mask[2] = False, False
    out, weights = op.torch_op()(*map(torch.from_numpy, (query * 1e4, key, value, key_mask, doc_mask)))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.all(out[2] == 0) and torch.all(weights[2] == 0)
