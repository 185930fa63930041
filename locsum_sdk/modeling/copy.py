"""The copy distribution (pointer-generator, See et al. 2017): the one definition every kind's decoder mixes in.

For a unit u and a query row q (a beam while decoding, a target position in training):

    a[l]  = the last decoder layer's cross-attention probabilities over the unit's L tokens, averaged over heads
    g     = sigmoid(W_h h + W_c c + W_e e + b)      h: the decoder's output state, c: the last layer's
                                                    cross-attention output, e: the query row's input token embedding
    p(w)  = g p_vocab(w) + (1 - g) sum over l with ids[l] = w of a[l]

The sum over a unit's positions is a scatter-add of attention mass onto token ids (ONNX `ScatterElements` with
`reduction="add"`): O(units x tokens) per query row beside the vocabulary-sized distribution that exists anyway,
never O(vocabulary x tokens). Kinds then mix units as they always do: `unit_mixture` for PageSum (one distribution,
units weighed by the step's page weights); for DYLE, sum_u p(u) [g_u p_u + (1 - g_u) copy_u]: its marginalization
of the snippets' log(g_u p_u), then `unit_copies` under p(u), so only the vocabulary part is ever per snippet; `joint`
for a decoder whose attention is one softmax over all units' tokens (HierEncDec, the Hierarchical Transformer).

Training needs no loss of its own: the NLL of the gold token under the mixture includes the attention mass on the
positions holding it wherever it is in the unit, so the gate and the attention learn to copy where copying pays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

#: The gate's initial bias: g starts near 0.7, mostly the vocabulary distribution, copying learnt from there.
GATE_BIAS = math.log(0.7 / 0.3)
#: The least vocabulary share whose log is taken (a gate can round to 0 in float32 only past its range).
TINY = 1e-30


@dataclass(frozen=True)
class CopySource:
    """What a step's copy distribution reads: Q query rows of B items x U units."""

    ids: torch.Tensor  # (B, U, L) int64 the units' token ids (any id where a unit's attention is 0)
    attention: torch.Tensor  # (B, U, Q, L) the last layer's cross-attention probabilities, averaged over heads
    context: torch.Tensor  # (B, U, Q, D) the last layer's cross-attention output; (B, 1, Q, D) where one decoder
    # reads every unit of an item
    embedded: torch.Tensor  # (B, Q, D) the query rows' input token embeddings


class CopyGate(nn.Module):
    """g = sigmoid(W [h; c; e] + b), one weight row over the three D-wide parts (e is shared by an item's units)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model
        self.proj = nn.Linear(3 * d_model, 1)

    def init_bias(self) -> None:
        with torch.no_grad():
            self.proj.bias.fill_(GATE_BIAS)

    def forward(self, hidden: torch.Tensor, source: CopySource) -> torch.Tensor:
        """hidden (B, U, Q, D) -> the vocabulary share g (B, U, Q)."""
        d, weight = self.d_model, self.proj.weight
        unit_part = F.linear(hidden, weight[:, :d]) + F.linear(source.context, weight[:, d : 2 * d])  # (B, U, Q, 1)
        token_part = F.linear(source.embedded, weight[:, 2 * d :], self.proj.bias)  # (B, Q, 1)
        return torch.sigmoid((unit_part + token_part[:, None]).squeeze(-1))


def log_share(share: torch.Tensor) -> torch.Tensor:
    """log of a vocabulary share (...) -> (..., 1), float32, to add to log-probabilities over the vocabulary."""
    return torch.log(share.float().clamp_min(TINY)).unsqueeze(-1)


def with_copy(generated: torch.Tensor, mass: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log(exp(generated) + copy), copy[..., w] = the sum of `mass` over the positions whose id is w.

    generated (..., V): log-probabilities of the vocabulary part, already weighed by its share; mass (..., S) the
    copy mass of S source positions; ids (..., S) int64. In float32 and in log space: a token that is not copied
    keeps `generated` exactly, however unlikely (nothing underflows to log 0), and neither the value nor its
    gradient is ever NaN."""
    generated = generated.float()
    copied = torch.zeros_like(generated).scatter_add(-1, ids, mass.float())  # (..., V)
    has_copy = copied > 0
    log_copied = torch.log(torch.where(has_copy, copied, torch.ones_like(copied)))  # 0 where nothing is copied
    top = torch.where(has_copy, torch.maximum(generated, log_copied), generated).detach()  # a shift, not maths
    total = torch.exp(generated - top) + torch.where(has_copy, torch.exp(log_copied - top), torch.zeros_like(top))
    return top + torch.log(total)


def unit_copies(generated: torch.Tensor, weights: torch.Tensor, gate: torch.Tensor,
                source: CopySource) -> torch.Tensor:
    """generated (B, Q, V) -> log(exp(generated) + sum_u w_u (1 - g_u) copy_u), weights and gate (B, U, Q): every
    unit's attention mass scattered at once, (B, Q, U*L)."""
    batch, units, queries, length = source.attention.shape
    mass = ((weights * (1 - gate)).unsqueeze(-1) * source.attention).transpose(1, 2)  # (B, Q, U, L)
    ids = source.ids.reshape(batch, 1, units * length).expand(-1, queries, -1)  # (B, Q, U*L)
    return with_copy(generated, mass.reshape(batch, queries, units * length), ids)


def unit_mixture(logits: torch.Tensor, weights: torch.Tensor, gate: torch.Tensor,
                 source: CopySource) -> torch.Tensor:
    """One distribution over the units mixed by `weights`: sum_u w_u [g_u p_vocab + (1 - g_u) copy_u] (PageSum).

    logits (B, Q, V) of the mixed state; weights, gate (B, U, Q) -> log-probabilities (B, Q, V)."""
    share = (weights * gate).sum(dim=1)  # (B, Q)
    return unit_copies(torch.log_softmax(logits.float(), dim=-1) + log_share(share), weights, gate, source)


def joint(logits: torch.Tensor, gate: torch.Tensor, source: CopySource) -> torch.Tensor:
    """One distribution from attention that is one softmax over all units' tokens (summing to 1 over U and L):
    g p_vocab + (1 - g) copy. logits (B, Q, V), gate (B, Q) -> log-probabilities (B, Q, V)."""
    generated = torch.log_softmax(logits.float(), dim=-1) + log_share(gate)
    every = torch.ones_like(source.attention[..., 0])  # (B, U, Q): the attention already sums to 1 over U and L
    return unit_copies(generated, every, gate.unsqueeze(1).expand_as(every), source)
