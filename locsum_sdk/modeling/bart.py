"""A compact BART encoder-decoder, equal to `transformers.BartForConditionalGeneration` (post-LayerNorm).

Parameter names follow HF BART without the `model.` prefix, so HF weights load by name. The decoder takes the
cross-attention keys/values precomputed once per unit, with keys stored transposed, and serves K beams of one
unit by stacking them on the query axis: `Q[N, H, K*T, d] @ K[N, H, d, L]`. Nothing is copied per beam. When
several units decode the same tokens (PageSum's pages), the decoder's embeddings and first self-attention block
run once per beam and are shared by the units.

While decoding, each layer's self-attention cache has K beam slots of C positions, `(G, H, K, C, d)`, written in
place: the step writes beam k's new key/value into slot k at its position and never moves what is cached. A
beam that continues another one keeps reading the positions of that beam's history from the slots where they
were written; `cache_slots` says which, and becomes the attention mask. Beams are reordered without copying
the cache (the reorder is a gather of the small `(B, K, C)` slot map, done by the runtime).

Inside the encoder and decoder, hidden states travel as 2-D rows (sequences x positions, D): every linear layer
then exports as one `Gemm` with its bias fused, not a batched `MatMul` followed by an `Add`, and only attention
reshapes to heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..configs.model import BartConfig
from .copy import CopyGate

#: BART's learned positions start at row 2 of the position table.
POSITION_OFFSET = 2

CrossKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: key (N, H, d, L), value (N, H, L, d)
SlotCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: key, value (G, H, K, C, d); G = B for layer 0, N after


def attention_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(N, L) 0/1 mask -> (N, 1, 1, L) additive bias; a fully padded row stays finite (uniform attention)."""
    return (1.0 - mask.to(dtype))[:, None, None, :] * torch.finfo(dtype).min


def run_encoder_layers(layers: nn.ModuleList, x: torch.Tensor, length: int, bias: torch.Tensor,
                       checkpointed: bool) -> torch.Tensor:
    """x (N*L, D) through encoder layers. `checkpointed` (training only): each layer keeps its input alone and runs
    again in the backward pass, so an encoder over many chunks holds one layer's activations at a time, not every
    layer's, at the cost of one more forward pass."""
    for layer in layers:
        if checkpointed and torch.is_grad_enabled():
            x = checkpoint(layer, x, length, bias, use_reentrant=False)
        else:
            x = layer(x, length, bias)
    return x


