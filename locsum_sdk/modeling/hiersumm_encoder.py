"""The Hierarchical Transformer's encoder (Liu & Lapata 2019): paragraphs encoded by local layers (inside each
paragraph) and global layers (paragraphs exchange information through multi-head pooling and inter-paragraph
attention), all pre-LayerNorm as in the authors' model.

    embeddings:  token * sqrt(d) + [sinusoid(position in paragraph) (d/2) ; sinusoid(paragraph rank) (d/2)]
    local:       x + SelfAttention(LN(x)) inside the paragraph, then x + FFN(LN(x))
    global:      per head h: a[t] = softmax over the paragraph's tokens of s_h(LN(x)[t]), p_h = LN_h(sum_t a[t] v_h[t])
                 c_h = attention of p_h over the paragraphs' p_h (empty paragraphs masked); or, for the graph head,
                 c_h = sum_j G[i, j] p_h[j] with G the given row-normalized paragraph graph
                 x + Linear([c_1; ...; c_H]) for every token of the paragraph, then x + FFN(LN(x))

Paragraphs lie on a (B, P, T) grid; padding tokens carry `attention_mask` 0, and an empty paragraph (no token) is
left out of every other paragraph's attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputTooLongError


@dataclass(frozen=True)
class EncoderParts:
    """Switches for the paper's ablations: paragraph-rank positions, multi-head pooling (one head when off),
    the global layers (local layers in their place when off), the graph-informed head."""

    paragraph_position: bool = True
    multi_head_pooling: bool = True
    global_layers: bool = True
    graph_head: bool = True


def sinusoid(length: int, dim: int) -> torch.Tensor:
    """The sinusoidal code of positions 0..length-1: (length, dim), sin on even and cos on odd dimensions."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))
    code = torch.zeros(length, dim)
    code[:, 0::2] = torch.sin(position * rate)
    code[:, 1::2] = torch.cos(position * rate)
    return code


