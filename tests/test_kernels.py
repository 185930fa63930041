"""The Triton kernels of the three ops against their numpy references, on the CPU under `TRITON_INTERPRET=1`, and
compiled ahead of time for a Hopper GPU (PTX and cubin: triton's own LLVM and ptxas, no GPU needed).

Tolerance: the largest absolute difference over a case's output, divided by the largest |reference| value
(float64 reference on the same inputs): at most 1e-5 for float32 and 1e-2 for float16. Non-finite values (the
-inf of an impossible token) must match exactly. 200 random cases per op and dtype, among them a single unit, every
unit padded but one, and (DocScaledAttention) padded documents, documents with no real token and items with
no real document.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined: run them with numpy on the CPU
pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from locsum_sdk.kernels import doc_scaled_attention as dsa_kernel  # noqa: E402
from locsum_sdk.kernels import page_combine as pc_kernel  # noqa: E402
from locsum_sdk.kernels import snippet_marginalize as sm_kernel  # noqa: E402
from locsum_sdk.ops import doc_scaled_attention, page_combine, snippet_marginalize  # noqa: E402

CASES = 200
TOLERANCE = {np.float32: 1e-5, np.float16: 1e-2}
DTYPES = [np.float32, np.float16]

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                       reason="the kernels were defined without TRITON_INTERPRET=1 (a GPU run)"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered in log"),  # log(0) = -inf: a ruled-out token
]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), "non-finite values differ"
    assert np.array_equal(got[~finite], want[~finite])
    if not finite.any():
        return 0.0
    return float(np.abs(got[finite] - want[finite]).max() / max(np.abs(want[finite]).max(), 1e-30))


def unit_mask(rng: np.random.Generator, batch: int, units: int, case: int) -> np.ndarray:
    """Random real/padding units with at least one real unit per item; every few cases all padded but one."""
    mask = rng.random((batch, units)) < 0.7
    if case % 4 == 0:
        mask[:] = False
    for item in range(batch):
        if not mask[item].any():
            mask[item, rng.integers(units)] = True
    return mask


def shapes(rng: np.random.Generator, case: int) -> tuple[int, int, int]:
    batch = int(rng.integers(1, 3))
    units = 1 if case % 10 == 0 else int(rng.integers(1, 40))
    beams = int(rng.integers(1, 5))
    return batch, units, beams


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
def test_page_combine_kernel(dtype):
    rng = np.random.default_rng(1)
    worst = 0.0
    for case in range(CASES):
        batch, units, beams = shapes(rng, case)
        dim = int(rng.integers(1, 200))
        hidden = rng.standard_normal((batch, units, beams, dim)).astype(dtype)
        scores = (rng.standard_normal((batch, units, beams)) * 4).astype(dtype)
        mask = unit_mask(rng, batch, units, case)
        want = page_combine.reference(hidden.astype(np.float64), scores.astype(np.float64), mask)
        got = pc_kernel.launch(torch.from_numpy(hidden), torch.from_numpy(scores), torch.from_numpy(mask))
        assert got[0].dtype == torch.from_numpy(hidden).dtype and got[1].shape == scores.shape
        assert np.all(got[1].numpy()[~mask] == 0)
        worst = max(worst, *(relative_error(g.float().numpy(), w) for g, w in zip(got, want)))
    assert worst <= TOLERANCE[dtype], worst


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
def test_snippet_marginalize_kernel(dtype):
    rng = np.random.default_rng(2)
    worst = 0.0
    for case in range(CASES):
        batch, units, beams = shapes(rng, case)
        vocab = int(rng.integers(1, 300))
        log_probs = np.log(rng.dirichlet(np.ones(vocab) * 0.5, (batch, units, beams)) + 1e-30).astype(dtype)
        if case % 3 == 0:  # tokens some or every snippet rules out
            log_probs[..., rng.integers(vocab)] = -np.inf
            log_probs[:, 0, :, rng.integers(vocab)] = -np.inf
        scores = (rng.standard_normal((batch, units, beams)) * 4).astype(dtype)
        mask = unit_mask(rng, batch, units, case)
        want = snippet_marginalize.reference(log_probs.astype(np.float64), scores.astype(np.float64), mask)
        got = sm_kernel.launch(torch.from_numpy(log_probs), torch.from_numpy(scores), torch.from_numpy(mask))
        assert np.all(got[1].numpy()[~mask] == 0)
        worst = max(worst, *(relative_error(g.float().numpy(), w) for g, w in zip(got, want)))
    assert worst <= TOLERANCE[dtype], worst


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
def test_doc_scaled_attention_kernel(dtype):
    rng = np.random.default_rng(3)
    worst = 0.0
    for case in range(CASES):
        batch, docs, _ = shapes(rng, case)
        docs = min(docs, 8)
        heads, queries = int(rng.integers(1, 3)), int(rng.integers(1, 10))
        head_dim = int(rng.choice([8, 16, 24, 32, 64]))
        length = int(rng.integers(1, 90))
        query = (rng.standard_normal((batch, heads, queries, head_dim)) / head_dim**0.5).astype(dtype)
        key = rng.standard_normal((batch, docs, heads, head_dim, length)).astype(dtype)
        value = rng.standard_normal((batch, docs, heads, length, head_dim)).astype(dtype)
        key_mask = rng.random((batch, docs, length)) < 0.8
        key_mask[..., 0] = True
        doc_mask = unit_mask(rng, batch, docs, case)
        if case % 7 == 0:
            key_mask[0, 0] = False  # a document with no real token: context zeros
        if case % 11 == 0:
            doc_mask[-1] = False  # an item with no real document: zeros, never NaN
        want = doc_scaled_attention.reference(query.astype(np.float64), key.astype(np.float64),
                                              value.astype(np.float64), key_mask, doc_mask)
        got = dsa_kernel.launch(*(torch.from_numpy(a) for a in (query, key, value, key_mask, doc_mask)))
        assert np.all(np.isfinite(got[0].float().numpy()))
        worst = max(worst, *(relative_error(g.float().numpy(), w) for g, w in zip(got, want)))
    assert worst <= TOLERANCE[dtype], worst


COMPILE = """
import json, triton
from triton.backends.compiler import GPUTarget
from locsum_sdk.kernels import doc_scaled_attention, page_combine, snippet_marginalize
cases = [(page_combine, [[1, 8, 4, 768]]), (snippet_marginalize, [[1, 8, 4, 50265]]),
         (doc_scaled_attention, [[1, 12, 4, 64], [1, 8, 12, 64, 1024]])]
