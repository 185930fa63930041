"""`locsum doctor` on a machine without a GPU: a line for every stage saying what is missing (skips naming what
they need), no traceback, results as JSON, exit 0 unless the GPU is required."""

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from locsum_sdk import doctor
from locsum_sdk.cli import main

SHIPPED = ("default", "dyle", "hierencdec", "hiersumm", "pagesum")  # the default first, then engines/ in order
STAGES = ["driver", "onnxruntime-cuda", "kernels", "tensorrt", "plugins",
          *(f"{stage}:{name}" for name in SHIPPED for stage in ("engines", "tokens"))]


def test_doctor_without_a_gpu(tmp_path):
    report = tmp_path / "doctor.json"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "locsum_sdk.cli", "doctor", "--json", str(report)],
                          capture_output=True, text=True, timeout=120)
    assert time.perf_counter() - started < 60
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]
    assert [line.split()[1] for line in lines] == STAGES
    written = json.loads(report.read_text(encoding="utf-8"))
    assert [c["stage"] for c in written["checks"]] == STAGES and written["ok"] is False
    assert all(c["fix"] for c in written["checks"] if c["status"] == "fail")
    assert written["environment"]["packages"]["locsum"]
    skipped = {c["stage"]: c["detail"] for c in written["checks"] if c["status"] == "skip"}
    assert skipped["tokens:default"] == "needs: engines:default"


def test_doctor_requires_the_gpu_when_asked(capsys):
    assert main(["doctor", "-q", "--require-gpu"]) == 1
    assert capsys.readouterr().out == ""


def test_a_stage_that_breaks_is_a_finding(monkeypatch):
    def broken():
        raise RuntimeError("device-side assert")

    monkeypatch.setattr(doctor, "_kernels", broken)
    report = doctor.run([doctor.Path("engines/pagesum")])
    kernels = next(c for c in report.checks if c.stage == "kernels")
    assert kernels.status == "fail" and "RuntimeError: device-side assert" in kernels.detail and kernels.fix


def test_a_bundle_that_does_not_load_is_named_with_its_own_fix(tmp_path):
    """A folder that is not a bundle fails the ONNX Runtime stage on the bundle, not on the onnxruntime package."""
    report = doctor.run([tmp_path])
    check = next(c for c in report.checks if c.stage == "onnxruntime-cuda")
    assert check.status == "fail" and "manifest.json" in check.detail
    assert "--bundle" in check.fix and "onnxruntime" not in check.fix


def test_the_cuda_session_is_opened_on_a_bundle_whose_step_runs_there(monkeypatch):
    """A bundle over unit rows runs its step on the CPU: the ONNX Runtime stage opens the next bundle named, and
    where every one reads unit rows it says so (not that onnxruntime-gpu is missing)."""
    from locsum_sdk.backends import onnxruntime as ort_backend
    from locsum_sdk.bundle import Bundle

    rows = {"rows": 8, "slots": 0}
    opened = []
    monkeypatch.setattr(Bundle, "load", classmethod(lambda cls, path, verify=True: SimpleNamespace(
        path=path, manifest=SimpleNamespace(model={"unit_rows": rows[path.name]}))))

    def backend(bundle, device):
        opened.append((bundle.path.name, device))
        return SimpleNamespace(ort=ort_backend._import_ort(), providers=["CUDAExecutionProvider"])

    monkeypatch.setattr(ort_backend, "OnnxRuntimeBackend", backend)
    assert "CUDAExecutionProvider" in doctor._onnxruntime([doctor.Path("rows"), doctor.Path("slots")])
    assert opened == [("slots", "cuda")]
    with pytest.raises(doctor.Failed, match="unit rows"):
        doctor._onnxruntime([doctor.Path("rows")])


def test_doctor_on_a_stood_in_gpu(monkeypatch):
    """Over the stand-ins for TensorRT and cuda-python (tests/gpu_standin.py), the stages they provide pass for
    every shipped bundle trained from scratch: the driver, TensorRT, the plugins, engines built with the doctor's
    profiles, and their greedy tokens equal to ONNX Runtime's (the CPU build here: its CUDA stage fails, as it
    should). The default's path (engines from float32 graphs exported again from a blocks bundle) is the same
    stages on a tiny blocks bundle in tests/test_rebuild.py: the stand-in runs the default's 135M float32 graphs
    at a minute a check."""
    import gpu_standin

    report = gpu_standin.doctor_report(monkeypatch, doctor.shipped_bundles()[1:])  # the default is first
    status = {c.stage: c.status for c in report.checks}
    assert [c.stage for c in report.checks] == [s for s in STAGES if not s.endswith(":default")]
    assert {s for s, v in status.items() if v != "pass"} <= {"onnxruntime-cuda", "kernels"}, report.checks
