"""Model kinds: one name in one registry, leading to what the runtime needs to know of a kind (no torch here).

A kind declares its revision (bumped when its graphs or unit layout change), its unit options (a frozen, validated
dataclass) and its graphs' IO: names, dtypes and dynamic axes of every input and output, from the model config.
That declaration is the one the exporter writes, the manifest records and the backends check. The torch side of
a kind (modeling, loaders, training objective) registers under the same name in `locsum_sdk.modeling`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import LocsumError, OptionError

ONNX_TYPES = {"int64": "int64", "float32": "float", "bool": "bool"}  # dtype -> ONNX element type name
DTYPES = tuple(ONNX_TYPES)


@dataclass(frozen=True)
class TensorIO:
    """One input or output of a graph."""

    name: str
    dtype: str  # one of DTYPES
    axes: dict[int, str]  # dynamic axes: position -> name (the other dimensions are fixed by the model)

    @property
    def onnx_type(self) -> str:
        """The type ONNX Runtime reports for it, e.g. 'tensor(int64)'."""
        return f"tensor({ONNX_TYPES[self.dtype]})"


@dataclass(frozen=True)
class GraphIO:
    """What one graph of a kind takes and returns."""

    file: str
    inputs: tuple[TensorIO, ...]
    outputs: tuple[TensorIO, ...]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    @property
    def axes(self) -> dict[str, dict[int, str]]:
        return {t.name: dict(t.axes) for t in self.inputs + self.outputs if t.axes}


@dataclass(frozen=True)
class Kind:
    """A model kind as the runtime knows it."""

    name: str
    revision: int  # bumped whenever the kind's graphs or unit layout change
    unit_options: type  # frozen dataclass of the kind's unit options
    graphs: Callable[[dict[str, Any]], dict[str, GraphIO]]  # model config -> graph name -> IO declaration


REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    if kind.name in REGISTRY:
        raise ValueError(f"kind {kind.name!r} is registered twice")
    REGISTRY[kind.name] = kind
    return kind


def names() -> tuple[str, ...]:
    return tuple(sorted(REGISTRY))


def get(name: object, error: type[LocsumError] = OptionError) -> Kind:
    """The registered kind `name`, or `error` listing the known ones."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise error(f"kind {name!r} is not known; this locsum runs {list(names())}")
    return REGISTRY[name]


from . import pagesum  # noqa: E402,F401  registers the kinds

__all__ = ["GraphIO", "Kind", "REGISTRY", "TensorIO", "get", "names", "register"]
