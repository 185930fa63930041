"""The backbone seam: what a per-unit kind (PageSum, DYLE) asks of the network under it, and which network a
config builds.

A kind says what its units are and how it combines them at each step (`per_unit.PerUnitModel.mix`); a backbone says
how a unit is encoded and how one step runs. Two backbones fulfil the contract: BART (`bart.Bart`, an encoder and a
decoder whose cross-attention reads the units) and a pretrained decoder-only Llama (`llama.Llama`, each unit read as
its own prefix, the summary continuing it). In both, a unit's encoding is every decoder layer's key/value over its
tokens, computed once and read by every step.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from ..configs.llama import LlamaConfig
from ..configs.model import BartConfig

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: key_t (N, H, d, L) and value (N, H, L, d)


class Backbone(Protocol):
    config: Any
    shares_first_layer: bool  # layer 0's self-attention cache is shared by the units of an item (rows B, not B*U)

    def encode_units(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, KV]:
        """Units (N, L) -> their states (N, L, D) and every layer's key/value that the steps read."""

    def decode(self, decoder_input_ids: torch.Tensor, cross: KV, unit_attention_mask: torch.Tensor, units: int = 1,
               read: bool = False) -> Any:
        """Teacher forcing: each item's summary (B, T) against its U units (N = B*U) -> hidden (B*U, T, D); with
        `read`, also what a copy distribution reads (`copy.CopySource`)."""

    def step(self, input_ids: torch.Tensor, cross: KV, unit_attention_mask: torch.Tensor, cache: KV,
             position: torch.Tensor, cache_slots: torch.Tensor, units: int | torch.Tensor = 1,
             read: bool = False) -> Any:
        """One position of K beams (B, K) against the units -> hidden (B*U*K, D); writes the slot cache in place."""

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., D) -> logits (..., V)."""

    def token_embedding(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids (...) -> embeddings (..., D)."""


def backbone(config: BartConfig | LlamaConfig) -> torch.nn.Module:
    """The backbone a kind's config describes: a Llama for a `LlamaConfig`, BART otherwise."""
    if isinstance(config, LlamaConfig):
        from .llama import Llama

        return Llama(config)
    from .bart import Bart

    return Bart(config)
