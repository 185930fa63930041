"""Stand-ins for what a GPU machine adds, so that the TensorRT export and backend run their own code on the CPU:

- `CudaRuntime`: cuda-python's runtime bindings (`cudaMalloc`, the copies, streams, device properties) over host
  memory: a "device address" is the address of an aligned host block, copies are `memmove`s;
- the builder, parser and runtime of TensorRT's compiled module, added to `trt_standin`'s: the "plan" a build
  serializes is the prepared ONNX graph it parsed, and an engine runs it with ONNX Runtime on the tensors at the
  addresses bound to it, writing its outputs to theirs.

What this proves is the locsum side: which buffers are allocated and at what sizes, which addresses are bound,
what is copied where (encoder runs into the decoder's grid, caches swapped and re-laid out, each beam's best tokens
downloaded). What TensorRT itself computes is ONNX Runtime's here; `locsum doctor` checks it on a GPU.
"""

from __future__ import annotations

import ctypes
import enum
import io
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import trt_standin

SUCCESS = "cudaSuccess"
ALIGN = 256


class CudaRuntime:
    """cuda-python's `cuda.bindings.runtime`, over host memory. `allocated` maps each live address to its size."""

    cudaError_t = SimpleNamespace(cudaSuccess=SUCCESS)
    cudaMemcpyKind = enum.Enum("cudaMemcpyKind", "cudaMemcpyHostToDevice cudaMemcpyDeviceToHost "
                                                 "cudaMemcpyDeviceToDevice")

    def __init__(self, name: str = "NVIDIA H100 80GB HBM3", capability: tuple[int, int] = (9, 0)) -> None:
        self.name, self.capability = name, capability
        self.blocks: dict[int, np.ndarray] = {}
        self.allocated: dict[int, int] = {}

    def cudaGetDeviceCount(self):
        return SUCCESS, 1

    def cudaDriverGetVersion(self):
        return SUCCESS, 12040

    def cudaGetDeviceProperties(self, device: int):
        return SUCCESS, SimpleNamespace(name=self.name.encode(), major=self.capability[0], minor=self.capability[1])

    def cudaStreamCreate(self):
        return SUCCESS, 1

    def cudaStreamSynchronize(self, stream):
        return (SUCCESS,)

    def cudaMalloc(self, nbytes: int):
        block = np.zeros(nbytes + ALIGN, dtype=np.uint8)
        address = block.ctypes.data + (-block.ctypes.data) % ALIGN
        self.blocks[address], self.allocated[address] = block, nbytes
        return SUCCESS, address

    def cudaFree(self, address: int):
        self.blocks.pop(address, None), self.allocated.pop(address, None)
        return (SUCCESS,)

    def inside(self, address: int, nbytes: int) -> bool:
        """Whether [address, address + nbytes) lies in one allocation (a device address, never host memory)."""
        return any(start <= address and address + nbytes <= start + size for start, size in self.allocated.items())

    def cudaMemcpyAsync(self, destination: int, source: int, nbytes: int, kind, stream):
        if kind != self.cudaMemcpyKind.cudaMemcpyHostToDevice:
            assert self.inside(source, nbytes), f"read of {nbytes} bytes outside device memory"
        if kind != self.cudaMemcpyKind.cudaMemcpyDeviceToHost:
            assert self.inside(destination, nbytes), f"write of {nbytes} bytes outside device memory"
        ctypes.memmove(destination, source, nbytes)
        return (SUCCESS,)

    def cudaMemcpy2DAsync(self, destination, pitch, source, source_pitch, width, rows, kind, stream):
        assert self.inside(destination, pitch * (rows - 1) + width) and self.inside(source, source_pitch * (rows - 1)
                                                                                    + width)
        for row in range(rows):
            ctypes.memmove(destination + row * pitch, source + row * source_pitch, width)
        return (SUCCESS,)

    def cudaMemsetAsync(self, address, value, nbytes, stream):
        assert self.inside(address, nbytes)
        ctypes.memset(address, value, nbytes)
        return (SUCCESS,)


def read(runtime: CudaRuntime, address: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    assert runtime.inside(address, nbytes), f"an engine read {nbytes} bytes outside device memory"
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype).reshape(shape).copy()


TYPES = {onnx.TensorProto.FLOAT: trt_standin.DataType.FLOAT, onnx.TensorProto.FLOAT16: trt_standin.DataType.HALF,
         onnx.TensorProto.INT32: trt_standin.DataType.INT32, onnx.TensorProto.INT64: trt_standin.DataType.INT64,
         onnx.TensorProto.BOOL: trt_standin.DataType.BOOL}
TensorIOMode = enum.Enum("TensorIOMode", "NONE INPUT OUTPUT")


class Engine:
    """A "plan": the prepared ONNX graph, run by ONNX Runtime."""

    def __init__(self, plan: bytes, runtime: CudaRuntime) -> None:
        import onnxruntime as ort

        model = onnx.load_from_string(plan)
        self.model, self.runtime = model, runtime
        self.session = ort.InferenceSession(plan, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in model.graph.input]
        self.outputs = [o.name for o in model.graph.output]
        self.types = {v.name: TYPES[v.type.tensor_type.elem_type] for v in [*model.graph.input, *model.graph.output]}
        self.names = self.inputs + self.outputs
        self.num_io_tensors = len(self.names)

    def infer_shapes(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]] | None:
        """The outputs' shapes at these input shapes as ONNX shape inference (with constant folding of shape
        arithmetic) finds them, or None where it leaves one open."""
        for value in self.model.graph.input:
            for dim, size in zip(value.type.tensor_type.shape.dim, shapes[value.name]):
                dim.ClearField("dim_param")
                dim.dim_value = size
        del self.model.graph.value_info[:]
        inferred = onnx.shape_inference.infer_shapes(self.model, data_prop=True).graph.output
        found = {v.name: tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
                 for v in inferred}
        return None if any(None in shape for shape in found.values()) else found

    def get_tensor_name(self, index: int) -> str:
        return self.names[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name in self.inputs else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str):
        return self.types[name]

    def create_execution_context(self) -> Context:
        return Context(self)


