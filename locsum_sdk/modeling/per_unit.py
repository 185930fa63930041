"""Units encoded alone and decoded one decoder per unit, the units of an item mixed at every step: PageSum's pages
(mixed in hidden space) and DYLE's snippets (token distributions marginalized). A kind's module derives from
`PerUnitModel`, holds its backbone in `self.model` (`backbone.Backbone`: BART, or a pretrained decoder-only Llama)
and says how a step's unit states become log-probabilities (`mix`); with the config's `copy`, `mix` also gets what
the decoder read (`copy.CopySource`)."""

from __future__ import annotations

import torch
from torch import nn

from .bart import CrossKV, SlotCache
from .copy import CopySource


class PerUnitModel(nn.Module):
    model: nn.Module  # the backbone (`backbone.Backbone`)

    def mix(self, hidden: torch.Tensor, unit_mask: torch.Tensor,
            source: CopySource | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, U, K, D), unit_mask (B, U) -> log-probabilities (B, K, V) and unit weights (B, U, K); `source`
        where the model copies."""
        raise NotImplementedError

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, CrossKV]:
        """Units (N, L) -> their states (N, L, D) and every layer's key/value that the decoding steps read."""
        return self.model.encode_units(input_ids, attention_mask)

    def decode(self, decoded, tokens: torch.Tensor, unit_ids: torch.Tensor | None, unit_mask: torch.Tensor,
               queries: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's output -> `mix`: `decoded` is its hidden (B*U*Q rows), or with copy (hidden, context,
        attention); tokens (B, Q) the query rows' input tokens; unit_ids (B*U, L) the units' tokens."""
        batch, units = unit_mask.shape
        if not self.config.copy:
            return self.mix(decoded.reshape(batch, units, queries, -1), unit_mask)
        hidden, context, attention = decoded
        source = CopySource(
            ids=unit_ids.reshape(batch, units, -1),
            attention=attention.reshape(batch, units, queries, -1),
            context=context.reshape(batch, units, queries, -1),
            embedded=self.model.token_embedding(tokens),
        )
        return self.mix(hidden.reshape(batch, units, queries, -1), unit_mask, source)

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
        flat_ids, flat_mask = input_ids.reshape(batch * units, length), attention_mask.reshape(batch * units, length)
        _, cross = self.encode(flat_ids, flat_mask)
        decoded = self.model.decode(decoder_input_ids, cross, flat_mask, units, read=self.config.copy)
        return self.decode(decoded, decoder_input_ids, flat_ids, unit_mask, decoder_input_ids.shape[1])

    def step(
        self,
        input_ids: torch.Tensor,
        unit_mask: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        position: torch.Tensor,
        cache_slots: torch.Tensor,
        cache: SlotCache,
        cross: CrossKV,
        encoder_input_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoding step for K beams of B items of U units (N = B*U rows of cross key/value).

        input_ids (B, K) last token of each beam, at `position` (1,); encoder_attention_mask (N, L); cache per
        layer: key/value (G, H, K, C, d), G = B for layer 0 (shared by the units of an item), N after, written in
        place at `position`; cache_slots (B, K, C) the slot holding each position of each beam's history, this
        one included (-1 where none); encoder_input_ids (N, L) the units' tokens, read by a model that copies.
        Returns log-probabilities (B, K, V) and unit weights (B, U, K).
        """
        beams, units = input_ids.shape[1], unit_mask.shape[1]
        decoded = self.model.step(input_ids, cross, encoder_attention_mask, cache, position, cache_slots, units,
                                  read=self.config.copy)
        return self.decode(decoded, input_ids, encoder_input_ids, unit_mask, beams)