report = []
for module, shapes in cases:
    for dtype in ("fp32", "fp16"):
        launch = module.LAUNCH
        source = triton.compiler.ASTSource(fn=launch.kernel, signature=launch.signature(dtype, shapes),
                                           constexprs=launch.blocks(dtype, shapes))
        kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
        report.append({"op": module.__name__, "dtype": dtype, "name": kernel.metadata.name,
                       "shared": kernel.metadata.shared, "scratch": kernel.metadata.global_scratch_size,
                       "ptx": ".entry " + kernel.metadata.name in kernel.asm["ptx"], "cubin": len(kernel.asm["cubin"])})
print(json.dumps(report))
"""


def test_kernels_compile_ahead_of_time_for_hopper():
    """What the ahead-of-time plugins do while TensorRT builds an engine: every kernel compiles to PTX and a
    cubin for compute capability 9.0 with the shapes of a bart-base-sized model, needs no global scratch memory
    (TensorRT passes none) and fits 48 KB of shared memory (no opt-in needed)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    done = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0 and "ptxas" in done.stderr and "not found" in done.stderr:
        pytest.skip("triton's ptxas is not available on this platform")
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report) == 6
    for kernel in report:
        assert kernel["ptx"] and kernel["cubin"] > 0, kernel
        assert kernel["scratch"] == 0 and kernel["shared"] <= 48 * 1024, kernel
