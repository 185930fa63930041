"""The one small interface every backend implements (it consumes a `UnitBatch`), and what the backends share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..constants import CACHE_CHUNK, ENCODER_HIDDEN
from ..generation import StepSession
from ..unit_batch import UnitBatch
from ..unit_cache import UnitCache


def fixed_decoder_inputs(layout: Any, batch: UnitBatch, decoder: Any) -> dict[str, np.ndarray]:
    """The layout's decoder inputs that stay the same at every step, those the decoder graph (`kinds.GraphIO`)
    declares: a model that does not copy reads no unit tokens."""
    declared = set(decoder.input_names)
    return {name: value for name, value in layout.decoder_inputs(batch).items() if name in declared}


def length_axes(encoder: Any) -> dict[str, int]:
    """The cross outputs of an encoder graph (`kinds.GraphIO`) and the axis of one unit's array (the grid row's
    axis dropped) that runs along its tokens."""
    return {t.name: next(axis for axis, name in t.axes.items() if name == "length") - 1
            for t in encoder.outputs if t.name != ENCODER_HIDDEN}


Encode = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]  # one run's inputs -> its cross outputs by name
Write = Callable[[int, str, np.ndarray], None]  # (grid row, output name, one unit's array) into a session's grid


def length_runs(lengths: Sequence[int], size_of: Callable[[int], int]) -> list[list[int]]:
    """Units (indices into `lengths`) in encoder runs of like lengths: longest first (equal lengths in their order),
    each run as many units as `size_of(its longest unit's tokens)` takes, at least one."""
    order = sorted(range(len(lengths)), key=lambda unit: -lengths[unit])
    runs, start = [], 0
    while start < len(order):
        size = max(1, size_of(int(lengths[order[start]])))
        runs.append(order[start : start + size])
        start += size
    return runs


def encode_units(batch: UnitBatch, layout: Any, units: Sequence[int], size_of: Callable[[int], int],
                 axes: dict[str, int], encode: Encode, write: Write,
                 store: Callable[[int, dict[str, np.ndarray]], None] | None = None) -> None:
    """Encode real units `units` of `batch` (a layout whose units are encoded alone) in runs of like lengths
    (`length_runs`), each run padded to its own longest unit, not the batch's, and write each unit's arrays, trimmed
    to its tokens along `axes[name]`, into its grid row; `store(unit, arrays)` keeps them (a unit cache).

    encode(inputs): one run's cross outputs by name, host arrays with a row per unit; write(grid row, name, array):
    put one unit's array in the session's grid (whose rows past a unit's tokens stay as they were: masked)."""
    lengths = batch.attention_mask.sum(axis=1)
    rows = batch.grid_rows
    for run in length_runs([int(lengths[unit]) for unit in units], size_of):
        chosen = [units[i] for i in run]
        outputs = encode(layout.encoder_inputs(batch.subset(chosen), 0, len(chosen)))
        for i, unit in enumerate(chosen):
            arrays = {name: outputs[name][(i, *[slice(None)] * axis, slice(0, lengths[unit]))]
                      for name, axis in axes.items()}
            for name, array in arrays.items():
                write(int(rows[unit]), name, array)
            if store is not None:
                store(unit, arrays)


def encode_through_cache(batch: UnitBatch, layout: Any, size_of: Callable[[int], int], cache: UnitCache,
                         identity: str, axes: dict[str, int], encode: Encode, write: Write) -> None:
    """Encode the units of `batch` (a layout whose units are encoded alone) through `cache`: a unit found there is
    written from it; the others are encoded together (`encode_units`, runs of `size_of(length)` units) and stored."""
    lengths = batch.attention_mask.sum(axis=1)
    missing, keys = [], {}
    for unit, row in enumerate(batch.grid_rows):
        keys[unit] = UnitCache.key(identity, batch.input_ids[unit, : lengths[unit]])
        arrays = cache.get(keys[unit])
        if arrays is None:
            missing.append(unit)
            continue
        for name, array in arrays.items():
            write(int(row), name, array)
    encode_units(batch, layout, missing, size_of, axes, encode, write,
                 lambda unit, arrays: cache.put(keys[unit], arrays))


def write_unit(grid: Any, row: int, axis: int, array: Any) -> None:
    """Write one unit's array (trimmed to its tokens along `axis`) into grid row `row` of a numpy or torch grid."""
    grid[(row, *[slice(None)] * axis, slice(0, array.shape[axis]))] = array


class BeamSlots:
    """Where the positions of each beam's history sit in a slot cache (see `locsum_sdk.modeling.bart`): the
    `cache_slots` input of a decoding step.

    Before each step, `advance(beam_index)`: the beams continue those of the previous step, so their histories are
    gathered (a (B, K, C) array of small integers; the cache itself never moves) and the new position of beam k
    is written into slot k. The capacity C grows by `chunk` (default `CACHE_CHUNK`) positions whenever it is full."""

    def __init__(self, batch: int, beams: int, chunk: int | None = None):
        self.beams, self.chunk = beams, chunk or CACHE_CHUNK
        self.position = -1  # the position being decoded
        self.slots = np.full((batch, beams, self.chunk), -1, dtype=np.int64)  # (B, K, C)

    @property
    def capacity(self) -> int:
        return self.slots.shape[2]

    def advance(self, beam_index: np.ndarray | None) -> bool:
        """Move to the next position; True when the capacity grew (the caches must grow with it)."""
        self.position += 1
        t, grew = self.position, self.position == self.capacity
        if grew:
            more = np.full((*self.slots.shape[:2], self.chunk), -1, dtype=np.int64)
            self.slots = np.concatenate([self.slots, more], axis=2)
        if beam_index is not None and t:
            source = np.asarray(beam_index, dtype=np.int64)[:, :, None]  # (B, K, 1)
            self.slots[:, :, :t] = np.take_along_axis(self.slots[:, :, :t], source, axis=1)
        self.slots[:, :, t] = np.arange(self.beams)
        return grew


def scatter_top(values: np.ndarray, tokens: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Each beam's best tokens (`top_log_probs` (B, K, T), `top_tokens` (B, K, T)) as log-probabilities over the
    whole vocabulary (`out`, (B, K, V), written in place): -inf for every other token."""
    out.fill(-np.inf)
    np.put_along_axis(out, tokens.astype(np.int64), values, axis=-1)
    return out


def grown_cache(cache, capacity: int, zeros):
    """A slot cache (G, H, K, C, d) with room for `capacity` positions, what it held kept where it was;
    `zeros(shape)` makes the new array (numpy or torch alike)."""
    grown = zeros((*cache.shape[:3], capacity, cache.shape[4]))
    grown[:, :, :, : cache.shape[3]] = cache
    return grown


class Backend(Protocol):
    """Runs one model: encodes a unit batch once, then steps the decoder. It knows no kind: what it binds comes
    from its kind's declaration (`kind.graphs`, `kind.layout`)."""

    name: str
    kind: Any  # the `kinds.Kind` it runs (typed loosely: kinds sit above backends)
    caches_units: bool  # whether `start` can take a `UnitCache` (its grid is where the cache can write)
    identity: str  # the model's identity: what the unit cache keys its entries by, beside a unit's ids

    def start(self, batch: UnitBatch, beams: int, unit_batch_size: int, cache: UnitCache | None = None) -> Session:
        """Encode `batch` (through `cache`, for layouts whose units are encoded alone) and open its decoding."""

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the kind's graph `graph` once (a selection stage's scoring) and return its outputs by name."""

    def free_memory(self) -> int | None:
        """Bytes a call's working memory may still take where it is allocated: the GPU's free memory for a backend
        that allocates it there call by call, else this machine's available memory (None: unknown)."""


class Session(StepSession, Protocol):
    def close(self) -> None:
        """Free the encoder states and caches of this batch."""
