"""PageSum: pages encoded alone, the decoder run per page, pages mixed in hidden space at every step.

    h[u]  = decoder state of page u          (B, U, K, D)
    c[u]  = page_conf(h[u])                   (B, U, K)
    w     = softmax over real pages of c      (B, U, K)   padding pages get exactly 0
    y     = LM head(sum_u w[u] h[u])          (B, K, V)
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from ..ops import page_combine
from .bart import Bart, CrossKV, SlotCache, attention_bias, init_weights
from .config import BartConfig

KIND = "pagesum"

logger = logging.getLogger("locsum_sdk")


class PageSum(nn.Module):
    kind = KIND

    def __init__(self, config: BartConfig):
        super().__init__()
        self.config = config
        self.model = Bart(config)
        self.page_conf = nn.Linear(config.d_model, 1)
        self.combine = page_combine.torch_op()

    def reset_parameters(self, std: float = 0.02) -> None:
        init_weights(self, std)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, CrossKV]:
        """Pages (N, L) -> encoder states (N, L, D) and every layer's cross key/value."""
        memory = self.model.encoder(input_ids, attention_mask)  # (N, L, D)
        return memory, self.model.cross_kv(memory)

    def mix(self, hidden: torch.Tensor, page_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, U, K, D) -> log-probabilities (B, K, V) and page weights (B, U, K)."""
        scores = self.page_conf(hidden).squeeze(-1)  # (B, U, K)
        mixed, weights = self.combine(hidden, scores, page_mask)  # (B, K, D), (B, U, K)
        return torch.log_softmax(self.model.lm_logits(mixed), dim=-1), weights

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        page_mask: torch.Tensor,
        decoder_input_ids: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing. input_ids (B, U, L), page_mask (B, U), decoder_input_ids (B, T)
        -> log-probabilities (B, T, V) and page weights (B, U, T)."""
        batch, units, length = input_ids.shape
        flat_mask = attention_mask.reshape(batch * units, length)
        memory, cross = self.encode(input_ids.reshape(batch * units, length), flat_mask)
        steps = decoder_input_ids.shape[1]
        bias = attention_bias(flat_mask, memory.dtype)
        hidden = self.model.decoder(decoder_input_ids, cross, bias, units=units)  # (B*U, T, D)
        return self.mix(hidden.view(batch, units, steps, -1), page_mask)

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
        """One decoding step for K beams of B documents of U pages (N = B*U rows of cross key/value).

        input_ids (B, K) last token of each beam, at `position` (1,); encoder_attention_mask (N, L); cache per
        layer: key/value (G, H, K, C, d), G = B for layer 0 (shared by the pages of an item), N after, written in
        place at `position`; cache_slots (B, K, C) the slot holding each position of each beam's history, this
        one included (-1 where none). Returns log-probabilities (B, K, V) and page weights (B, U, K).
        """
        batch, beams = input_ids.shape
        units = unit_mask.shape[1]
        bias = attention_bias(encoder_attention_mask, cross[0][1].dtype)  # (N, 1, 1, L)
        hidden = self.model.decoder.step(input_ids, cross, bias, cache, position, cache_slots, units)  # (N*K, D)
        return self.mix(hidden.view(batch, units, beams, -1), unit_mask)


def complete(config: BartConfig, state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """A BART without PageSum's page confidence layer (`lin.*` in the research code) gets it at zero: pages weigh
    equally until it is trained."""
    if "page_conf.weight" in state:
        return state
    logger.warning("%s has no page confidence layer (lin.*): page_conf starts at zero, pages weigh equally", source)
    return {**state, "page_conf.weight": torch.zeros(1, config.d_model), "page_conf.bias": torch.zeros(1)}


def register_model_kind() -> None:
    from . import graphs
    from .registry import ModelKind, register

    register(ModelKind(
        name=KIND, model=PageSum, complete=complete,
        graphs=lambda model: {"encoder": graphs.encoder_spec(model), "decoder": graphs.decoder_spec(model)},
        functions={"decoder": page_combine.NAME}, register_symbolics=graphs.register_symbolics,
        formats=("hf-bart", "pagesum-research"),
    ))
