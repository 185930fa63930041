"""`locsum doctor`: the command a GPU user runs first. Every GPU stage is checked in order and gets one line, pass,
fail or skip, with the fix for each failure:

1. the NVIDIA driver and a CUDA GPU, through cuda-python (the driver must load PTX 8.0: CUDA 12.0 or later);
2. ONNX Runtime's CUDA provider present in a real session (not only listed by onnxruntime);
3. each Triton kernel against its numpy reference on the GPU;
4. TensorRT importable, its version against the one this release pins;
5. the locsum plugins registered with TensorRT;
6. for each bundle checked: TensorRT engines built (small profiles), and their greedy tokens against ONNX Runtime
   running the same prepared graphs.

A stage whose prerequisite failed is skipped, naming it. The results, with the versions found, are written as JSON
(`--json PATH`) for a bug report. `run` never raises for a failed stage; the exit code is non-zero only when the GPU
is required (`--require-gpu`) and a stage did not pass.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import LocsumError

TEXT = ("The committee met on Tuesday to plan the library budget. Anna proposed moving the reading programme to "
        "the spring, when more volunteers are free. Ben said the roof repair costs 15,000 euros and must come "
        "first, because water reached the archive in March. They agreed to ask the council for a grant and to "
        "vote on the final budget next week. ") * 3
PACKAGES = ("locsum", "numpy", "onnxruntime", "onnxruntime-gpu", "onnx", "tensorrt-cu12", "tensorrt-cu12-bindings",
            "cuda-python", "triton", "torch")


@dataclass
class Check:
    """One stage's result."""

    stage: str
    status: str  # "pass", "fail" or "skip"
    detail: str
    fix: str = ""
    seconds: float = 0.0


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)

    def passed(self, stage: str) -> bool:
        return any(c.stage == stage and c.status == "pass" for c in self.checks)

    @property
    def ok(self) -> bool:
        return all(c.status == "pass" for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "environment": self.environment, "checks": [asdict(c) for c in self.checks]}


class Failed(Exception):
    """A stage failed: what was found, and the fix."""

    def __init__(self, detail: str, fix: str):
        super().__init__(detail)
        self.detail, self.fix = detail, fix


def environment() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"python": sys.version.split()[0], "platform": platform.platform(), "packages": versions}


def _stage(report: Report, stage: str, work: Callable[[], str], needs: tuple[str, ...] = (),
           show: Callable[[Check], None] | None = None) -> None:
    """Run one stage into `report`: skip it when a stage it needs did not pass."""
    missing = [n for n in needs if not report.passed(n)]
    started = time.perf_counter()
    if missing:
        check = Check(stage, "skip", f"needs: {', '.join(missing)}")
    else:
        try:
            check = Check(stage, "pass", work())
        except Failed as failure:
            check = Check(stage, "fail", failure.detail, failure.fix)
        except LocsumError as err:
            check = Check(stage, "fail", str(err), "see the message")
        except Exception as err:  # a stage never ends the doctor: what broke is the finding
            where = traceback.extract_tb(err.__traceback__)[-1]
            check = Check(stage, "fail", f"{type(err).__name__}: {err} (at {Path(where.filename).name}:"
                          f"{where.lineno})", "attach the JSON report (--json) to a bug report")
    check.seconds = round(time.perf_counter() - started, 2)
    report.checks.append(check)
    if show is not None:
        show(check)


def _driver() -> str:
    from .backends import cuda

    try:
        cudart = cuda.runtime()
    except LocsumError as err:
        raise Failed(str(err), "install the NVIDIA driver (nvidia-smi must list the GPU) and pip install "
                               "'locsum[gpu]'") from None
    version = cuda.check(cudart.cudaDriverGetVersion(), "cudaDriverGetVersion")
    name, capability = cuda.device()
    major, minor = divmod(int(version), 1000)
    if major < 12:
        raise Failed(f"{name} (compute capability {capability}); the driver supports CUDA {major}.{minor // 10}",
                     "update the NVIDIA driver to 525.60.13 or later (CUDA 12.0): the plugin kernels are PTX 8.0")
    return f"{name}, compute capability {capability}, driver for CUDA {major}.{minor // 10}"


def _onnxruntime(bundles: list[Path]) -> str:
    """The ONNX Runtime backend on device="cuda": it refuses, with the fix, unless its sessions got the CUDA
    provider (not only onnxruntime's list of available providers). It opens the first of `bundles` whose step can
    run there (a step over unit rows runs on the CPU)."""
    from .backends.onnxruntime import OnnxRuntimeBackend
    from .bundle import Bundle

    for bundle in bundles:
        try:
            loaded = Bundle.load(bundle)
        except LocsumError as err:
            raise Failed(str(err), "name a bundle that loads with --bundle; a shipped bundle that does not is "
                                   "damaged or missing: reinstall locsum") from None
        if not loaded.manifest.model.get("unit_rows"):
            break
    else:
        raise Failed(f"every bundle checked ({', '.join(b.name for b in bundles)}) runs its step over unit rows, "
                     "which ONNX Runtime runs on the CPU here", "name a bundle without unit rows with --bundle")
    try:
        backend = OnnxRuntimeBackend(loaded, device="cuda")
    except LocsumError as err:
        raise Failed(str(err), "pip uninstall onnxruntime, then pip install 'locsum[gpu]' (onnxruntime-gpu with "
                               "CUDA 12 and cuDNN 9)") from None
    return f"onnxruntime {backend.ort.__version__}: the sessions run on {backend.providers[0]}"


