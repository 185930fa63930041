"""A stand-in for TensorRT's compiled module, so that NVIDIA's own `tensorrt.plugin` package runs without a GPU.

The `tensorrt-cu12-bindings` wheel installs the package `tensorrt_bindings`: the compiled bindings
(`tensorrt.so`, which needs TensorRT's libraries, absent here) and the pure-Python `plugin` package that defines
`tensorrt.plugin` (registration, schema validation, shape expressions, autotuning, the ahead-of-time plugin
class). `load()` makes a module named `tensorrt` whose package path is that installed directory, so `import
tensorrt.plugin` runs NVIDIA's files as installed, and fills it with what `tensorrt.plugin` reads from the
compiled module: the enums, the plugin interface base classes, plugin fields and the plugin registry, tensor
descriptors, and the shape-expression builder.

Nothing here is NVIDIA's code. Expressions carry a value as well as whether they are build-time constants, so a
test can check what TensorRT would compute from them (grid sizes, kernel arguments) at concrete shapes.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import importlib.metadata
import importlib.util
import operator
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BINDINGS = "tensorrt-cu12-bindings"


def bindings_dir() -> Path | None:
    """Where the wheel's `tensorrt_bindings` package is installed (its `__init__` is not run), or None."""
    spec = importlib.util.find_spec("tensorrt_bindings")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


DataType = enum.Enum("DataType", "FLOAT HALF INT8 INT32 BOOL UINT8 FP8 BF16 INT64 INT4 FP4 E8M0")
TensorFormat = enum.Enum("TensorFormat", "LINEAR CHW2 HWC8 CHW4 CHW16 CHW32 DHWC8 CDHW32 HWC DLA_LINEAR DLA_HWC4 "
                                         "HWC16 DHWC")
PluginFieldType = enum.Enum("PluginFieldType", "FLOAT16 FLOAT32 FLOAT64 INT8 INT16 INT32 CHAR DIMS UNKNOWN BF16 "
                                               "INT64 FP8 INT4 FP4")
DimensionOperation = enum.Enum("DimensionOperation", "SUM PROD MAX MIN SUB EQUAL LESS FLOOR_DIV CEIL_DIV")
QuickPluginCreationRequest = enum.Enum("QuickPluginCreationRequest", "UNKNOWN PREFER_JIT PREFER_AOT STRICT_JIT "
                                                                     "STRICT_AOT")
TensorRTPhase = enum.Enum("TensorRTPhase", "BUILD RUNTIME")
PluginArgType = enum.Enum("PluginArgType", "INT")
PluginArgDataType = enum.Enum("PluginArgDataType", "INT8 INT16 INT32")

NUMPY = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8, DataType.INT32: np.int32,
         DataType.BOOL: np.bool_, DataType.UINT8: np.uint8, DataType.INT64: np.int64}

