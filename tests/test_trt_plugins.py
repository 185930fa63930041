"""The locsum TensorRT plugins through NVIDIA's own `tensorrt.plugin` (the pure-Python package of the
`tensorrt-cu12-bindings` wheel the `gpu` extra pins), as the ONNX parser and the builder drive them: registration
and its schema validators, the plugin creator, output types (with TensorRT's "fake" shape expressions), output
shapes, the autotune combinations, tactics, the ahead-of-time implementation (a Triton kernel compiled to PTX for
the build GPU, with no driver) and the kernel TensorRT would embed. The compiled bindings need TensorRT's
libraries, so `trt_standin` stands in for them (and only them)."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import trt_contract
import trt_standin

from locsum_sdk.errors import ExportError
from locsum_sdk.kernels import plugins

pytest.importorskip("triton")
if trt_standin.bindings_dir() is None:
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        pytest.fail(f"{trt_standin.BINDINGS} is not installed: pip install -e '.[test]'", pytrace=False)
    pytest.skip(f"{trt_standin.BINDINGS} has no wheel for this platform", allow_module_level=True)

@pytest.fixture(scope="module")
def driven():
    """Every plugin in both precisions driven through `tensorrt.plugin` (tests/trt_contract.py), in a process
    without TRITON_INTERPRET so that the kernels compile: each case's "ok" or traceback."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    tests = Path(__file__).resolve().parent
    env["PYTHONPATH"] = os.pathsep.join([str(tests), str(tests.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(tests / "trt_contract.py")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("op", sorted(trt_contract.CASES))
@pytest.mark.parametrize("precision", trt_contract.PRECISIONS)
def test_plugin_through_tensorrt_plugin(driven, op, precision):
    """Creator, output types (from "fake" shape expressions), output shapes, type combinations, tactics, launch
    parameters and scalar arguments evaluated at concrete shapes, and the embedded PTX (sm_90, PTX_VERSION, an entry
    taking inputs, sizes and outputs only)."""
    assert driven["driven"][f"{op}-{precision}"] == "ok", driven["driven"][f"{op}-{precision}"]


# PTX ISA version -> the CUDA release that introduced it -> the oldest Linux driver that JIT-compiles it (NVIDIA's
# PTX ISA release notes and CUDA toolkit release notes, table 3). A driver loads PTX of its own CUDA release or
# older; CUDA's minor-version compatibility does not extend to PTX.
PTX_DRIVER = {"8.0": ("12.0", "525.60.13"), "8.1": ("12.1", "530.30.02"), "8.2": ("12.2", "535.54.03"),
              "8.3": ("12.3", "545.23.06"), "8.4": ("12.4", "550.54.14"), "8.5": ("12.5", "555.42.02")}


@pytest.mark.parametrize("capability", trt_contract.CAPABILITIES)
@pytest.mark.parametrize("op", sorted(trt_contract.CASES))
def test_kernels_compile_ahead_for_every_gpu(driven, op, capability):
    """Every kernel, fp32 and fp16, compiled with no driver for sm_80, sm_89 and sm_90: PTX 8.0, which drivers from
    525.60.13 load (the oldest TensorRT 10.16 for CUDA 12 supports); an entry taking the input pointers, the int32
    sizes and the output pointers, in TensorRT's order, with the scratch pointers this Triton appends removed (the
    kernels never read them)."""
    for dtype in ("fp32", "fp16"):
        found = driven["compiled"][f"{op}-{dtype}-sm_{capability}"]
        assert found["target"] in (f"sm_{capability}", f"sm_{capability}a")
        assert PTX_DRIVER[found["version"]] == ("12.0", plugins.MIN_DRIVER)
        assert found["parameters"] == found["expected"]
        assert found["triton_parameters"] >= len(found["expected"])


@pytest.fixture
def trtp():
    """NVIDIA's tensorrt.plugin over the stand-in, with the locsum plugins registered for an H100 (sm_90)."""
    with trt_standin.loaded() as module:
        plugins.register("9.0")
        yield module


def test_registration_is_once_per_gpu(trtp):
    plugins.register("9.0")  # again for the same GPU: nothing to do
    with pytest.raises(ExportError, match="new process"):
        plugins.register("8.0")
    with pytest.raises(ExportError, match="major.minor"):
        plugins.target("nine")


def test_refused_schema_is_a_typed_error(monkeypatch):
    """A schema `tensorrt.plugin` refuses surfaces as an ExportError naming it, never a bare TypeError."""
    with trt_standin.loaded() as trtp:
        def refuse(plugin_id, lazy_register=False):
            raise TypeError("issubclass() arg 1 must be a class")

        monkeypatch.setattr(trtp, "register", refuse)
        with pytest.raises(ExportError, match="TensorRT refused the locsum plugins.*issubclass"):
            plugins.register("9.0")
        assert trtp not in plugins._registered


def test_trim_entry_keeps_what_tensorrt_passes():
    ptx = (".visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0,\n\t.param .u32 k_param_1,\n"
           "\t.param .u64 .ptr .global .align 1 k_param_2,\n\t.param .u64 .ptr .global .align 1 k_param_3\n)\n"
           "{\n\tld.param.u64 %rd1, [k_param_0];\n\tld.param.u32 %r1, [k_param_1];\n}\n")
    trimmed = plugins.trim_entry(ptx, "k", 2)
    assert trt_contract.entry_parameters(trimmed, "k") == ["ptr", "u32"] and "k_param_2" not in trimmed
    with pytest.raises(ExportError, match="scratch"):
        plugins.trim_entry(ptx, "k", 1)
    assert trt_contract.entry_parameters(plugins.trim_entry(ptx, "k", 4), "k") == ["ptr", "u32", "ptr", "ptr"]
