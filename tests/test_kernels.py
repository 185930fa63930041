"""The Triton kernels of the three ops against their numpy references on the CPU under `TRITON_INTERPRET=1`
(cases and tolerances: `locsum_sdk/kernels/cases.py`), and compiled ahead of time for a Hopper GPU (PTX and cubin:
triton's own LLVM and ptxas, no GPU needed)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

from locsum_sdk.kernels.cases import DTYPES, OPS, TOLERANCE, check  # noqa: E402

INTERPRETED = 40  # the interpreter runs every program of a launch in Python: 40 of the GPU test's 200 cases, which
# hold each special case (every 3rd, 4th, 7th, 10th and 11th) at least 3 times

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                       reason="TRITON_INTERPRET is not 1 (conftest sets it; tests/gpu runs the kernels compiled)"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered in log"),  # log(0) = -inf: a ruled-out token
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_kernel_matches_reference(op, dtype):
    worst = check(op, dtype, "cpu", INTERPRETED, seed=OPS.index(op))
    assert worst <= TOLERANCE[dtype], f"{op} {dtype}: relative error {worst:.2e} over {INTERPRETED} cases"


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
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report) == 6
    for kernel in report:
        assert kernel["ptx"] and kernel["cubin"] > 0, kernel
        assert kernel["scratch"] == 0 and kernel["shared"] <= 48 * 1024, kernel
