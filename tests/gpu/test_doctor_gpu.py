"""`locsum doctor --require-gpu` on a GPU machine with the `gpu` extra: every stage passes for every shipped
bundle (driver, ONNX Runtime's CUDA provider, the kernels on the device, TensorRT, the plugins, engines built, their
tokens equal to ONNX Runtime's on the same graphs), in a process without TRITON_INTERPRET. Skipped where the
machine has no CUDA GPU or no TensorRT."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def has_gpu() -> bool:
    return Path("/proc/driver/nvidia/version").exists() or os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1")


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason="no NVIDIA driver here"),
    pytest.mark.skipif(importlib.util.find_spec("tensorrt") is None, reason="TensorRT is not installed here "
                       "(pip install -e '.[gpu]')"),
]


def test_every_gpu_stage_passes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    bundles = [arg for name in ("default", "hierencdec", "dyle", "hiersumm", "pagesum")
               for arg in ("--bundle", str(ROOT / "engines" / name))]
    report = tmp_path / "doctor.json"
    done = subprocess.run([sys.executable, "-m", "locsum_sdk.cli", "doctor", "--require-gpu", "--json", str(report),
                           *bundles], capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert json.loads(report.read_text(encoding="utf-8"))["ok"]