class ParagraphEmbedding(nn.Module):
    """Token embedding scaled by sqrt(d), plus the token's position in its paragraph (first half of the dimensions)
    and its paragraph's rank (second half; zeros when `paragraph_position` is off). Both codes are rows of one
    sinusoid table of `max_positions` rows."""

    def __init__(self, embed: nn.Embedding, dropout: float, paragraph_position: bool = True,
                 max_positions: int = 512):
        super().__init__()
        self.shared = [embed]  # a list: the table belongs to the model that owns it, registered once
        self.dropout, self.paragraph_position = dropout, paragraph_position
        self.register_buffer("table", sinusoid(max_positions, embed.embedding_dim // 2), persistent=False)

    @property
    def embed(self) -> nn.Embedding:
        return self.shared[0]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids (B, P, T) -> (B, P, T, D)."""
        batch, paragraphs, tokens = input_ids.shape
        if max(paragraphs, tokens) > len(self.table):
            raise InputTooLongError(f"{paragraphs} paragraphs of {tokens} tokens: the model codes at most "
                                    f"{len(self.table)} paragraph ranks and positions; keep fewer paragraphs "
                                    "(top_paragraphs) or shorter ones")
        local = self.table[:tokens][None, None, :, :].expand(batch, paragraphs, -1, -1)
        rank = self.table[:paragraphs][None, :, None, :].expand(batch, -1, tokens, -1)
        if not self.paragraph_position:
            rank = torch.zeros_like(rank)
        x = self.embed(input_ids) * math.sqrt(self.embed.embedding_dim) + torch.cat([local, rank], dim=-1)
        return F.dropout(x, self.dropout, self.training)


class FeedForward(nn.Module):
    """x + W2 ReLU(W1 LN(x)) (pre-LayerNorm, residual inside)."""

    def __init__(self, dim: int, hidden: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.w1, self.w2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = F.dropout(F.relu(self.w1(self.norm(x))), self.dropout, self.training)
        return x + F.dropout(self.w2(inner), self.dropout, self.training)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, dropout: float,
           training: bool) -> torch.Tensor:
    """Scaled dot-product attention; mask (..., 1 or Q, S) True where a key may be attended."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.matmul(F.dropout(torch.softmax(scores, dim=-1), dropout, training), v)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (N, T, D), mask (N, T) True for real tokens -> (N, T, D)."""
        n, t, d = x.shape
        split = lambda y: y.view(n, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        out = attend(split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)), mask[:, None, None, :],
                     self.dropout, self.training)
        return self.out_proj(out.transpose(1, 2).reshape(n, t, d))


class LocalLayer(nn.Module):
    """An ordinary (pre-LayerNorm) transformer layer inside each paragraph."""

    def __init__(self, dim: int, heads: int, hidden: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.attention = SelfAttention(dim, heads, dropout)
        self.feed_forward = FeedForward(dim, hidden, dropout)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor, paragraph_mask: torch.Tensor,
                graph: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, P, T, D), token_mask (B, P, T) -> (B, P, T, D)."""
        b, p, t, d = x.shape
        flat = x.reshape(b * p, t, d)
        h = self.attention(self.norm(flat), token_mask.reshape(b * p, t))
        return self.feed_forward(flat + F.dropout(h, self.dropout, self.training)).view(b, p, t, d)


class MultiHeadPooling(nn.Module):
    """Per head h, a score per token (softmax over the paragraph's real tokens) weighting the head's values."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.scores = nn.Linear(dim, heads)
        self.values = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
        """x (N, T, D), token_mask (N, T) -> one vector per head (N, H, D/H); zeros for a paragraph of no token."""
        n, t, d = x.shape
        scores = self.scores(x).transpose(1, 2)  # (N, H, T)
        scores = scores.masked_fill(~token_mask[:, None, :], torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1) * token_mask[:, None, :]  # an empty paragraph weighs nothing
        weights = F.dropout(weights, self.dropout, self.training)
        values = self.values(x).view(n, t, self.heads, d // self.heads).transpose(1, 2)  # (N, H, T, D/H)
        return torch.matmul(weights[:, :, None, :], values).squeeze(2)


class GlobalLayer(nn.Module):
    """Paragraphs exchange information: multi-head pooling, inter-paragraph attention per head (the graph head, if
    any, follows the given graph instead), the heads' contexts projected and added to every token, a
    feed-forward layer."""

    def __init__(self, dim: int, heads: int, hidden: int, dropout: float, graph_head: bool = True):
        super().__init__()
        self.heads, self.dropout, self.graph_head = heads, dropout, graph_head
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pooling = MultiHeadPooling(dim, heads, dropout)
        self.head_norm = nn.LayerNorm(dim // heads, eps=1e-6)
        head = dim // heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(head, head) for _ in range(3))
        self.linear = nn.Linear(dim, dim)
        self.feed_forward = FeedForward(dim, hidden, dropout)

    def paragraph_attention(self, pooled: torch.Tensor, paragraph_mask: torch.Tensor,
                            graph: torch.Tensor | None) -> torch.Tensor:
        """pooled (B, P, H, D/H) -> each paragraph's context per head (B, P, H, D/H). Every head attends over the
        real paragraphs; with a graph (B, P, P) and the graph head on, head 0 takes sum_j G[i, j] v[j] instead."""
        q, k, v = (proj(pooled).transpose(1, 2) for proj in (self.q_proj, self.k_proj, self.v_proj))  # (B, H, P, d)
        context = attend(q, k, v, paragraph_mask[:, None, None, :], self.dropout, self.training)  # (B, H, P, d)
        if graph is not None and self.graph_head:
            weights = graph.to(v.dtype) * paragraph_mask[:, None, :]  # the graph comes as float32
            weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-9)
            context = torch.cat([torch.matmul(weights, v[:, 0])[:, None], context[:, 1:]], dim=1)
        return context.transpose(1, 2)

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor, paragraph_mask: torch.Tensor,
                graph: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, P, T, D), token_mask (B, P, T), paragraph_mask (B, P), graph (B, P, P) or None -> (B, P, T, D)."""
        b, p, t, d = x.shape
        pooled = self.pooling(self.norm(x).reshape(b * p, t, d), token_mask.reshape(b * p, t))  # (B*P, H, D/H)
        pooled = self.head_norm(pooled).view(b, p, self.heads, d // self.heads)
        context = self.paragraph_attention(pooled, paragraph_mask, graph).reshape(b, p, 1, d)
        return self.feed_forward(x + F.dropout(self.linear(context), self.dropout, self.training))


class HierarchicalEncoder(nn.Module):
    """Embeddings, `kinds` of layers in order ("local" or "global"), a final LayerNorm; padding tokens zeroed."""

    def __init__(self, embed: nn.Embedding, layers: tuple[str, ...], heads: int, hidden: int, dropout: float,
                 parts: EncoderParts = EncoderParts(), max_positions: int = 512):
        super().__init__()
        dim = embed.embedding_dim
        self.embeddings = ParagraphEmbedding(embed, dropout, parts.paragraph_position, max_positions)
        pool_heads = heads if parts.multi_head_pooling else 1
        self.layers = nn.ModuleList(
            GlobalLayer(dim, pool_heads, hidden, dropout, parts.graph_head) if kind == "global" and parts.global_layers
            else LocalLayer(dim, heads, hidden, dropout) for kind in layers)
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                graph: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids, attention_mask (B, P, T); graph (B, P, P) or None -> states (B, P, T, D), zero at padding."""
        token_mask = attention_mask.bool()
        paragraph_mask = token_mask.any(-1)
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, token_mask, paragraph_mask, graph)
        return self.norm(x) * token_mask[..., None]
