"""Units encoded alone and decoded one decoder per unit, the units of an item mixed at every step: PageSum's pages
(mixed in hidden space) and DYLE's snippets (token distributions marginalized). A kind's module derives from
`PerUnitModel`, holds its BART in `self.model` and says how a step's unit states become log-probabilities (`mix`)."""

from __future__ import annotations

import torch
from torch import nn

from .bart import CrossKV, SlotCache, attention_bias


class PerUnitModel(nn.Module):
    model: nn.Module  # the BART backbone (`bart.Bart`)

    def mix(self, hidden: torch.Tensor, unit_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, U, K, D), unit_mask (B, U) -> log-probabilities (B, K, V) and unit weights (B, U, K)."""
        raise NotImplementedError

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, CrossKV]:
        """Units (N, L) -> encoder states (N, L, D) and every layer's cross key/value."""
        memory = self.model.encoder(input_ids, attention_mask)  # (N, L, D)
        return memory, self.model.cross_kv(memory)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        unit_mask: torch.Tensor,
        decoder_input_ids: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing. input_ids (B, U, L), unit_mask (B, U), decoder_input_ids (B, T)
        -> log-probabilities (B, T, V) and unit weights (B, U, T)."""
        batch, units, length = input_ids.shape
        flat_mask = attention_mask.reshape(batch * units, length)
        memory, cross = self.encode(input_ids.reshape(batch * units, length), flat_mask)
        steps = decoder_input_ids.shape[1]
        bias = attention_bias(flat_mask, memory.dtype)
        hidden = self.model.decoder(decoder_input_ids, cross, bias, units=units)  # (B*U, T, D)
        return self.mix(hidden.view(batch, units, steps, -1), unit_mask)

    def step(
        self,
        input_ids: torch.Tensor,
        unit_mask: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        position: torch.Tensor,
        cache_slots: torch.Tensor,
        cache: SlotCache,
        cross: CrossKV,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoding step for K beams of B items of U units (N = B*U rows of cross key/value).

        input_ids (B, K) last token of each beam, at `position` (1,); encoder_attention_mask (N, L); cache per
        layer: key/value (G, H, K, C, d), G = B for layer 0 (shared by the units of an item), N after, written in
        place at `position`; cache_slots (B, K, C) the slot holding each position of each beam's history, this
        one included (-1 where none). Returns log-probabilities (B, K, V) and unit weights (B, U, K).
        """
        batch, beams = input_ids.shape
        units = unit_mask.shape[1]
        bias = attention_bias(encoder_attention_mask, cross[0][1].dtype)  # (N, 1, 1, L)
        hidden = self.model.decoder.step(input_ids, cross, bias, cache, position, cache_slots, units)  # (N*K, D)
        return self.mix(hidden.view(batch, units, beams, -1), unit_mask)
