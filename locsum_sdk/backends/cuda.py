"""The little of CUDA the TensorRT backend needs, through cuda-python's runtime bindings: one stream, device
buffers, and copies between host arrays and device memory (plain, strided and device to device).

Imported by the TensorRT backend, and by the ONNX Runtime backend on CUDA for the GPU's free memory; `runtime()`
raises `BackendUnavailableError` where cuda-python or a GPU is missing.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..errors import BackendError, BackendUnavailableError


@functools.cache
def runtime() -> Any:
    """cuda-python's runtime module (`cuda.bindings.runtime`, or `cuda.cudart` before cuda-python 12.6)."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart
        except ImportError:
            raise BackendUnavailableError(
                "cuda-python is not installed (the tensorrt backend needs it): pip install 'locsum[gpu]' on a machine "
                "with an NVIDIA GPU"
            ) from None
    error, count = cudart.cudaGetDeviceCount()
    if error != cudart.cudaError_t.cudaSuccess or count < 1:
        raise BackendUnavailableError(f"no CUDA GPU is visible ({error}); the tensorrt backend needs one")
    return cudart


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-python call's (error, value...) tuple, raising BackendError on a CUDA error."""
    cudart = runtime()
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != cudart.cudaError_t.cudaSuccess:
        raise BackendError(f"CUDA failed in {what}: {error}; if memory ran out, lower the engines' maxima or the "
                           "batch, or summarize fewer units at once")
    return values[0] if len(values) == 1 else tuple(values)


def device() -> tuple[str, str]:
    """Device 0's name and compute capability ("major.minor")."""
    cudart = runtime()
    properties = check(cudart.cudaGetDeviceProperties(0), "cudaGetDeviceProperties")
    name = properties.name.decode(errors="replace") if isinstance(properties.name, bytes) else str(properties.name)
    return name.rstrip("\0"), f"{properties.major}.{properties.minor}"


class Stream:
    """One CUDA stream: every copy and every engine run of a backend is queued on it, in order."""

    def __init__(self) -> None:
        self.cudart = runtime()
        self.handle = check(self.cudart.cudaStreamCreate(), "cudaStreamCreate")

    @property
    def pointer(self) -> int:
        return int(self.handle)

    def synchronize(self) -> None:
        check(self.cudart.cudaStreamSynchronize(self.handle), "cudaStreamSynchronize")


class DeviceBuffer:
    """`nbytes` of device memory, allocated once and freed with the object."""

    def __init__(self, nbytes: int) -> None:
        self.cudart = runtime()
        self.nbytes = max(int(nbytes), 1)
        self.pointer = int(check(self.cudart.cudaMalloc(self.nbytes), f"cudaMalloc({self.nbytes})"))

    def upload(self, array: np.ndarray, stream: Stream, offset: int = 0) -> None:
        """Copy a host array into the buffer at `offset` bytes (asynchronous on `stream`; keep `array` alive
        until the stream is synchronized)."""
        array = np.ascontiguousarray(array)
        self._fits(offset + array.nbytes)
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        check(self.cudart.cudaMemcpyAsync(self.pointer + offset, array.ctypes.data, array.nbytes, kind,
                                          stream.handle), "cudaMemcpyAsync (to the device)")

    def download(self, array: np.ndarray, stream: Stream, offset: int = 0) -> np.ndarray:
        """Copy the buffer's bytes at `offset` into the contiguous host array `array`, and wait for them."""
        self._fits(offset + array.nbytes)
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        check(self.cudart.cudaMemcpyAsync(array.ctypes.data, self.pointer + offset, array.nbytes, kind,
                                          stream.handle), "cudaMemcpyAsync (to the host)")
        stream.synchronize()
        return array

    def copy_rows(self, source: DeviceBuffer, rows: int, source_pitch: int, pitch: int, width: int,
                  stream: Stream) -> None:
        """Device-to-device strided copy: `rows` rows of `width` bytes, `source_pitch` apart in `source` and `pitch`
        apart here (a cache whose capacity grew keeps each beam's positions where they were)."""
        self._fits(rows * pitch)
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        check(self.cudart.cudaMemcpy2DAsync(self.pointer, pitch, source.pointer, source_pitch, width, rows, kind,
                                            stream.handle), "cudaMemcpy2DAsync")

    def copy_to(self, pointer: int, nbytes: int, stream: Stream) -> None:
        """Device-to-device copy of this buffer's first `nbytes` to the device address `pointer`."""
        self._fits(nbytes)
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        check(self.cudart.cudaMemcpyAsync(pointer, self.pointer, nbytes, kind, stream.handle),
              "cudaMemcpyAsync (device to device)")

    def zero(self, stream: Stream) -> None:
        check(self.cudart.cudaMemsetAsync(self.pointer, 0, self.nbytes, stream.handle), "cudaMemsetAsync")

    def _fits(self, end: int) -> None:
        if end > self.nbytes:
            raise BackendError(f"a copy of {end} bytes does not fit a device buffer of {self.nbytes}; the input is "
                               "over the engines' profile: build engines with larger maxima")

    def __del__(self) -> None:
        pointer = getattr(self, "pointer", None)
        if pointer:
            self.cudart.cudaFree(pointer)
            self.pointer = 0
