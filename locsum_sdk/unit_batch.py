"""The unit batch: the units of B inputs on a (B, U) grid, as every backend encodes them and every kind lays them
out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .units import Unit


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

    @property
    def grid_rows(self) -> np.ndarray:
        """The grid row of every real unit, (N,)."""
        return np.concatenate([b * self.width + np.arange(count) for b, count in enumerate(self.counts)])

    def subset(self, units: Sequence[int]) -> UnitBatch:
        """The real units `units` as one item, padded to the longest of them."""
        lengths = self.attention_mask[units].sum(axis=1)
        length = int(lengths.max())
        return UnitBatch(self.input_ids[units, :length], self.attention_mask[units, :length], (len(units),))

    def grid_mask(self) -> np.ndarray:
        """Encoder attention mask on the grid: (B*U, L), zero rows for padding units."""
        return self._on_grid(self.attention_mask)

    def grid_ids(self) -> np.ndarray:
        """Unit tokens on the grid: (B*U, L), zero rows for padding units (a copy distribution reads them)."""
        return self._on_grid(self.input_ids)

    def _on_grid(self, values: np.ndarray) -> np.ndarray:
        grid = np.zeros((self.batch * self.width, values.shape[1]), dtype=values.dtype)
        grid[self.unit_mask.reshape(-1)] = values
        return grid
