"""A compact BART encoder-decoder, equal to `transformers.BartForConditionalGeneration` (post-LayerNorm).

Parameter names follow HF BART without the `model.` prefix, so HF weights load by name. The decoder takes the
cross-attention keys/values precomputed once per unit, with keys stored transposed, and serves K beams of one
unit by stacking them on the query axis: `Q[N, H, K*T, d] @ K[N, H, d, L]`. Nothing is copied per beam. When
several units decode the same tokens (PageSum's pages), the decoder's embeddings and first self-attention block
run once per beam and are shared by the units.

Inside the encoder and decoder, hidden states travel as 2-D rows (sequences x positions, D): every linear layer
then exports as one `Gemm` with its bias fused, not a batched `MatMul` followed by an `Add`, and only attention
reshapes to heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import BartConfig

#: BART's learned positions start at row 2 of the position table.
POSITION_OFFSET = 2

CrossKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: key (N, H, d, L), value (N, H, L, d)
SelfKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: key, value (R, H, S, d); R = B*K rows for layer 0, N*K after


def attention_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(N, L) 0/1 mask -> (N, 1, 1, L) additive bias; a fully padded row stays finite (uniform attention)."""
    return (1.0 - mask.to(dtype))[:, None, None, :] * torch.finfo(dtype).min


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, d_model // heads, dropout
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split(self, x: torch.Tensor, length: int | torch.Tensor) -> torch.Tensor:
        """Rows (R*T, D) of sequences of `length` positions -> heads (R, H, T, d)."""
        return x.view(-1, length, self.heads, self.head_dim).transpose(1, 2)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """Heads (R, H, T, d) -> rows (R*T, D)."""
        return x.transpose(1, 2).reshape(-1, self.heads * self.head_dim)

    def attend(self, q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        if self.scaling != 1.0:  # 1.0 once folded into q_proj (see `fold_query_scaling`)
            q = q * self.scaling
        scores = torch.matmul(q, k_t) + bias  # (R, H, T, S)
        probs = F.dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)
        return torch.matmul(probs, v)  # (R, H, T, d)

    def self_attention(
        self,
        x: torch.Tensor,
        length: int | torch.Tensor,
        bias: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x (R*T, D): R sequences of `length` new positions -> (R*T, D) and the cache (R, H, S, d) with them."""
        q, k, v = (self.split(proj(x), length) for proj in (self.q_proj, self.k_proj, self.v_proj))  # (R, H, T, d)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (R, H, S, d)
        out = self.attend(q, k.transpose(2, 3), v, bias)  # (R, H, T, d)
        return self.out_proj(self.merge(out)), (k, v)

    def cross_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states (N, L, D) -> key (N, H, d, L), value (N, H, L, d)."""
        length = memory.shape[1]
        rows = memory.reshape(-1, memory.shape[-1])  # (N*L, D)
        k_t = self.split(self.k_proj(rows), length).transpose(2, 3)  # (N, H, d, L)
        v = self.split(self.v_proj(rows), length)  # (N, H, L, d)
        return k_t, v

    def cross_attention(
        self, x: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor, queries: int | torch.Tensor
    ) -> torch.Tensor:
        """x (N*K*T, D): the K beams x T positions of each of N units, in that order, attend to their unit's memory.

        `queries` = K*T. The beams of a unit sit on the query axis of one product, `(N, H, K*T, d) @ (N, H, d, L)`,
        so they share one key/value."""
        k_t, v = kv
        out = self.attend(self.split(self.q_proj(x), queries), k_t, v, bias)  # (N, H, K*T, d)
        return self.out_proj(self.merge(out))  # (N*K*T, D)


def fold_query_scaling(model: nn.Module) -> None:
    """Fold every attention's 1/sqrt(d) score scaling into its query projection (weight and bias), for export.

    Same maths, and bit for bit when the scaling is a power of two (64-dim heads: 1/8). The exported score
    product is then a plain MatMul rather than one with a scale, which ONNX Runtime runs as a matrix-vector
    product when a unit has a single query (greedy decoding)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, Attention) and module.scaling != 1.0:
                module.q_proj.weight.mul_(module.scaling)
                module.q_proj.bias.mul_(module.scaling)
                module.scaling = 1.0


class FeedForwardMixin:
    """fc1 -> activation -> fc2, with the parameter names of HF BART layers."""

    def init_ffn(self, config: BartConfig, ffn_dim: int) -> None:
        self.fc1, self.fc2 = nn.Linear(config.d_model, ffn_dim), nn.Linear(ffn_dim, config.d_model)
        self.activation, self.activation_dropout = getattr(F, config.activation), config.activation_dropout

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.dropout(self.activation(self.fc1(x)), self.activation_dropout, self.training))


class EncoderLayer(FeedForwardMixin, nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        d = config.d_model
        self.self_attn = Attention(d, config.encoder_heads, config.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.init_ffn(config, config.encoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(d)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, length: int | torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x (N*L, D) -> (N*L, D)."""
        h, _ = self.self_attn.self_attention(x, length, bias)
        x = self.self_attn_layer_norm(x + F.dropout(h, self.dropout, self.training))
        h = self.ffn(x)
        return self.final_layer_norm(x + F.dropout(h, self.dropout, self.training))


class DecoderLayer(FeedForwardMixin, nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        d = config.d_model
        self.self_attn = Attention(d, config.decoder_heads, config.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = Attention(d, config.decoder_heads, config.attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.init_ffn(config, config.decoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(d)
        self.dropout = config.dropout

    def attend_self(self, x, length, self_bias, past):
        """Self-attention block: x (R*T, D) -> (R*T, D) and this layer's cache including these T steps."""
        h, present = self.self_attn.self_attention(x, length, self_bias, past)
        return self.self_attn_layer_norm(x + F.dropout(h, self.dropout, self.training)), present

    def attend_memory(self, x, cross, cross_bias, queries):
        """Cross-attention and feed-forward blocks: x (N*K*T, D) -> (N*K*T, D); queries = K*T per unit."""
        h = self.encoder_attn.cross_attention(x, cross, cross_bias, queries)
        x = self.encoder_attn_layer_norm(x + F.dropout(h, self.dropout, self.training))
        h = self.ffn(x)
        return self.final_layer_norm(x + F.dropout(h, self.dropout, self.training))

    def forward(self, x, length, self_bias, past, cross, cross_bias, queries):
        x, present = self.attend_self(x, length, self_bias, past)
        return self.attend_memory(x, cross, cross_bias, queries), present  # (R*T, D)


class Embeddings(nn.Module):
    """Token embedding (shared, passed in) + learned positions + LayerNorm."""

    def __init__(self, config: BartConfig, shared: nn.Embedding):
        super().__init__()
        self.shared = [shared]  # a list, so the shared table is not registered twice
        self.embed_positions = nn.Embedding(config.max_positions + POSITION_OFFSET, config.d_model)
        self.layernorm_embedding = nn.LayerNorm(config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = config.dropout

    def forward(self, input_ids: torch.Tensor, start: int | torch.Tensor = 0) -> torch.Tensor:
        length = input_ids.shape[1]
        positions = torch.arange(length, device=input_ids.device) + start + POSITION_OFFSET  # (T,)
        x = self.shared[0](input_ids) * self.scale + self.embed_positions(positions)  # (R, T, D)
        return F.dropout(self.layernorm_embedding(x), self.dropout, self.training)


class Encoder(Embeddings):
    def __init__(self, config: BartConfig, shared: nn.Embedding):
        super().__init__(config, shared)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = super().forward(input_ids)  # (N, L, D)
        length, dim = input_ids.shape[1], x.shape[-1]
        bias = attention_bias(attention_mask, x.dtype)  # (N, 1, 1, L)
        x = x.reshape(-1, dim)  # (N*L, D)
        for layer in self.layers:
            x = layer(x, length, bias)
        return x.view(-1, length, dim)  # (N, L, D)


class Decoder(Embeddings):
    def __init__(self, config: BartConfig, shared: nn.Embedding):
        super().__init__(config, shared)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))

    def forward(
        self,
        input_ids: torch.Tensor,
        cross: CrossKV,
        cross_bias: torch.Tensor,
        past: SelfKV | None = None,
        beams: int = 1,
        units: int = 1,
    ) -> tuple[torch.Tensor, SelfKV]:
        """input_ids (B*K, T): the tokens of each beam of B items, once per beam.

        Cross K/V hold N = B*U rows: U units per item, and every unit of an item decodes the same tokens. The
        embeddings and the first layer's self-attention see nothing but those tokens, so they run once per beam
        (B*K rows) and their result is shared by the item's U units; every later block runs on B*U*K rows.
        Returns hidden (B*U*K, T, D) and the self-attention cache including these T steps: layer 0 (B*K, H, S, d),
        every other layer (B*U*K, H, S, d).
        """
        start = 0 if past is None else past[0][0].shape[2]
        x = super().forward(input_ids, start)  # (B*K, T, D)
        length = input_ids.shape[1]
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)  # (T, T)
        self_bias = torch.zeros(length, length, dtype=x.dtype, device=x.device).masked_fill(
            future, torch.finfo(x.dtype).min
        )
        if past is not None:
            earlier = torch.zeros(length, start, dtype=x.dtype, device=x.device)  # (T, S - T)
            self_bias = torch.cat([earlier, self_bias], dim=1)  # (T, S)
        dim = x.shape[-1]
        x = x.reshape(-1, dim)  # (B*K*T, D)
        queries = beams * length  # query rows of one unit in cross-attention
        first = self.layers[0]
        x, kv = first.attend_self(x, length, self_bias, None if past is None else past[0])  # (B*K*T, D)
        x = x.view(-1, 1, queries, dim).expand(-1, units, -1, -1).reshape(-1, dim)  # (B*U*K*T, D)
        x = first.attend_memory(x, cross[0], cross_bias, queries)
        present = [kv]
        for i, layer in enumerate(self.layers[1:], start=1):
            x, kv = layer(x, length, self_bias, None if past is None else past[i], cross[i], cross_bias, queries)
            present.append(kv)
        return x.view(-1, length, dim), present  # (B*U*K, T, D)


class Bart(nn.Module):
    """BART backbone with the LM head tied to the shared embedding."""

    def __init__(self, config: BartConfig):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = Encoder(config, self.shared)
        self.decoder = Decoder(config, self.shared)
        self.register_buffer("final_logits_bias", torch.zeros(1, config.vocab_size))

    def cross_kv(self, memory: torch.Tensor) -> CrossKV:
        """Encoder states (N, L, D) -> every decoder layer's cross-attention key/value, computed once."""
        return [layer.encoder_attn.cross_kv(memory) for layer in self.decoder.layers]

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., D) -> logits (..., V). Rows are flattened so the export is one Gemm on the shared table
        (transB), not a MatMul on a transposed copy of it."""
        rows = hidden.reshape(-1, hidden.shape[-1])  # (R, D)
        logits = F.linear(rows, self.shared.weight, self.final_logits_bias[0])  # (R, V)
        return logits.view(*hidden.shape[:-1], -1)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits (N, T, V), as `BartForConditionalGeneration(...).logits`."""
        memory = self.encoder(input_ids, attention_mask)  # (N, L, D)
        hidden, _ = self.decoder(decoder_input_ids, self.cross_kv(memory), attention_bias(attention_mask, memory.dtype))
        return self.lm_logits(hidden)


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BART's initialisation: normal(0, std) for linear and embedding weights, zero biases."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()
