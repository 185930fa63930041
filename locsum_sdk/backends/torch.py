"""The PyTorch reference backend: runs `locsum_sdk.modeling` directly, with the same layout as the exported graphs."""

from __future__ import annotations

import numpy as np

from ..errors import BackendUnavailableError
from ..generation import GenerationOptions, Hypothesis, generate
from ..units import Unit
from .base import BeamSlots, UnitBatch, grown_cache, slot_cache_groups


def _import_torch():
    try:
        import torch
    except ImportError:
        raise BackendUnavailableError("the torch backend needs PyTorch: pip install 'locsum[torch]'") from None
    return torch


class TorchBackend:
    name = "torch"

    def __init__(self, model, threads: int | None = None):
        self.torch = _import_torch()
        if threads:
            self.torch.set_num_threads(threads)
        self.model = model.eval()

    def start(self, batch: UnitBatch, beams: int, unit_batch_size: int) -> "TorchSession":
        return TorchSession(self, batch, beams, unit_batch_size)


class TorchSession:
    def __init__(self, backend: TorchBackend, batch: UnitBatch, beams: int, unit_batch_size: int):
        torch = backend.torch
        self.torch, self.model, self.batch, self.beams = torch, backend.model, batch, beams
        rows = batch.batch * batch.width
        grid = torch.from_numpy(batch.unit_mask.reshape(-1))  # (N,) real grid rows
        ids, mask = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)
        with torch.inference_mode():
            parts = [self.model.encode(ids[i : i + unit_batch_size], mask[i : i + unit_batch_size])[1]
                     for i in range(0, len(ids), unit_batch_size)]
            self.cross = []
            for layer in range(len(parts[0])):
                keys, values = (torch.cat([p[layer][j] for p in parts]) for j in (0, 1))  # real units only
                k_grid = keys.new_zeros((rows, *keys.shape[1:]))  # (N, H, d, L)
                v_grid = values.new_zeros((rows, *values.shape[1:]))  # (N, H, L, d)
                k_grid[grid], v_grid[grid] = keys, values
                self.cross.append((k_grid, v_grid))
        self.unit_mask = torch.from_numpy(batch.unit_mask)
        self.grid_mask = torch.from_numpy(batch.grid_mask())
        cfg = self.model.config
        self.slots = BeamSlots(batch.batch, beams)
        self.cache = [
            tuple(torch.zeros(groups, cfg.decoder_heads, beams, self.slots.capacity, cfg.head_dim) for _ in "kv")
            for groups in slot_cache_groups(batch, cfg.decoder_layers)
        ]

    def step(self, tokens: np.ndarray, beam_index: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        torch = self.torch
        if self.slots.advance(beam_index):
            capacity = self.slots.capacity
            self.cache = [tuple(grown_cache(t, capacity, t.new_zeros) for t in layer) for layer in self.cache]
        with torch.inference_mode():
            log_probs, weights = self.model.step(
                torch.from_numpy(np.ascontiguousarray(tokens)), self.unit_mask, self.grid_mask,
                torch.tensor([self.slots.position]), torch.from_numpy(self.slots.slots), self.cache, self.cross,
            )
        return log_probs.numpy(), weights.numpy()

    def close(self) -> None:
        self.cache, self.cross = [], []


def generate_from_ids(model, units: list[list[tuple[int, ...]]], options: GenerationOptions | None = None,
                      unit_batch_size: int = 4) -> list[Hypothesis]:
    """Reference generation in torch from token ids: each item's units -> its best hypothesis.

    The decoding loop is `locsum_sdk.generation`, the one every backend runs; this skips the tokenizer and paging,
    for training-time evaluation and parity checks."""
    options = options or GenerationOptions()
    cfg = model.config
    items = [[Unit(0, 0, 0, "", tuple(ids)) for ids in item] for item in units]
    batch = UnitBatch.from_units(items, cfg.pad_token_id)
    session = TorchBackend(model).start(batch, options.num_beams, unit_batch_size)
    try:
        return generate(session, batch.batch, options, cfg.decoder_start_token_id, cfg.eos_token_id, cfg.pad_token_id)
    finally:
        session.close()
