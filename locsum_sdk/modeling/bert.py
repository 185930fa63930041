"""A BERT encoder, equal to `transformers.BertModel`'s (and, with positions offset, `RobertaModel`'s) output on
unpadded positions (post-LayerNorm), for extractors that start from a pretrained BERT (all-MiniLM-L6-v2) or DYLE's
RoBERTa retriever. Its layers are BART's (`bart.EncoderLayer`: same maths, names mapped by `from_hf_bert_names`)
with the checkpoint's LayerNorm epsilon; its embeddings add token type 0 and number positions from
`position_offset`."""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from ..configs.dyle import ExtractorConfig
from ..errors import BundleError
from .bart import EncoderLayer, attention_bias, run_encoder_layers


class BertEncoder(nn.Module):
    def __init__(self, config: ExtractorConfig):
        super().__init__()
        d = config.d_model
        self.word_embeddings = nn.Embedding(config.vocab_size, d)
        self.position_embeddings = nn.Embedding(config.max_positions + config.position_offset, d)
        self.position_offset = config.position_offset
        self.token_type_embeddings = nn.Embedding(max(config.type_vocab_size, 1), d)
        self.layernorm_embedding = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        for layer in self.layers:
            layer.self_attn_layer_norm.eps = layer.final_layer_norm.eps = config.layer_norm_eps
        self.dropout = config.dropout
        self.checkpoint_layers = False  # training: recompute each layer in the backward pass (`run_encoder_layers`)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask (N, L) -> states (N, L, D); every token has type 0."""
        length = input_ids.shape[1]
        positions = torch.arange(length, device=input_ids.device) + self.position_offset
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        x = F.dropout(self.layernorm_embedding(x), self.dropout, self.training)
        dim = x.shape[-1]
        bias = attention_bias(attention_mask, x.dtype)  # (N, 1, 1, L)
        x = run_encoder_layers(self.layers, x.reshape(-1, dim), length, bias, self.checkpoint_layers)
        return x.view(-1, length, dim)


_LAYER_NAMES = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "self_attn_layer_norm",
    "intermediate.dense": "fc1",
    "output.dense": "fc2",
    "output.LayerNorm": "final_layer_norm",
}
_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")


def from_hf_bert_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF `BertModel` or `RobertaModel` weights (with or without the `bert.` / `roberta.` prefix) -> `BertEncoder`
    names. The pooler and the position-id buffers are left out (the extractor reads states at separators, not the
    pooled [CLS])."""
    out = {}
    for name, tensor in state.items():
        name = name.removeprefix("bert.").removeprefix("roberta.")
        if name.startswith("pooler.") or name in ("embeddings.position_ids", "embeddings.token_type_ids"):
            continue
        if name.startswith("embeddings."):
            part = name.removeprefix("embeddings.")
            out[part.replace("LayerNorm", "layernorm_embedding")] = tensor
            continue
        match = _LAYER.match(name)
        if match is None or match.group(2) not in _LAYER_NAMES:
            raise BundleError(f"{name!r} is not a weight of a BERT encoder; pass an HF BertModel's weights")
        out[f"layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.{match.group(3)}"] = tensor
    return out