def _kernels() -> str:
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise Failed("TRITON_INTERPRET=1 is set: the kernels would run interpreted", "unset TRITON_INTERPRET")
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as err:
        raise Failed(f"{err.name} is not installed (needed to run the kernels on their own)",
                     "pip install torch triton (with CUDA) to check the kernels; engines do not need them") from None
    if not torch.cuda.is_available():
        raise Failed(f"torch {torch.__version__} sees no CUDA GPU (a CPU build?)",
                     "install a CUDA build of torch to check the kernels; engines do not need it")
    from .kernels.cases import DTYPES, OPS, TOLERANCE, check

    worst = {}
    for op in OPS:
        for dtype in DTYPES:
            worst[op, dtype] = check(op, dtype, "cuda", cases=20)
            if worst[op, dtype] > TOLERANCE[dtype]:
                raise Failed(f"{op} {dtype}: relative error {worst[op, dtype]:.2e} (tolerance {TOLERANCE[dtype]})",
                             "report it with the JSON report: the kernel is wrong on this GPU")
    return "; ".join(f"{op} {dtype} {error:.1e}" for (op, dtype), error in worst.items())


def _tensorrt() -> str:
    from .backends.tensorrt import TENSORRT_VERSION, import_tensorrt

    try:
        trt = import_tensorrt("pip install 'locsum[gpu]'")
    except LocsumError as err:
        raise Failed(str(err), f"pip install 'locsum[gpu]' (TensorRT {TENSORRT_VERSION} for CUDA 12)") from None
    note = "" if trt.__version__ == TENSORRT_VERSION else f" (this release is tested with {TENSORRT_VERSION})"
    return f"TensorRT {trt.__version__}{note}"


def _plugins() -> str:
    from .backends import cuda
    from .kernels import plugins

    capability = cuda.device()[1]
    plugins.register(capability)
    return f"locsum::PageCombine, DocScaledAttention, SnippetMarginalize for sm_{plugins.target(capability)}"


def _engines(bundle: Path, work: Path) -> str:
    from .exporters.tensorrt import EngineShapes, build_engines

    shapes = EngineShapes(max_units=32, max_unit_len=256, max_beams=2, max_steps=64, max_candidates=512)
    plan = build_engines(bundle, work / f"{bundle.name}-trt", shapes, force=True)
    return ", ".join(g.plan for g in plan.graphs)


def _tokens(bundle: Path, work: Path) -> str:
    from .exporters.tensorrt import prepared_bundle
    from .summarizer import Summarizer

    reference = prepared_bundle(bundle, work / f"{bundle.name}-prepared", max_beams=2)
    options = {"num_beams": 1, "max_length": 32}
    want = Summarizer.from_pretrained(reference, backend="onnxruntime", device="cpu").summarize(TEXT, **options)
    got = Summarizer.from_pretrained(work / f"{bundle.name}-trt", backend="tensorrt").summarize(TEXT, **options)
    if got.token_ids != want.token_ids:
        first = next((i for i, (a, b) in enumerate(zip(got.token_ids, want.token_ids)) if a != b),
                     min(len(got.token_ids), len(want.token_ids)))
        raise Failed(f"the engines' tokens differ from ONNX Runtime's from token {first}",
                     "report it with the JSON report")
    return f"{len(got.token_ids)} greedy tokens equal to ONNX Runtime's on the same graphs"


def shipped_bundles() -> list[Path]:
    """The bundles checked when none is named: the default bundle, then (in a checkout) the others under engines/."""
    from . import summarizer

    first = summarizer.default_bundle()
    return [first, *(p for p in summarizer.shipped_bundles().values() if p.resolve() != first.resolve())]


def run(bundles: list[Path], show: Callable[[Check], None] | None = None) -> Report:
    """Check every stage in order; `bundles` are built into engines and compared (the first whose step runs on
    CUDA also opens an ONNX Runtime CUDA session). `show` is called with each result as it is known."""
    report = Report(environment=environment())
    stage = functools.partial(_stage, report, show=show)
    stage("driver", _driver)
    stage("onnxruntime-cuda", lambda: _onnxruntime(bundles))
    stage("kernels", _kernels)
    stage("tensorrt", _tensorrt)
    stage("plugins", _plugins, needs=("driver", "tensorrt"))
    with tempfile.TemporaryDirectory(prefix="locsum-doctor-") as scratch:
        for bundle in bundles:
            engines, tokens = f"engines:{bundle.name}", f"tokens:{bundle.name}"
            stage(engines, lambda b=bundle: _engines(b, Path(scratch)), needs=("plugins",))
            stage(tokens, lambda b=bundle: _tokens(b, Path(scratch)), needs=(engines,))
    return report


def line(check: Check) -> str:
    """One result as the doctor prints it."""
    text = f"{check.status.upper():<4}  {check.stage:<20} {check.detail}"
    return text + (f"\n      fix: {check.fix}" if check.status == "fail" and check.fix else "")
