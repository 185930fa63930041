"""Training objectives: the loss a kind trains with, registered with its torch side (`ModelKind.objective`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

IGNORE = -100  # label of padding positions


def unit_grid(items: list[list[list[int]]], pad: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chosen units' ids of each item as a padded grid, filled on the host and moved to `device` once:
    input_ids, attention_mask (B, U, L) and unit_mask (B, U)."""
    units, length = max(len(c) for c in items), max(len(ids) for c in items for ids in c)
    input_ids = torch.full((len(items), units, length), pad, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    unit_mask = torch.zeros((len(items), units), dtype=torch.bool)
    for b, chosen in enumerate(items):
        for u, ids in enumerate(chosen):
            input_ids[b, u, : len(ids)], attention_mask[b, u, : len(ids)] = torch.tensor(ids), 1
        unit_mask[b, : len(chosen)] = True
    return input_ids.to(device), attention_mask.to(device), unit_mask.to(device)


def label_smoothed_nll(log_probs: torch.Tensor, labels: torch.Tensor,
                       epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """log_probs (B, T, V), labels (B, T) -> (smoothed loss, plain NLL), both averaged over real tokens."""
    mask = labels != IGNORE
    safe = labels.clamp_min(0)
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (B, T)
    smooth = -log_probs.mean(-1)  # (B, T)
    count = mask.sum().clamp_min(1)
    nll = (nll * mask).sum() / count
    smooth = (smooth * mask).sum() / count
    return (1 - epsilon) * nll + epsilon * smooth, nll


def cross_entropy(model: nn.Module, batch: Any, config: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross-entropy (`config.label_smoothing`) of the model's next-token log-probabilities on a
    batch of units (input_ids, attention_mask (B, U, L), unit_mask (B, U), decoder_input_ids and labels (B, T)):
    (loss, plain NLL)."""
    log_probs, _ = model(batch.input_ids, batch.attention_mask, batch.unit_mask, batch.decoder_input_ids)
    return label_smoothed_nll(log_probs.float(), batch.labels, config.label_smoothing)
