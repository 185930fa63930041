"""Random cases for the Triton kernels of the three ops against their numpy references, on any device: the CPU
under `TRITON_INTERPRET=1` (tests/test_kernels.py), a CUDA GPU (tests/gpu/test_kernels_gpu.py, in a process of its
own so that the kernels are compiled, not interpreted), and `locsum doctor` on the GPU it checks. Needs torch.

Tolerance: the largest absolute difference over a case's output, divided by the largest |reference| value or 1,
whichever is larger (float64 reference on the same inputs; a one-token vocabulary has log-probabilities of exactly
0): at most 1e-5 for float32 and 1e-2 for float16. Non-finite values (the
-inf of an impossible token) must match exactly. Among the cases: a single unit, every unit padded but one, and
(DocScaledAttention) documents with no real token and items with no real document.
"""

from __future__ import annotations

import numpy as np

from locsum_sdk.ops import doc_scaled_attention, page_combine, snippet_marginalize

CASES = 200
TOLERANCE = {"fp32": 1e-5, "fp16": 1e-2}
DTYPES = {"fp32": np.float32, "fp16": np.float16}
OPS = ("page_combine", "snippet_marginalize", "doc_scaled_attention")


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), "non-finite values differ"
    assert np.array_equal(got[~finite], want[~finite])
    if not finite.any():
        return 0.0
    return float(np.abs(got[finite] - want[finite]).max() / max(np.abs(want[finite]).max(), 1.0))


def unit_mask(rng: np.random.Generator, batch: int, units: int, case: int) -> np.ndarray:
    """Random real/padding units with at least one real unit per item; every fourth case all padded but one."""
    mask = rng.random((batch, units)) < 0.7
    if case % 4 == 0:
        mask[:] = False
    for item in range(batch):
        if not mask[item].any():
            mask[item, rng.integers(units)] = True
    return mask


def grid(rng: np.random.Generator, case: int) -> tuple[int, int, int]:
    """(batch, units, beams); every tenth case a single unit."""
    batch = int(rng.integers(1, 3))
    units = 1 if case % 10 == 0 else int(rng.integers(1, 40))
    return batch, units, int(rng.integers(1, 5))


def page_combine_case(rng, case, dtype):
    batch, units, beams = grid(rng, case)
    hidden = rng.standard_normal((batch, units, beams, int(rng.integers(1, 200)))).astype(dtype)
    scores = (rng.standard_normal((batch, units, beams)) * 4).astype(dtype)
    return hidden, scores, unit_mask(rng, batch, units, case)


def snippet_marginalize_case(rng, case, dtype):
    batch, units, beams = grid(rng, case)
    vocab = int(rng.integers(1, 300))
    log_probs = np.log(rng.dirichlet(np.ones(vocab) * 0.5, (batch, units, beams)) + 1e-30).astype(dtype)
    if case % 3 == 0:  # a token one snippet rules out, and one every snippet rules out
        log_probs[:, 0, :, rng.integers(vocab)] = -np.inf
        log_probs[..., rng.integers(vocab)] = -np.inf
    scores = (rng.standard_normal((batch, units, beams)) * 4).astype(dtype)
    return log_probs, scores, unit_mask(rng, batch, units, case)


def doc_scaled_attention_case(rng, case, dtype):
    batch, docs, _ = grid(rng, case)
    docs = min(docs, 8)
    heads, queries = int(rng.integers(1, 3)), int(rng.integers(1, 10))
    head_dim, length = int(rng.choice([8, 16, 24, 32, 64])), int(rng.integers(1, 90))
    query = (rng.standard_normal((batch, heads, queries, head_dim)) / head_dim**0.5).astype(dtype)
    key = rng.standard_normal((batch, docs, heads, head_dim, length)).astype(dtype)
    value = rng.standard_normal((batch, docs, heads, length, head_dim)).astype(dtype)
    key_mask = rng.random((batch, docs, length)) < 0.8
    key_mask[..., 0] = True
    doc_mask = unit_mask(rng, batch, docs, case)
    if case % 7 == 0:
        key_mask[0, 0] = False  # a document with no real token: its context is zeros
    if case % 11 == 0:
        doc_mask[-1] = False  # an item with no real document: zeros, never NaN
    return query, key, value, key_mask, doc_mask


def check(op: str, dtype_name: str, device: str, cases: int = CASES, seed: int = 0) -> float:
    """Run `cases` random cases of one op's kernel on `device` ("cpu" under TRITON_INTERPRET=1, or "cuda");
    assert the structural properties of each output and return the largest relative error."""
    import torch

    from locsum_sdk.kernels import launches
    from locsum_sdk.kernels.torch_ops import launch

    make, module = {
        "page_combine": (page_combine_case, page_combine),
        "snippet_marginalize": (snippet_marginalize_case, snippet_marginalize),
        "doc_scaled_attention": (doc_scaled_attention_case, doc_scaled_attention),
    }[op]
    reference, description = module.reference, launches()[module.NAME]
    rng, dtype, worst = np.random.default_rng(seed), DTYPES[dtype_name], 0.0
    for case in range(cases):
        inputs = make(rng, case, dtype)
        want = reference(*(a.astype(np.float64) if a.dtype != bool else a for a in inputs))
        got = [g.float().cpu().numpy() for g in launch(description, *(torch.from_numpy(a).to(device) for a in inputs))]
        assert [g.shape for g in got] == [w.shape for w in want]
        if op == "doc_scaled_attention":
            assert np.all(np.isfinite(got[0]))
        else:
            assert np.all(got[1][~inputs[2]] == 0)  # padding units weigh exactly 0
        worst = max(worst, *(relative_error(g, w) for g, w in zip(got, want)))
    return worst
