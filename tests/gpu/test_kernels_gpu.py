"""The Triton kernels on a CUDA GPU against their numpy references: the cases of `locsum_sdk/kernels/cases.py`,
compiled (not interpreted), in a process of their own. Skipped without a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from locsum_sdk.kernels.cases import CASES, DTYPES, OPS, TOLERANCE  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")]

SCRIPT = """
import json, sys
from locsum_sdk.kernels.cases import check
print(json.dumps(check(sys.argv[1], sys.argv[2], "cuda", int(sys.argv[3]))))
"""


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_kernel_on_the_gpu(op, dtype):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    tests = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(tests), str(tests.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SCRIPT, op, dtype, str(CASES)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    worst = json.loads(done.stdout.strip().splitlines()[-1])
    assert worst <= TOLERANCE[dtype], f"{op} {dtype}: relative error {worst:.2e} on the GPU"
