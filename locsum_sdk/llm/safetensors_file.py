"""A safetensors file read lazily with numpy alone: the header once, then one tensor at a time from its offset, so
reading a model holds at most one of its tensors in memory (never unpickling anything)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BundleError, BundleNotFoundError

_FLOATS = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
_WIDTH = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
MAX_HEADER = 100 << 20  # a header over 100 MB is no model's


class SafetensorsFile:
    """The tensors of the safetensors file at `path`: `names`, `shape(name)`, `array(name)` (float32)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise BundleNotFoundError(f"weights file {self.path} does not exist")
        size = self.path.stat().st_size
        try:
            with open(self.path, "rb") as handle:
                length = struct.unpack("<Q", handle.read(8))[0]
                if length > min(size - 8, MAX_HEADER):
                    raise ValueError("its header runs past the end of the file")
                header = json.loads(handle.read(length))
            if not isinstance(header, dict):
                raise ValueError("its header is not a JSON object")
            self.metadata: dict[str, Any] = header.pop("__metadata__", None) or {}
            self.entries = {name: _entry(name, entry, size - 8 - length) for name, entry in header.items()}
        except (OSError, struct.error, ValueError, TypeError, KeyError, UnicodeDecodeError) as error:
            raise BundleError(f"{self.path} is not a readable safetensors file ({error})") from None
        self.data_start = 8 + length

    @property
    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name][1]

    def is_float(self, name: str) -> bool:
        return self.entries[name][0] in _FLOATS

    def array(self, name: str) -> np.ndarray:
        """The tensor `name` as a new float32 array (bfloat16 and float16 widened); BundleError for an integer one."""
        dtype, shape, begin, end = self.entries[name]
        if dtype not in _FLOATS:
            raise BundleError(f"{self.path}: tensor {name!r} is {dtype}, not a floating-point weight")
        raw = np.fromfile(self.path, dtype=np.uint8, count=end - begin, offset=self.data_start + begin)
        if dtype == "BF16":
            wide = raw.view("<u2").astype(np.uint32)
            wide <<= 16  # in place: the widened tensor is held once
            return wide.view(np.float32).reshape(shape)
        return raw.view(_FLOATS[dtype]).astype(np.float32).reshape(shape)


def _entry(name: str, entry: Any, data_size: int) -> tuple[str, tuple[int, ...], int, int]:
    dtype, shape = entry["dtype"], tuple(int(n) for n in entry["shape"])
    begin, end = (int(n) for n in entry["data_offsets"])
    if dtype not in _WIDTH:
        raise ValueError(f"tensor {name!r} has dtype {dtype!r}")
    if min(shape, default=1) < 0 or not 0 <= begin <= end <= data_size:
        raise ValueError(f"tensor {name!r} lies outside the file")
    if end - begin != int(np.prod(shape, dtype=np.int64)) * _WIDTH[dtype]:
        raise ValueError(f"tensor {name!r} has {end - begin} bytes for its shape {list(shape)}")
    return dtype, shape, begin, end