OPERATIONS = {
    DimensionOperation.SUM: operator.add, DimensionOperation.PROD: operator.mul, DimensionOperation.MAX: max,
    DimensionOperation.MIN: min, DimensionOperation.SUB: operator.sub,
    DimensionOperation.EQUAL: lambda a, b: int(a == b), DimensionOperation.LESS: lambda a, b: int(a < b),
    DimensionOperation.FLOOR_DIV: operator.floordiv, DimensionOperation.CEIL_DIV: lambda a, b: -(-a // b),
}


class Logger:
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = range(5)
    Severity = int

    def __init__(self, severity: int = 1) -> None:
        self.messages: list[tuple[int, str]] = []

    def log(self, severity: int, message: str) -> None:
        self.messages.append((severity, message))


class IDimensionExpr:
    """One dimension: its value at the shapes under test, and whether TensorRT would know it at build time."""

    def __init__(self, value: int, constant: bool) -> None:
        self.value, self.constant = int(value), constant

    def is_constant(self) -> bool:
        return self.constant

    def get_constant_value(self) -> int:
        if not self.constant:
            raise RuntimeError("not a build-time constant")
        return self.value


class IExprBuilder:
    def constant(self, value: int) -> IDimensionExpr:
        return IDimensionExpr(value, True)

    def operation(self, op: DimensionOperation, first: IDimensionExpr, second: IDimensionExpr) -> IDimensionExpr:
        return IDimensionExpr(OPERATIONS[op](first.value, second.value), first.constant and second.constant)

    def declare_size_tensor(self, index: int, opt: IDimensionExpr, upper: IDimensionExpr) -> IDimensionExpr:
        return IDimensionExpr(opt.value, False)


class DimsExprs(list):
    def __init__(self, length: int) -> None:
        super().__init__([None] * length)


class Dims(tuple):
    MAX_DIMS = 8


@dataclass
class PluginTensorDesc:
    dims: tuple[int, ...] = ()
    type: Any = DataType.FLOAT
    format: Any = TensorFormat.LINEAR
    scale: float = 1.0


@dataclass
class DynamicPluginTensorDesc:
    desc: PluginTensorDesc = field(default_factory=PluginTensorDesc)
    min: tuple[int, ...] = ()
    opt: tuple[int, ...] = ()
    max: tuple[int, ...] = ()


class PluginField:
    def __init__(self, name: str = "", data: Any = None, type: Any = PluginFieldType.UNKNOWN) -> None:
        self.name, self.data, self.type = name, data, type


class PluginFieldCollection(list):
    pass


class Interface:
    """The plugin interfaces (`IPluginV3`, `IPluginCreatorV3Quick`, ...): base classes with nothing to do here."""

    def __init__(self) -> None:
        pass


class ISymExpr(Interface):
    pass


class ITensor:
    pass


class PluginRegistry:
    def __init__(self) -> None:
        self.creators: dict[tuple[str, str, str], Any] = {}

    def register_creator(self, creator: Any, namespace: str) -> bool:
        self.creators[creator.name, creator.plugin_version, namespace] = creator
        return True

    def get_creator(self, name: str, version: str, namespace: str = "") -> Any:
        return self.creators.get((name, version, namespace))


class SymExprSetter:
    """What TensorRT hands `get_launch_params` to receive the kernel's scalar arguments."""

    def __init__(self) -> None:
        self.nbSymExprs = 0
        self.values: dict[int, Any] = {}

    def __setitem__(self, index: int, value: Any) -> None:
        self.values[index] = value


def load() -> types.ModuleType:
    """Install the stand-in as `tensorrt` (in `sys.modules`) and import NVIDIA's `tensorrt.plugin` through it;
    returns `tensorrt.plugin`. `unload()` removes both."""
    directory = bindings_dir()
    if directory is None:
        raise ImportError(f"{BINDINGS} is not installed (pip install -e '.[test]')")
    module = types.ModuleType("tensorrt")
    module.__path__ = [str(directory)]
    module.__version__ = importlib.metadata.version(BINDINGS)
    registry = PluginRegistry()
    names = dict(
        DataType=DataType, TensorFormat=TensorFormat, PluginFieldType=PluginFieldType,
        DimensionOperation=DimensionOperation, QuickPluginCreationRequest=QuickPluginCreationRequest,
        TensorRTPhase=TensorRTPhase, PluginArgType=PluginArgType, PluginArgDataType=PluginArgDataType,
        Logger=Logger, ILogger=Logger, IDimensionExpr=IDimensionExpr, IExprBuilder=IExprBuilder, DimsExprs=DimsExprs,
        Dims=Dims, PluginTensorDesc=PluginTensorDesc, DynamicPluginTensorDesc=DynamicPluginTensorDesc,
        PluginField=PluginField, PluginFieldCollection=PluginFieldCollection, ISymExpr=ISymExpr, ITensor=ITensor,
        get_plugin_registry=lambda: registry, nptype=lambda dtype: NUMPY[dtype],
        float32=DataType.FLOAT, float16=DataType.HALF, int8=DataType.INT8, int32=DataType.INT32,
        int64=DataType.INT64, bool=DataType.BOOL, uint8=DataType.UINT8, bfloat16=DataType.BF16,
    )
    for interface in ("IPluginV3", "IPluginV3QuickCore", "IPluginV3QuickBuild", "IPluginV3QuickRuntime",
                      "IPluginV3QuickAOTBuild", "IPluginCreatorV3Quick"):
        names[interface] = type(interface, (Interface,), {})
    for name, value in names.items():
        setattr(module, name, value)
    unload()
    sys.modules["tensorrt"] = module
    return importlib.import_module("tensorrt.plugin")


@contextlib.contextmanager
def loaded() -> Iterator[types.ModuleType]:
    """`load()` for the length of a block; the stand-in is removed after it."""
    try:
        yield load()
    finally:
        unload()


def unload() -> None:
    for name in [n for n in sys.modules if n == "tensorrt" or n.startswith("tensorrt.")]:
        del sys.modules[name]