class Context:
    """An execution context: input shapes and the address of every tensor; running reads the inputs there and
    writes the outputs there."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.shapes, self.addresses = engine, {}, {}
        self.output_shapes: dict[tuple, dict[str, tuple[int, ...]]] = {}
        self.runs = 0

    def set_input_shape(self, name: str, shape) -> bool:
        self.shapes[name] = tuple(int(d) for d in shape)
        return True

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = address
        return address % ALIGN == 0

    def _key(self) -> tuple:
        return tuple(self.shapes[name] for name in self.engine.inputs)

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        if name in self.engine.inputs:
            return self.shapes[name]
        if self._key() not in self.output_shapes:  # what TensorRT infers: ONNX's shape inference, else a run on zeros
            found = self.engine.infer_shapes(self.shapes)
            if found is None:
                feeds = {n: np.zeros(self.shapes[n], trt_standin.NUMPY[self.engine.types[n]])
                         for n in self.engine.inputs}
                found = dict(zip(self.engine.outputs, (v.shape for v in self.engine.session.run(None, feeds))))
            self.output_shapes[self._key()] = found
        return self.output_shapes[self._key()][name]

    def execute_async_v3(self, stream: int) -> bool:
        runtime, engine = self.engine.runtime, self.engine
        feeds = {n: read(runtime, self.addresses[n], self.shapes[n], trt_standin.NUMPY[engine.types[n]])
                 for n in engine.inputs}
        outputs = engine.session.run(None, feeds)
        self.output_shapes[self._key()] = {n: v.shape for n, v in zip(engine.outputs, outputs)}
        for name, value in zip(engine.outputs, outputs):
            value = np.ascontiguousarray(value, trt_standin.NUMPY[engine.types[name]])
            assert runtime.inside(self.addresses[name], value.nbytes), f"{name} written outside device memory"
            ctypes.memmove(self.addresses[name], value.ctypes.data, value.nbytes)
        self.runs += 1
        return True


class Builder:
    """Parses a prepared graph file and "builds" it: the plan is the graph, once its profile is checked."""

    def __init__(self, logger) -> None:
        self.profiles = []

    def create_network(self, flags: int = 0):
        return SimpleNamespace(path=None, flags=flags)

    def create_builder_config(self):
        return SimpleNamespace(profiles=[], add_optimization_profile=lambda p: None)

    def create_optimization_profile(self):
        shapes = {}
        profile = SimpleNamespace(shapes=shapes, set_shape=lambda name, low, opt, high: shapes.__setitem__(
            name, (tuple(low), tuple(opt), tuple(high))))
        self.profiles.append(profile)
        return profile

    def build_serialized_network(self, network, config) -> bytes:
        model = onnx.load(network.path)
        names = {i.name for i in model.graph.input}
        shapes = self.profiles[-1].shapes
        assert set(shapes) == names, "every input needs a profile"
        for name, (low, opt, high) in shapes.items():
            assert all(a <= b <= c for a, b, c in zip(low, opt, high)), f"{name}: min <= opt <= max"
        buffer = io.BytesIO()
        onnx.save(model, buffer)
        return buffer.getvalue()


class OnnxParser:
    def __init__(self, network, logger) -> None:
        self.network, self.num_errors, self.flags = network, 0, set()

    def set_flag(self, flag) -> None:
        self.flags.add(flag)

    def parse_from_file(self, path: str) -> bool:
        self.network.path = path
        return True


DEVICE: list[CudaRuntime] = []  # the runtime `install` made, whose memory engines read and write


class Runtime:
    def __init__(self, logger) -> None:
        pass

    def deserialize_cuda_engine(self, plan: bytes) -> Engine:
        return Engine(plan, DEVICE[-1])


def install(monkeypatch: Any) -> CudaRuntime:
    """Add TensorRT's builder and runtime to the stand-in `tensorrt` (inside `trt_standin.loaded()`) and put the
    cuda-python stand-in behind `locsum_sdk.backends.cuda`; returns the runtime, whose `allocated` shows the
    device memory in use."""
    from locsum_sdk.backends import cuda

    runtime = CudaRuntime()
    trt = sys.modules["tensorrt"]
    for name, value in dict(Builder=Builder, OnnxParser=OnnxParser, Runtime=Runtime, TensorIOMode=TensorIOMode,
                            NetworkDefinitionCreationFlag=enum.IntEnum("NetworkDefinitionCreationFlag",
                                                                       "STRONGLY_TYPED"),
                            OnnxParserFlag=enum.IntEnum("OnnxParserFlag", "ENABLE_PLUGIN_OVERRIDE")).items():
        setattr(trt, name, value)
    DEVICE[:] = [runtime]
    monkeypatch.setattr(cuda, "runtime", lambda: runtime)
    return runtime


def doctor_report(monkeypatch: Any, bundles: list) -> Any:
    """`locsum doctor`'s report on `bundles` over the stand-ins for TensorRT (`trt_standin.loaded()`) and cuda-python
    (`install`)."""
    from locsum_sdk import doctor

    with trt_standin.loaded():
        install(monkeypatch)
        return doctor.run(bundles)
