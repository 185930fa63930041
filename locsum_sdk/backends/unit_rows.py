"""The ONNX Runtime session of a unit-row step (`modeling.fused_unit_rows`), on the CPU.

Every layer's unit keys and values are one buffer each, (B*K*U, H, L + C, d) in the graph's dtype (int8 or
float32), rows in (item, beam, unit) order: the encoder's outputs for a unit (already in row layout) are copied into
the head of its rows, one per beam, and each step's GroupQueryAttention writes the new token's key and value into
every row at the row's length plus the position, in place (the buffer is bound as the layer's input and its
present output). When beams continue other beams, each row's summary part is copied from its source beam's row
(units of equal length together); the units' part, the same in every beam, stays. The capacity C grows by
`CACHE_CHUNK` positions when full, the rows copied into larger buffers; they are first sized for the bundle's
default max_length, so a summary of that length never copies them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from .. import constants as C
from ..unit_batch import UnitBatch
from ..unit_cache import UnitCache
from .base import encode_through_cache, encode_units, length_axes, write_unit


class RowsBackend(Protocol):
    """What a unit-row session asks of its ONNX Runtime backend (`onnxruntime.OnnxRuntimeBackend`)."""

    ort: Any
    shape: Any  # `configs.model.StepShape`
    layers: int
    config: dict[str, Any]
    decoder: Any  # the decoder's InferenceSession
    graphs: dict[str, Any]  # each graph's declared IO (`kinds.GraphIO`)
    kind: Any
    identity: str
    caches_units: bool

    def encoded(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def run_decoder(self, binding: Any) -> None: ...


DTYPES = {"tensor(int8)": np.int8, "tensor(float)": np.float32}


def is_unit_rows(decoder) -> bool:
    """Whether a decoder graph's declared IO (`kinds.GraphIO`) is the unit-row step's."""
    return C.unit_key(0) in decoder.input_names


class UnitRowsSession:
    """One unit batch's rows and decoding over them (the module docstring says how they are laid out)."""

    def __init__(self, backend: RowsBackend, batch: UnitBatch, beams: int, size_of: Callable[[int], int],
                 capacity: int, cache: UnitCache | None = None):
        """`capacity`: the summary positions each row holds at first (the bundle's max_length), a multiple of
        `CACHE_CHUNK`; a longer summary grows the rows."""
        ort = backend.ort
        self.backend, self.batch, self.beams = backend, batch, beams
        heads, dim = backend.shape.cache_heads, backend.shape.head_dim
        self.width, self.length = batch.width, batch.input_ids.shape[1]
        inputs = {t.name: t for t in backend.decoder.get_inputs()}
        self.dtype = DTYPES[inputs[C.unit_key(0)].type]
        self.names = [name(i) for i in range(backend.layers) for name in (C.unit_key, C.unit_value)]
        self.capacity = capacity
        rows = batch.batch * beams * self.width
        self.rows = {name: np.zeros((rows, heads, self.length + self.capacity, dim), self.dtype) for name in self.names}
        axes = length_axes(backend.graphs["encoder"])
        write = lambda row, name, array: write_unit(self.rows[name], self._row(row), axes[name], array)  # noqa: E731
        if cache is not None and backend.caches_units:
            encode_through_cache(batch, backend.kind.layout, size_of, cache, backend.identity, axes, backend.encoded,
                                 write)
        else:
            encode_units(batch, backend.kind.layout, range(len(batch.input_ids)), size_of, axes, backend.encoded,
                         write)
        for buffer in self.rows.values():  # every beam its own copy of its item's units
            grid = buffer.reshape(batch.batch, beams, self.width, *buffer.shape[1:])
            grid[:, 1:] = grid[:, :1]
        self.lengths = batch.grid_mask().sum(axis=1).reshape(batch.batch, self.width)
        self.tokens = np.zeros((batch.batch, beams), dtype=np.int64)  # rewritten in place every step
        self.position = np.zeros(1, dtype=np.int64)
        self.step_count = -1
        self.log_probs = np.zeros((batch.batch, beams, backend.config["vocab_size"]), dtype=np.float32)
        self.unit_weights = np.zeros((batch.batch, self.width, beams), dtype=np.float32)
        self.partial_log_probs = False
        to_ort = ort.OrtValue.ortvalue_from_numpy
        self.fixed = {C.INPUT_IDS: to_ort(self.tokens), C.POSITION: to_ort(self.position),
                      C.UNIT_MASK: to_ort(np.ascontiguousarray(batch.unit_mask)),
                      C.ENCODER_ATTENTION_MASK: to_ort(np.ascontiguousarray(batch.grid_mask()))}
        self.binding = backend.decoder.io_binding()
        for name, value in self.fixed.items():
            self.binding.bind_ortvalue_input(name, value)
        self._bind_rows()
        for name, buffer in ((C.LOG_PROBS, self.log_probs), (C.UNIT_WEIGHTS, self.unit_weights)):
            self.binding.bind_output(name, "cpu", 0, buffer.dtype.type, list(buffer.shape), buffer.ctypes.data)

    def _row(self, grid_row: int) -> int:
        """A grid row (item, unit) -> its beam 0 row (item, 0, unit)."""
        item, unit = divmod(grid_row, self.width)
        return item * self.beams * self.width + unit

    def _bind_rows(self) -> None:
        to_ort = self.backend.ort.OrtValue.ortvalue_from_numpy
        for i in range(self.backend.layers):
            for name, present in ((C.unit_key(i), C.present_unit_key(i)), (C.unit_value(i), C.present_unit_value(i))):
                value = to_ort(self.rows[name])
                self.binding.bind_ortvalue_input(name, value)
                self.binding.bind_ortvalue_output(present, value)

    def _grow(self) -> None:
        self.capacity += C.CACHE_CHUNK
        for name, buffer in self.rows.items():
            grown = np.zeros((*buffer.shape[:2], self.length + self.capacity, buffer.shape[3]), buffer.dtype)
            grown[:, :, : buffer.shape[2]] = buffer
            self.rows[name] = grown
        self._bind_rows()

    def _follow(self, beam_index: np.ndarray) -> None:
        """Each beam continues beam_index[b, k]: copy its rows' summary parts (t positions after each unit)."""
        source = np.asarray(beam_index, dtype=np.int64)
        if np.array_equal(source, np.broadcast_to(np.arange(self.beams), source.shape)):
            return
        t = self.step_count
        for length in np.unique(self.lengths):
            item_of, unit_of = np.nonzero(self.lengths == length)
            for item in np.unique(item_of):
                units = unit_of[item_of == item]
                for buffer in self.rows.values():
                    beams = buffer.reshape(self.batch.batch, self.beams, self.width, *buffer.shape[1:])[item]
                    part = beams[:, units, :, length : length + t]  # (K, n, H, t, d), a copy
                    beams[:, units, :, length : length + t] = part[source[item]]

    def step(self, tokens: np.ndarray, beam_index: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        self.tokens[...] = tokens
        self.step_count += 1
        if beam_index is not None and self.step_count:
            self._follow(beam_index)
        if self.step_count == self.capacity:
            self._grow()
        self.position[0] = self.step_count
        self.backend.run_decoder(self.binding)
        return self.log_probs, self.unit_weights

    def full_log_probs(self) -> np.ndarray:
        return self.log_probs

    def close(self) -> None:
        self.rows.clear()
        self.fixed.clear()
