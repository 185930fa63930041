"""A GGUF file (llama.cpp's format) read with numpy alone: its metadata, its tensors' names and shapes, and each
tensor dequantized to float32, one at a time.

The tensor types read are `ggml_blocks.TYPES` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL,
IQ4_XS);
a file holding another is refused when it is opened, naming the type and the tensor. Dequantizing is elementwise
float32 arithmetic in a fixed order, so every machine gets the same bits from the same file: the weights a bundle
assembles from it (`base_weights`) are checked by their sha256.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .errors import BundleError, BundleNotFoundError
from .ggml_blocks import UnsupportedTypeError, block_type, dequantize

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (GGUF lists the innermost dimension first)
    type: int  # ggml type
    offset: int  # from the start of the data section

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        block = block_type(self.type, f"tensor {self.name!r}")
        return self.size // block.values * block.nbytes


class GGUFFile:
    """The metadata and tensors of the GGUF file at `path`; BundleError when it is not one this reads."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise BundleNotFoundError(f"{self.path} does not exist")
        try:
            with open(self.path, "rb") as handle:
                self.metadata, self.tensors, self.data_start = _read_header(handle)
        except UnsupportedTypeError as error:
            raise UnsupportedTypeError(f"{self.path}: {error}") from None
        except (struct.error, UnicodeDecodeError, ValueError, OverflowError, MemoryError) as error:
            raise BundleError(f"{self.path} is not a readable GGUF file ({error})") from None
        end = max((t.offset + t.nbytes for t in self.tensors.values()), default=0)
        if self.data_start + end > self.path.stat().st_size:
            raise BundleError(f"{self.path} is truncated: its tensors end past the end of the file")

    def field(self, key: str) -> Any:
        if key not in self.metadata:
            raise BundleError(f"{self.path}: GGUF metadata {key!r} is missing")
        return self.metadata[key]

    def array(self, name: str) -> np.ndarray:
        """The tensor `name` dequantized to a new float32 array of its shape."""
        info = self.tensors.get(name)
        if info is None:
            raise BundleError(f"{self.path} has no tensor {name!r}")
        raw = np.fromfile(self.path, dtype=np.uint8, count=info.nbytes, offset=self.data_start + info.offset)
        return dequantize(raw, info.type, info.size).reshape(info.shape)


def _read(handle: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("unexpected end of file")
    return struct.unpack(fmt, data)[0]


def _string(handle: BinaryIO) -> str:
    length = _read(handle, "<Q")
    data = handle.read(length)
    if len(data) != length:
        raise ValueError("unexpected end of file in a string")
    return data.decode("utf-8")


def _value(handle: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(handle, _SCALARS[kind])
    if kind == _STRING:
        return _string(handle)
    if kind == _ARRAY:
        item, count = _read(handle, "<I"), _read(handle, "<Q")
        if item in _SCALARS and item != 7:
            fmt = _SCALARS[item]
            data = handle.read(struct.calcsize(fmt) * count)
            if len(data) != struct.calcsize(fmt) * count:
                raise ValueError("unexpected end of file in an array")
            return np.frombuffer(data, dtype=np.dtype(fmt)).tolist()
        return [_value(handle, item) for _ in range(count)]
    raise ValueError(f"unknown metadata value type {kind}")


def _read_header(handle: BinaryIO) -> tuple[dict[str, Any], dict[str, TensorInfo], int]:
    if handle.read(4) != MAGIC:
        raise ValueError("it does not start with GGUF's magic")
    version = _read(handle, "<I")
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version}; versions {list(VERSIONS)} are read")
    tensor_count, field_count = _read(handle, "<Q"), _read(handle, "<Q")
    metadata = {}
    for _ in range(field_count):
        key = _string(handle)
        metadata[key] = _value(handle, _read(handle, "<I"))
    tensors = {}
    for _ in range(tensor_count):
        name = _string(handle)
        dims = [_read(handle, "<Q") for _ in range(_read(handle, "<I"))]
        info = TensorInfo(name, tuple(int(n) for n in reversed(dims)), _read(handle, "<I"), _read(handle, "<Q"))
        if info.size % block_type(info.type, f"tensor {name!r}").values:
            raise ValueError(f"tensor {name!r} has {info.size} values, not whole blocks of its type")
        tensors[name] = info
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    if alignment <= 0:
        raise ValueError(f"general.alignment is {alignment}")
    return metadata, tensors, handle.tell() + (-handle.tell() % alignment)
