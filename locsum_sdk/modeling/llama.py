"""A decoder-only Llama-family backbone, equal to `transformers.LlamaForCausalLM` (and to Mistral's and Qwen2's,
which share its block).

Pre-RMSNorm layers, rotary positions (optionally scaled: linear, llama3), grouped-query attention (optionally with
query/key/value biases, as Qwen2 has), a SwiGLU feed-forward and an LM head tied to the token embedding or its own.
Parameter names follow HF Llama without the `model.` prefix (the LM head is `lm_head.weight`).

A unit (page, snippet, document) is read as its own prefix: `encode` runs the unit's tokens at positions 0..T-1
and returns every layer's key/value, which is the unit's encoding (keys stored transposed, `(N, KV, d, T)`, as
the encoder-decoder kinds store their cross-attention keys). A summary then continues each unit: its tokens sit
at positions that start where the unit's tokens end (`lengths`) and attend to the unit's cached keys/values
(under `unit_bias`, which hides a padded unit's tail) and to the summary before them. `extend` runs T summary
tokens at once (teacher forcing); `step` runs one new token of K beams with the summary's keys/values in a slot
cache written in place, exactly as `bart.Decoder.step` does (`write_index`, `slot_bias`).

Grouped-query attention never copies a key/value head: the G query heads that share one are stacked on the query
axis, `(N, KV, G*T, d) @ (N, KV, d, S)`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..configs.llama import LlamaConfig
from .bart import attention_bias, slot_bias, write_index
from .lora import add_adapters

UnitKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: key (N, KV, d, L), value (N, KV, L, d)
SlotCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: key, value (N, KV, K, C, d)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, the mean square taken in float32 (as HF Llama does)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * wide.to(x.dtype)


@functools.lru_cache(maxsize=16)
def frequencies(config: LlamaConfig) -> torch.Tensor:
    """The rotary frequencies (d/2,), float32: pair (i, i + d/2) turns by 1 / base^(2i/d) a position, scaled as
    `config.rope_type` says (HF's `rope_scaling`): linear divides them all by the factor; llama3 divides those
    whose wavelength is over original_positions / low_freq_factor, keeps those under original_positions /
    high_freq_factor, and blends the two in between. Divisors stored with the model (`rope_divisors`) divide each
    pair's frequency by its own. Computed once per config (every step reads them; nothing writes them)."""
    d = config.head_dim
    inverse = 1.0 / config.rope_base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)  # (d/2,)
    if config.rope_divisors:
        inverse = inverse / torch.tensor(config.rope_divisors, dtype=torch.float32)
    if config.rope_type == "linear":
        return inverse / config.rope_factor
    if config.rope_type == "llama3":
        original, factor = config.rope_original_positions, config.rope_factor
        low, high = config.rope_low_freq_factor, config.rope_high_freq_factor
        wavelength = 2 * math.pi / inverse
        scaled = torch.where(wavelength > original / low, inverse / factor, inverse)
        smooth = (original / wavelength - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        between = ~(wavelength < original / high) & ~(wavelength > original / low)
        return torch.where(between, blended, scaled)
    return inverse


def rotary(positions: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Integer positions (...) and frequencies (d/2,) -> cos and sin (2, ..., d) of the rotary code, float32."""
    angles = positions[..., None].float() * inverse.to(positions.device)  # (..., d/2)
    angles = torch.cat([angles, angles], dim=-1)
    return torch.stack([angles.cos(), angles.sin()])


def causal_bias(length: int | torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(T, T) additive bias letting each of T positions attend to itself and those before it (a comparison of
    positions, which every runtime's parser takes)."""
    positions = torch.arange(length, device=device)
    future = positions[None, :] > positions[:, None]
    return torch.zeros(future.shape, dtype=dtype, device=device).masked_fill(future, torch.finfo(dtype).min)


def stacked(bias: torch.Tensor, times: int) -> torch.Tensor:
    """bias (..., Q, S) -> (..., times*Q, S): the same rows for each of `times` query heads stacked on the query
    axis (an Expand and a Reshape, not a Tile)."""
    shape = bias.shape
    return bias.unsqueeze(-3).expand(*shape[:-2], times, *shape[-2:]).reshape(*shape[:-2], -1, shape[-1])


def per_unit(x: torch.Tensor, units: int | torch.Tensor) -> torch.Tensor:
    """x (B, ...) -> (B*U, ...): each item's rows once for each of its U units."""
    return x.unsqueeze(1).expand(x.shape[0], units, *x.shape[1:]).reshape(-1, *x.shape[1:])


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply the rotary code to x (..., d): each half-pair (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def attend(q: torch.Tensor, parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
           scaling: float) -> torch.Tensor:
    """q (R, KV, Q, d) over one softmax across every part (key_t (R, KV, d, S), value (R, KV, S, d), additive
    bias broadcasting to (R, KV, Q, S)), scores times `scaling` -> (R, KV, Q, d). The softmax is taken in float32."""
    scores = [torch.matmul(q, key_t) * scaling + bias for key_t, _, bias in parts]
    sizes = [s.shape[-1] for s in scores]
    probs = torch.softmax(torch.cat(scores, dim=-1), dim=-1, dtype=torch.float32).to(q.dtype)
    pieces = torch.split(probs, sizes, dim=-1) if len(parts) > 1 else (probs,)
    out = torch.matmul(pieces[0], parts[0][1])
    for piece, (_, value, _) in zip(pieces[1:], parts[1:]):
        out = out + torch.matmul(piece, value)
    return out


def heads_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, kv_heads: int,
             length: int | torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Projected rows (R*T, heads*d), (R*T, KV*d) twice -> rotated queries (R, KV, G*T, d) (the G heads sharing a
    key/value head stacked on the query axis), rotated keys (R, KV, T, d), values (R, KV, T, d)."""
    d = q.shape[-1] // heads

    def split(x: torch.Tensor, count: int) -> torch.Tensor:  # (R*T, count*d) -> (R, count, T, d)
        return x.view(-1, length, count, d).transpose(1, 2)

    q, k = rotate(split(q, heads), cos, sin), rotate(split(k, kv_heads), cos, sin)
    rows, _, steps, _ = q.shape
    return q.reshape(rows, kv_heads, heads // kv_heads * steps, d), k, split(v, kv_heads)


def merged(out: torch.Tensor, heads: int, length: int | torch.Tensor) -> torch.Tensor:
    """Attention outputs (R, KV, G*T, d) -> rows (R*T, H*d), heads side by side."""
    rows, d = out.shape[0], out.shape[-1]
    return out.reshape(rows, heads, length, d).transpose(1, 2).reshape(-1, heads * d)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        d, hd = config.d_model, config.head_dim
        self.heads, self.kv_heads, self.group, self.head_dim = config.heads, config.kv_heads, config.group, hd
        self.scaling = hd**-0.5
        self.q_proj = nn.Linear(d, config.heads * hd, bias=config.attention_bias)
        self.k_proj = nn.Linear(d, config.kv_heads * hd, bias=config.attention_bias)
        self.v_proj = nn.Linear(d, config.kv_heads * hd, bias=config.attention_bias)
        self.o_proj = nn.Linear(config.heads * hd, d, bias=config.output_bias)
        # extend without a past as one operator (`unit_attention.fuse`, for graphs ONNX Runtime runs); None: as written
        self.unit_attention: Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] | None = None

    def split(self, x: torch.Tensor, heads: int, length: int | torch.Tensor) -> torch.Tensor:
        """Rows (R*T, heads*d) -> (R, heads, T, d)."""
        return x.view(-1, length, heads, self.head_dim).transpose(1, 2)

    def project(self, x: torch.Tensor, length: int | torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x (R*T, D) -> `heads_of` its projections."""
        return heads_of(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.heads, self.kv_heads, length, cos, sin)

    def merge(self, out: torch.Tensor, length: int | torch.Tensor) -> torch.Tensor:
        """(R, KV, G*T, d) -> rows (R*T, H*d) through the output projection."""
        return self.o_proj(merged(out, self.heads, length))

    def attend(self, q: torch.Tensor, parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """`attend` at this attention's scaling."""
        return attend(q, parts, self.scaling)


    def extend(self, x: torch.Tensor, length: int | torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               causal: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None,
               past_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x (R*T, D): T new positions of R sequences, each attending to those before it (`causal`, (T, T)) and
        to `past` (key_t (R, KV, d, L), value) under `past_bias` (R, 1, 1, L) -> (R*T, D), and the new
        positions' key_t (R, KV, d, T) and value (R, KV, T, d)."""
        if past is None and self.unit_attention is not None:
            return self.unit_attention(self, x, length, cos, sin)
        q, k, v = self.project(x, length, cos, sin)
        k_t = k.transpose(2, 3)
        parts = [] if past is None else [(past[0], past[1], past_bias)]
        parts.append((k_t, v, stacked(causal, self.group)))
        return self.merge(self.attend(q, parts), length), (k_t, v)

    def step(self, x: torch.Tensor, beams: int | torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             unit: tuple[torch.Tensor, torch.Tensor], unit_bias: torch.Tensor,
             cache: tuple[torch.Tensor, torch.Tensor], at: tuple[torch.Tensor, ...], self_bias: torch.Tensor,
             ) -> torch.Tensor:
        """x (N*K, D): one new position of K beams of N sequences -> (N*K, D).

        Each beam's key/value is written into its slot of `cache` (N, KV, K, C, d) at `at` (see `write_index`), in
        place; each beam then attends to its unit (key_t (N, KV, d, L), value (N, KV, L, d) under `unit_bias`
        (N, 1, 1, L)) and to the cached positions `self_bias` (N, 1, K, K*C) leaves open."""
        q, k, v = self.project(x, beams, cos, sin)  # q (N, KV, G*K, d); k, v (N, KV, K, d)
        keys, values = cache
        keys.index_put_(at, k)
        values.index_put_(at, v)
        rows = keys.shape[0]
        flat = (rows, self.kv_heads, -1, self.head_dim)  # (N, KV, K*C, d)
        parts = [(unit[0], unit[1], unit_bias),
                 (keys.view(flat).transpose(2, 3), values.view(flat), stacked(self_bias, self.group))]
        return self.merge(self.attend(q, parts), beams)


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.d_model, config.ffn_dim, bias=config.mlp_bias)
        self.up_proj = nn.Linear(config.d_model, config.ffn_dim, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.ffn_dim, config.d_model, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.d_model, config.rms_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.rms_eps)
        self.mlp = FeedForward(config)

    def finish(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The residual blocks around an attention output h: x + h, then x + mlp(norm(x))."""
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x))


def refuse_read(read: bool) -> None:
    if read:
        raise ValueError("a Llama backbone has no cross-attention for a copy distribution to read; copy is off")


class Llama(nn.Module):
    """The backbone: token embedding, pre-norm layers, final norm, LM head (the embedding, or `lm_head`)."""

    shares_first_layer = False  # every layer's self-attention reads the unit: no cache is shared by an item's units

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.d_model, config.rms_eps)
        if not config.tie_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.lora_rank:
            add_adapters(self.layers, config.lora_rank, config.lora_alpha)

    def codes(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (R, T) -> rotary cos, sin (R, 1, T, d), broadcasting over heads, computed for these positions
        only (a graph holds no table of every position's codes)."""
        code = rotary(positions, frequencies(self.config)).to(dtype)  # (2, R, T, d)
        return code[0][:, None], code[1][:, None]

    def extend(self, input_ids: torch.Tensor, start: torch.Tensor | None = None, past: UnitKV | None = None,
               past_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, UnitKV]:
        """input_ids (R, T) at positions start..start+T-1 (start (R,); default 0), each attending to those before
        it and to `past` (per layer key_t (R, KV, d, L), value) where `past_mask` (R, L) is 1 -> hidden states
        after the final norm (R, T, D), and every layer's key_t/value of these T positions."""
        rows, length = input_ids.shape
        offsets = torch.arange(length, device=input_ids.device)[None, :]
        positions = offsets if start is None else start[:, None] + offsets  # (1 or R, T)
        x = self.embed_tokens(input_ids)  # (R, T, D)
        cos, sin = self.codes(positions, x.dtype)
        causal = causal_bias(length, x.dtype, x.device)  # (T, T)
        bias = None if past is None else attention_bias(past_mask, x.dtype)
        h, kv = x.reshape(-1, x.shape[-1]), []
        for i, layer in enumerate(self.layers):
            out, new = layer.self_attn.extend(layer.input_layernorm(h), length, cos, sin, causal,
                                              None if past is None else past[i], bias)
            h = layer.finish(h, out)
            kv.append(new)
        return self.norm(h).view(rows, length, -1), kv

    def encode_units(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, UnitKV]:
        """Units (N, L) at positions 0..L-1, padding only at the end -> their hidden states (N, L, D) and every
        layer's key_t (N, KV, d, L) and value (N, KV, L, d): each unit's encoding (`backbone.Backbone`). Padded
        positions come last, so no real position reads them, and the summary's steps hide them (`attention_mask`);
        a padded unit encodes as it would alone, its padded positions zeros."""
        hidden, kv = self.extend(input_ids)
        keep = attention_mask.to(hidden.dtype)  # (N, L)
        kv = [(k_t * keep[:, None, None, :], v * keep[:, None, :, None]) for k_t, v in kv]
        return hidden * keep[..., None], kv

    def decode(self, decoder_input_ids: torch.Tensor, cross: UnitKV, unit_attention_mask: torch.Tensor,
               units: int = 1, read: bool = False) -> torch.Tensor:
        """Teacher forcing: decoder_input_ids (B, T), the summary of each item, continue every one of its U units
        (cross: N = B*U rows) -> hidden (B*U, T, D)."""
        refuse_read(read)
        rows = per_unit(decoder_input_ids, units)  # (B*U, T)
        return self.extend(rows, unit_attention_mask.sum(-1), cross, unit_attention_mask)[0]

    def step(self, input_ids: torch.Tensor, cross: UnitKV, unit_attention_mask: torch.Tensor, cache: SlotCache,
             position: torch.Tensor, cache_slots: torch.Tensor, units: int | torch.Tensor = 1,
             read: bool = False) -> torch.Tensor:
        """One new position of K beams: input_ids (B, K) at summary position `position` (1,), cache_slots (B, K, C)
        (see `bart.slot_bias`), for every one of an item's U units (cross: N = B*U rows; a unit of L' real tokens
        puts the summary's position p at rotary position L' + p) -> hidden (B*U*K, D) after the final norm. Writes
        each beam's keys/values into `cache` (per layer (N, KV, K, C, d)) at `position`, in place."""
        refuse_read(read)
        beams = input_ids.shape[1]
        ids = per_unit(input_ids, units)  # (N, K)
        x = self.embed_tokens(ids.reshape(-1))  # (N*K, D)
        lengths = unit_attention_mask.sum(-1)  # (N,)
        cos, sin = self.codes((lengths + position)[:, None], x.dtype)  # (N, 1, 1, d)
        unit_bias = attention_bias(unit_attention_mask, x.dtype)  # (N, 1, 1, L)
        self_bias = slot_bias(cache_slots, x.dtype)  # (B, 1, K, K*C)
        self_bias = per_unit(self_bias, units)  # (N, 1, K, K*C)
        at = write_index(cache[0][0], position)
        h = x
        for i, layer in enumerate(self.layers):
            out = layer.self_attn.step(layer.input_layernorm(h), beams, cos, sin, cross[i], unit_bias, cache[i], at,
                                       self_bias)
            h = layer.finish(h, out)
        return self.norm(h)

    def empty_cache(self, rows: int, beams: int, capacity: int, dtype: torch.dtype | None = None) -> SlotCache:
        """A zeroed slot cache for `rows` sequences of `beams` beams and `capacity` summary positions."""
        cfg = self.config
        dtype = dtype or self.embed_tokens.weight.dtype
        shape = (rows, cfg.kv_heads, beams, capacity, cfg.head_dim)
        device = self.embed_tokens.weight.device
        return [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                for _ in self.layers]

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., D) -> logits (..., V) through the LM head, rows flattened (one Gemm when exported)."""
        rows = hidden.reshape(-1, hidden.shape[-1])
        head = self.embed_tokens.weight if self.config.tie_embeddings else self.lm_head.weight
        return F.linear(rows, head).view(*hidden.shape[:-1], -1)

    def token_embedding(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids (...) -> the tokens' embeddings (..., D)."""
        return self.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (R, T, V) of unpadded sequences, as `LlamaForCausalLM(input_ids).logits`."""
        return self.lm_logits(self.extend(input_ids)[0])
