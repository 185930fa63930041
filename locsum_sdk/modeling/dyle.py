"""DYLE (Mao et al. 2022): an extractor picks the top-K snippets, each snippet is encoded alone, and at every
decoding step the token distribution is marginalized over the snippets with dynamic weights.

    extractor:  chunks [start] query [sep] snippet [sep] snippet [sep] ... -> score of each snippet = linear(state at
                the separator after it)
    generator:  h[x] = decoder state of snippet x               (B, U, K, D)
                l[x] = MLP(h[x]) = Linear-ReLU-Linear-ReLU-Linear  (B, U, K)
                p(x | y<t) = softmax over real snippets of l       (B, U, K)
                log p(y) = logsumexp_x(log p(x | y<t) + log p(y | x, y<t))   (`locsum.SnippetMarginalize`)
"""

from __future__ import annotations

import torch
from torch import nn

from ..ops import snippet_marginalize
from .bart import Bart, CrossKV, Encoder, SlotCache, attention_bias, init_weights
from .bert import BertEncoder
from .dyle_config import DyleConfig, ExtractorConfig

KIND = "dyle"


class Extractor(nn.Module):
    """Scores snippets from chunks of consecutive snippets, each followed by a separator."""

    def __init__(self, config: ExtractorConfig):
        super().__init__()
        self.config = config
        if config.architecture == "bert":
            self.encoder = BertEncoder(config)
        else:
            self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
            self.encoder = Encoder(config, self.shared)
        self.classifier = nn.Linear(config.d_model, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, separators: torch.Tensor) -> torch.Tensor:
        """Chunks input_ids, attention_mask (C, L); separators (n,): the flat index (chunk * L + position) of the
        separator after each snippet -> the snippets' scores (n,)."""
        states = self.encoder(input_ids, attention_mask)  # (C, L, D)
        rows = states.reshape(-1, states.shape[-1])[separators]  # (n, D)
        return self.classifier(rows).squeeze(-1)


class Dyle(nn.Module):
    kind = KIND

    def __init__(self, config: DyleConfig):
        super().__init__()
        self.config = config
        self.model = Bart(config)
        d = config.d_model
        self.dynamic_mlp = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))
        self.extractor = Extractor(config.extractor)
        self.marginalize = snippet_marginalize.torch_op()

    def reset_parameters(self, std: float = 0.02) -> None:
        init_weights(self, std)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, CrossKV]:
        """Snippets (N, L) -> encoder states (N, L, D) and every layer's cross key/value."""
        memory = self.model.encoder(input_ids, attention_mask)  # (N, L, D)
        return memory, self.model.cross_kv(memory)

    def mix(self, hidden: torch.Tensor, unit_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, U, K, D) -> marginal log-probabilities (B, K, V) and dynamic snippet weights (B, U, K)."""
        scores = self.dynamic_mlp(hidden).squeeze(-1)  # (B, U, K)
        log_probs = torch.log_softmax(self.model.lm_logits(hidden).float(), dim=-1)  # (B, U, K, V)
        return self.marginalize(log_probs, scores.float(), unit_mask)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        unit_mask: torch.Tensor,
        decoder_input_ids: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing on given snippets. input_ids (B, U, L), unit_mask (B, U), decoder_input_ids (B, T)
        -> log-probabilities (B, T, V) and dynamic weights (B, U, T)."""
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
        """One decoding step for K beams of B inputs of U snippets, laid out as PageSum's pages (the decoder runs
        per snippet; layer 0's cache is shared by the snippets of an item). Returns log-probabilities (B, K, V)
        and dynamic snippet weights (B, U, K)."""
        batch, beams = input_ids.shape
        units = unit_mask.shape[1]
        bias = attention_bias(encoder_attention_mask, cross[0][1].dtype)  # (N, 1, 1, L)
        hidden = self.model.decoder.step(input_ids, cross, bias, cache, position, cache_slots, units)  # (N*K, D)
        return self.mix(hidden.view(batch, units, beams, -1), unit_mask)