def causal_bias(length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(T, T) additive bias letting each of T positions attend to itself and those before it."""
    future = torch.ones(length, length, dtype=torch.bool, device=device).triu(1)  # (T, T)
    return torch.zeros(length, length, dtype=dtype, device=device).masked_fill(future, torch.finfo(dtype).min)


def write_index(cache: torch.Tensor, position: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Where a step writes into a slot cache (G, H, K, C, d): every group, head and slot k, at `position` (1,).
    Built once per step and cache shape, so the exported graph builds each index once, not per layer."""
    groups, heads, beams = cache.shape[:3]
    index = lambda n: torch.arange(n, device=cache.device)  # noqa: E731
    return index(groups)[:, None, None], index(heads)[None, :, None], index(beams)[None, None, :], position


def slot_bias(cache_slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """cache_slots (B, K, C): the slot holding each position of each beam's history, -1 where none
    -> additive bias (B, 1, K, K*C) over the K slots x C positions of a cache, 0 where the beam's history is."""
    batch, beams, capacity = cache_slots.shape
    slot = torch.arange(beams, device=cache_slots.device)[:, None]  # (K, 1)
    elsewhere = cache_slots[:, :, None, :] != slot  # (B, K, K, C): beam, slot, position
    return elsewhere.to(dtype).reshape(batch, 1, beams, -1) * torch.finfo(dtype).min


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

    def attend(self, q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
               keep: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(R, H, T, d) output; with `keep`, also the attention probabilities averaged over heads (R, T, S),
        taken before dropout."""
        if self.scaling != 1.0:  # 1.0 once folded into q_proj (see `fold_query_scaling`)
            q = q * self.scaling
        probs = torch.softmax(torch.matmul(q, k_t) + bias, dim=-1)  # (R, H, T, S)
        out = torch.matmul(F.dropout(probs, self.dropout, self.training), v)  # (R, H, T, d)
        return (out, probs.mean(dim=1)) if keep else out

    def self_attention(self, x: torch.Tensor, length: int | torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x (R*T, D): R sequences of `length` positions attend to each other under `bias` -> (R*T, D)."""
        q, k, v = (self.split(proj(x), length) for proj in (self.q_proj, self.k_proj, self.v_proj))  # (R, H, T, d)
        return self.out_proj(self.merge(self.attend(q, k.transpose(2, 3), v, bias)))

    def slot_attention(
        self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor], at: tuple[torch.Tensor, ...],
        bias: torch.Tensor,
    ) -> torch.Tensor:
        """x (G*K, D): one new position of K beams of G sequences -> (G*K, D).

        Beam k's key/value is written into slot k of the cache (G, H, K, C, d) at the position that `at` (see
        `write_index`) names, in place; then every beam attends over the K*C cached positions that `bias`
        (G, 1, K, K*C) leaves open. G and K are read from `bias`, which every layer of a step shares, so the
        exported graph computes its reshapes once per step rather than once per layer."""
        keys, values = cache
        groups, beams = bias.shape[0], bias.shape[2]  # shapes of the step's shared tensors, not of this layer's
        q, k, v = (self.split(proj(x), beams) for proj in (self.q_proj, self.k_proj, self.v_proj))  # (G, H, K, d)
        keys.index_put_(at, k)
        values.index_put_(at, v)
        flat = (groups, self.heads, -1, self.head_dim)  # (G, H, K*C, d)
        out = self.attend(q, keys.view(flat).transpose(2, 3), values.view(flat), bias)  # (G, H, K, d)
        return self.out_proj(self.merge(out))

    def cross_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states (N, L, D) -> key (N, H, d, L), value (N, H, L, d)."""
        length = memory.shape[1]
        rows = memory.reshape(-1, memory.shape[-1])  # (N*L, D)
        k_t = self.split(self.k_proj(rows), length).transpose(2, 3)  # (N, H, d, L)
        v = self.split(self.v_proj(rows), length)  # (N, H, L, d)
        return k_t, v

    def cross_attention(
        self, x: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor, queries: int | torch.Tensor,
        keep: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x (N*K*T, D): the K beams x T positions of each of N units, in that order, attend to their unit's memory.

        `queries` = K*T. The beams of a unit sit on the query axis of one product, `(N, H, K*T, d) @ (N, H, d, L)`,
        so they share one key/value. With `keep`, also the probabilities averaged over heads (N, K*T, L)."""
        k_t, v = kv
        out = self.attend(self.split(self.q_proj(x), queries), k_t, v, bias, keep)  # (N, H, K*T, d)
        if keep:
            return self.out_proj(self.merge(out[0])), out[1]
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
        return self.after_attention(x, self.self_attn.self_attention(x, length, bias))

    def after_attention(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The layer's residual blocks around an attention output h: x + h, norm, feed-forward, norm."""
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

    def attend_self(self, x, length, self_bias, cache=None, at=None):
        """Self-attention block: x (R*T, D) -> (R*T, D). Without a cache, R sequences of `length` positions under
        `self_bias`; with one, `length` beams of one new position written into it at `at` (see `slot_attention`)."""
        if cache is None:
            h = self.self_attn.self_attention(x, length, self_bias)
        else:
            h = self.self_attn.slot_attention(x, cache, at, self_bias)
        return self.self_attn_layer_norm(x + F.dropout(h, self.dropout, self.training))

    def attend_memory(self, x, cross, cross_bias, queries):
        """Cross-attention and feed-forward blocks: x (N*K*T, D) -> (N*K*T, D); queries = K*T per unit."""
        return self.after_memory(x, self.encoder_attn.cross_attention(x, cross, cross_bias, queries))

    def after_memory(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The residual blocks around a cross-attention output h: x + h, norm, feed-forward, norm."""
        x = self.encoder_attn_layer_norm(x + F.dropout(h, self.dropout, self.training))
        h = self.ffn(x)
        return self.final_layer_norm(x + F.dropout(h, self.dropout, self.training))


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
        """input_ids (R, T) -> (R, T, D); positions start at `start`: a number, or one per row (R, 1)."""
        length = input_ids.shape[1]
        positions = torch.arange(length, device=input_ids.device) + start + POSITION_OFFSET  # (T,) or (R, T)
        x = self.shared[0](input_ids) * self.scale + self.embed_positions(positions)  # (R, T, D)
        return F.dropout(self.layernorm_embedding(x), self.dropout, self.training)


class Encoder(Embeddings):
    def __init__(self, config: BartConfig, shared: nn.Embedding):
        super().__init__(config, shared)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.checkpoint_layers = False  # training: recompute each layer in the backward pass (`run_encoder_layers`)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = super().forward(input_ids)  # (N, L, D)
        length, dim = input_ids.shape[1], x.shape[-1]
        bias = attention_bias(attention_mask, x.dtype)  # (N, 1, 1, L)
        x = run_encoder_layers(self.layers, x.reshape(-1, dim), length, bias, self.checkpoint_layers)  # (N*L, D)
        return x.view(-1, length, dim)  # (N, L, D)


class Decoder(Embeddings):
    def __init__(self, config: BartConfig, shared: nn.Embedding):
        super().__init__(config, shared)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))

    def forward(self, input_ids: torch.Tensor, cross: CrossKV, cross_bias: torch.Tensor, units: int = 1,
                read: bool = False):
        """Teacher forcing: input_ids (B, T), every position attending to those before it -> hidden (B*U, T, D).

        Cross K/V hold N = B*U rows: U units per item, and every unit of an item decodes the same tokens. The
        embeddings and the first layer's self-attention see nothing but those tokens, so they run once per item
        and their result is shared by the item's U units; every later block runs on B*U rows. With `read`, also
        what the last layer read (see `blocks`).
        """
        length = input_ids.shape[1]
        x = super().forward(input_ids)  # (B, T, D)
        causal = causal_bias(length, x.dtype, x.device)  # (T, T)

        def attend_self(i, layer, h):
            return layer.attend_self(h, length, causal)

        out = self.blocks(x, length, units, cross, cross_bias, attend_self, read)
        if read:
            return (out[0].view(-1, length, x.shape[-1]), *out[1:])
        return out.view(-1, length, x.shape[-1])

    def step(
        self,
        input_ids: torch.Tensor,
        cross: CrossKV,
        cross_bias: torch.Tensor,
        cache: SlotCache,
        position: torch.Tensor,
        cache_slots: torch.Tensor,
        units: int | torch.Tensor = 1,
        read: bool = False,
    ):
        """One new position of K beams: input_ids (B, K), position (1,), cache_slots (B, K, C) -> hidden (B*U*K, D)
        (with `read`, also what the last layer read, see `blocks`).

        Writes each beam's keys/values into `cache` (per layer (G, H, K, C, d): G = B for the first layer, whose
        cache the units of an item share, G = B*U after) at `position`, in place."""
        batch, beams = input_ids.shape
        x = super().forward(input_ids.reshape(-1, 1), position)  # (B*K, 1, D)
        bias = slot_bias(cache_slots, x.dtype)  # (B, 1, K, K*C)
        unit_bias = bias[:, None].expand(-1, units, -1, -1, -1).reshape(-1, *bias.shape[1:])  # (B*U, 1, K, K*C)
        item_at = write_index(cache[0][0], position)
        unit_at = write_index(cache[1][0], position) if len(cache) > 1 else None

        def attend_self(i, layer, h):
            at, self_bias = (item_at, bias) if i == 0 else (unit_at, unit_bias)
            return layer.attend_self(h, beams, self_bias, cache[i], at)

        return self.blocks(x, beams, units, cross, cross_bias, attend_self, read)

    def blocks(self, x, queries, units, cross, cross_bias, attend_self, read: bool = False):
        """Every layer on x (B, Q, D), Q = the query rows of one unit (T positions or K beams) -> (B*U*Q, D);
        `attend_self(i, layer, rows)` runs layer i's self-attention block. With `read`, returns (hidden, the last
        layer's cross-attention output (B*U*Q, D), its probabilities averaged over heads (B*U, Q, L)): what a copy
        distribution reads (`modeling.copy`)."""
        dim, last = x.shape[-1], len(self.layers) - 1
        h = attend_self(0, self.layers[0], x.reshape(-1, dim))  # (B*Q, D)
        h = h.view(-1, 1, queries, dim).expand(-1, units, -1, -1).reshape(-1, dim)  # (B*U*Q, D)
        for i, layer in enumerate(self.layers):
            if i:
                h = attend_self(i, layer, h)
            if read and i == last:
                context, attention = layer.encoder_attn.cross_attention(h, cross[i], cross_bias, queries, keep=True)
                return layer.after_memory(h, context), context, attention
            h = layer.attend_memory(h, cross[i], cross_bias, queries)
        return h


class Bart(nn.Module):
    """BART backbone with the LM head tied to the shared embedding."""

    shares_first_layer = True  # the units of an item share layer 0's self-attention cache (`Decoder.blocks`)

    def __init__(self, config: BartConfig):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = Encoder(config, self.shared)
        self.decoder = Decoder(config, self.shared)
        self.register_buffer("final_logits_bias", torch.zeros(1, config.vocab_size))
        if config.copy:
            self.copy_gate = CopyGate(config.d_model)

    def token_embedding(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids (...) -> the tokens' embeddings (..., D) as the decoder scales them, without positions."""
        return self.shared(input_ids) * self.decoder.scale

    def cross_kv(self, memory: torch.Tensor) -> CrossKV:
        """Encoder states (N, L, D) -> every decoder layer's cross-attention key/value, computed once."""
        return [layer.encoder_attn.cross_kv(memory) for layer in self.decoder.layers]

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., D) -> logits (..., V). Rows are flattened so the export is one Gemm on the shared table
        (transB), not a MatMul on a transposed copy of it."""
        rows = hidden.reshape(-1, hidden.shape[-1])  # (R, D)
        logits = F.linear(rows, self.shared.weight, self.final_logits_bias[0])  # (R, V)
        return logits.view(*hidden.shape[:-1], -1)

    def encode_units(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, CrossKV]:
        """Units (N, L) -> encoder states (N, L, D) and every decoder layer's cross key/value (`backbone.Backbone`)."""
        memory = self.encoder(input_ids, attention_mask)
        return memory, self.cross_kv(memory)

    def decode(self, decoder_input_ids: torch.Tensor, cross: CrossKV, unit_attention_mask: torch.Tensor,
               units: int = 1, read: bool = False):
        """Teacher forcing over every unit of each item (`Decoder.forward`), the units' mask (N, L) as given."""
        bias = attention_bias(unit_attention_mask, cross[0][1].dtype)
        return self.decoder(decoder_input_ids, cross, bias, units=units, read=read)

    def step(self, input_ids: torch.Tensor, cross: CrossKV, unit_attention_mask: torch.Tensor, cache: SlotCache,
             position: torch.Tensor, cache_slots: torch.Tensor, units: int | torch.Tensor = 1, read: bool = False):
        """One step of K beams over every unit of each item (`Decoder.step`), the units' mask (N, L) as given."""
        bias = attention_bias(unit_attention_mask, cross[0][1].dtype)  # (N, 1, 1, L)
        return self.decoder.step(input_ids, cross, bias, cache, position, cache_slots, units, read=read)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits (N, T, V), as `BartForConditionalGeneration(...).logits`."""
        memory = self.encoder(input_ids, attention_mask)  # (N, L, D)
        hidden = self.decoder(decoder_input_ids, self.cross_kv(memory), attention_bias(attention_mask, memory.dtype))
        return self.lm_logits(hidden)


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BART's initialisation: normal(0, std) for linear and embedding weights, zero biases (a copy gate's bias at
    `copy.GATE_BIAS`)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()
    for m in module.modules():
        if isinstance(m, CopyGate):
            m.init_bias()
