"""The one small interface every backend implements, and the unit batch it consumes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..constants import CACHE_CHUNK
from ..generation import StepSession
from ..units import Unit


@dataclass(frozen=True)
class UnitBatch:
    """The units of B documents (or document clusters), laid out on a (B, U) grid, U = most units of any item.

    Real units of item b fill grid rows b*U .. b*U + count[b] - 1; the other rows are padding units that the
    combine op masks out.
    """

    input_ids: np.ndarray  # (N, L) int64, real units only, item by item, padded with pad
    attention_mask: np.ndarray  # (N, L) int64
    counts: tuple[int, ...]  # units of each item

    @classmethod
    def from_units(cls, items: Sequence[Sequence[Unit]], pad: int) -> UnitBatch:
        units = [u for item in items for u in item]
        length = max(len(u.token_ids) for u in units)
        input_ids = np.full((len(units), length), pad, dtype=np.int64)  # (N, L)
        attention_mask = np.zeros((len(units), length), dtype=np.int64)  # (N, L)
        for row, unit in enumerate(units):
            input_ids[row, : len(unit.token_ids)] = unit.token_ids
            attention_mask[row, : len(unit.token_ids)] = 1
        return cls(input_ids, attention_mask, tuple(len(item) for item in items))

    @property
    def batch(self) -> int:
        return len(self.counts)

    @property
    def width(self) -> int:
        return max(self.counts)

    @property
    def unit_mask(self) -> np.ndarray:
        return np.arange(self.width)[None, :] < np.array(self.counts)[:, None]  # (B, U) bool

    def runs(self, size: int) -> list[tuple[int, int, int]]:
        """Micro-batches of at most `size` units, none crossing an item: (first unit, end unit, first grid row)."""
        out, first = [], 0
        for b, count in enumerate(self.counts):
            for start in range(0, count, size):
                stop = min(start + size, count)
                out.append((first + start, first + stop, b * self.width + start))
            first += count
        return out

    def grid_mask(self) -> np.ndarray:
        """Encoder attention mask on the grid: (B*U, L), zero rows for padding units."""
        grid = np.zeros((self.batch * self.width, self.input_ids.shape[1]), dtype=np.int64)
        grid[self.unit_mask.reshape(-1)] = self.attention_mask
        return grid




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

    def start(self, batch: UnitBatch, beams: int, unit_batch_size: int) -> Session: ...

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the kind's graph `graph` once (a selection stage's scoring) and return its outputs by name."""


class Session(StepSession, Protocol):
    def close(self) -> None:
        """Free the encoder states and caches of this batch."""
