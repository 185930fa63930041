"""Samples -> padded tensors for PageSum: units on a (B, U, L) grid, decoder inputs shifted right."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from locsum_sdk.modeling.objectives import IGNORE


@dataclass(frozen=True)
class Sample:
    """One training pair: the units (token ids, special tokens included) and the target ids (ending in eos)."""

    units: list[list[int]]
    target: list[int]


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, U, L)
    attention_mask: torch.Tensor  # (B, U, L)
    unit_mask: torch.Tensor  # (B, U) bool
    decoder_input_ids: torch.Tensor  # (B, T)
    labels: torch.Tensor  # (B, T), IGNORE on padding

    @property
    def tokens(self) -> int:
        """Real source + target tokens (for throughput)."""
        return int(self.attention_mask.sum() + (self.labels != IGNORE).sum())


def shifted_targets(targets: list[list[int]], pad: int, decoder_start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summaries (each ending in eos) -> decoder inputs (B, T), shifted right after the start token, and labels
    (B, T), IGNORE on padding."""
    steps = max(len(t) for t in targets)
    decoder_input_ids = torch.full((len(targets), steps), pad, dtype=torch.long)
    labels = torch.full((len(targets), steps), IGNORE, dtype=torch.long)
    for b, ids in enumerate(targets):
        target = torch.tensor(ids)
        labels[b, : len(target)] = target
        decoder_input_ids[b, 0] = decoder_start
        decoder_input_ids[b, 1 : len(target)] = target[:-1]
    return decoder_input_ids, labels


def collate(samples: list[Sample], pad: int, decoder_start: int) -> Batch:
    units = max(len(s.units) for s in samples)
    length = max(len(u) for s in samples for u in s.units)
    batch = len(samples)
    input_ids = torch.full((batch, units, length), pad, dtype=torch.long)
    attention_mask = torch.zeros((batch, units, length), dtype=torch.long)
    unit_mask = torch.zeros((batch, units), dtype=torch.bool)
    for b, sample in enumerate(samples):
        for u, ids in enumerate(sample.units):
            input_ids[b, u, : len(ids)] = torch.tensor(ids)
            attention_mask[b, u, : len(ids)] = 1
        unit_mask[b, : len(sample.units)] = True
    decoder_input_ids, labels = shifted_targets([s.target for s in samples], pad, decoder_start)
    return Batch(input_ids, attention_mask, unit_mask, decoder_input_ids, labels)
