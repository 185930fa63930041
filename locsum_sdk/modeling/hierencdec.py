"""HierEncDec (Shen et al. 2023): BART weights, hierarchical attention. Documents are units on a (B, D, L) grid,
each starting with `<s>`.

    encoder: a token attends only inside its document; each document's <s> also attends to every other real
             document's <s>; positions restart at 0 in every document
    decoder: one decoder per item; cross-attention = softmax over documents of the <s> scores x softmax over the
             tokens of each document (`locsum.DocScaledAttention`)
    unit weights: the softmax over documents, averaged over heads and layers        (B, D, K)
    copy (the config's `copy`): one copy distribution over the item's tokens, from the last layer's attention on
             each token (its document's weight x its weight inside the document, `copy.joint`)

The encoder never builds a dense (D*L)^2 mask: documents run as their own sequences, and the <s> queries of an item
score its <s> keys apart, so its memory is O(D * L^2 + D^2) per head: the exchange between documents costs D x D
scores, not a copy of the item's <s> keys for every document. `dense_encode` is the
dense-mask form, kept to prove the two equal and for the ablation without hierarchy. Each part can be switched
off (`Parts`) to run the paper's ablation rows; with all three off it is plain BART on concatenated documents. On
a Llama backbone the config builds `hierencdec_llama.LlamaHierEncDec` instead (`build`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..configs.llama import LlamaConfig
from ..configs.model import BartConfig
from ..ops import doc_scaled_attention
from . import copy
from .bart import (
    Bart,
    CrossKV,
    Embeddings,
    SlotCache,
    attention_bias,
    causal_bias,
    init_weights,
    slot_bias,
    write_index,
)
from .copy import CopySource

KIND = "hierencdec"

logger = logging.getLogger("locsum_sdk")


@dataclass(frozen=True)
class Parts:
    """Which of HierEncDec's changes to BART are on (all by default)."""

    hierarchical_encoder: bool = True  # tokens attend inside their document, <s> to every <s>; off: across all
    restart_positions: bool = True  # positions restart at 0 in every document; off: they run on across documents
    document_scaled_attention: bool = True  # decoder: doc softmax x token softmax; off: one softmax over all tokens


class HierEncDec(nn.Module):
    kind = KIND

    def __init__(self, config: BartConfig, parts: Parts | None = None):
        super().__init__()
        self.config, self.parts = config, parts or Parts()
        self.model = Bart(config)
        self.attend_documents = doc_scaled_attention.torch_op()

    def reset_parameters(self, std: float = 0.02) -> None:
        init_weights(self, std)

    # ---- encoder ------------------------------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor, unit_mask: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token + position embeddings of the grid rows (N, L) -> (N, L, D). Positions restart in every document,
        or, with `restart_positions` off, run on from the previous documents of the item."""
        start = 0
        if not self.parts.restart_positions:
            lengths = attention_mask.sum(-1).view(-1, unit_mask.shape[1])  # (B, D)
            start = (torch.cumsum(lengths, dim=1) - lengths).reshape(-1, 1)  # (N, 1) the item's earlier tokens
        return Embeddings.forward(self.model.encoder, input_ids, start)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, unit_mask: torch.Tensor):
        """Grid rows of whole items: input_ids, attention_mask (N, L), N = B*D; unit_mask (B, D) -> encoder
        states (N, L, D) and every decoder layer's cross key/value."""
        if not self.parts.hierarchical_encoder:
            memory = self.dense_encode(input_ids, attention_mask, unit_mask)
            return memory, self.model.cross_kv(memory)
        x = self.embed(input_ids, unit_mask, attention_mask)  # (N, L, D)
        rows, length, dim = x.shape
        docs = unit_mask.shape[1]
        own = attention_bias(attention_mask, x.dtype)  # (N, 1, 1, L)
        index = torch.arange(docs, device=x.device)
        other = unit_mask[:, None, :] & (index[:, None] != index[None, :])  # (B, D, D): <s> i sees real <s> j != i
        exchange = (~other).to(x.dtype)[:, None] * torch.finfo(x.dtype).min  # (B, 1, D, D)
        h = x.reshape(-1, dim)  # (N*L, D)
        for layer in self.model.encoder.layers:
            attn = layer.self_attn
            h = layer.after_attention(h, attn.out_proj(attn.merge(self.attend_hierarchy(attn, h, length, own,
                                                                                        exchange))))
        memory = h.view(rows, length, dim)
        return memory, self.model.cross_kv(memory)

    def attend_hierarchy(self, attn, h: torch.Tensor, length: int, own: torch.Tensor,
                         exchange: torch.Tensor) -> torch.Tensor:
        """One encoder self-attention over rows h (N*L, D) of B items of D documents -> heads (N, H, L, d).

        Every token attends inside its document (`own` (N, 1, 1, L)); a document's <s> (position 0) also attends
        to the <s> of the item's other real documents (`exchange` (B, 1, D, D)), in one softmax over both. The
        <s> rows are scored apart, so the exchange adds D x D scores per head and item, never a key per document
        and row."""
        docs = exchange.shape[-1]
        q, k, v = (attn.split(proj(h), length) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))  # (N, H, L, d)
        if attn.scaling != 1.0:
            q = q * attn.scaling
        rows, heads, _, head_dim = q.shape
        scores = torch.matmul(q, k.transpose(2, 3)) + own  # (N, H, L, L)

        def by_item(t: torch.Tensor) -> torch.Tensor:  # (N, H, X) -> (B, H, D, X)
            return t.reshape(-1, docs, heads, t.shape[-1]).transpose(1, 2)

        sos_q, sos_k, sos_v = by_item(q[:, :, 0]), by_item(k[:, :, 0]), by_item(v[:, :, 0])  # (B, H, D, d)
        between = torch.matmul(sos_q, sos_k.transpose(2, 3)) + exchange  # (B, H, D, D)
        first = torch.softmax(torch.cat([by_item(scores[:, :, 0]), between], dim=-1), dim=-1)  # (B, H, D, L + D)
        first = F.dropout(first, attn.dropout, self.training)
        inside = first[..., :length].transpose(1, 2).reshape(rows, heads, 1, length)  # (N, H, 1, L)
        across = torch.matmul(first[..., length:], sos_v).transpose(1, 2).reshape(rows, heads, 1, head_dim)
        rest = F.dropout(torch.softmax(scores[:, :, 1:], dim=-1), attn.dropout, self.training)  # (N, H, L-1, L)
        return torch.cat([torch.matmul(inside, v) + across, torch.matmul(rest, v)], dim=2)  # (N, H, L, d)

    def dense_encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     unit_mask: torch.Tensor) -> torch.Tensor:
        """The same encoder with each item's documents concatenated into one sequence under a dense mask: a
        token sees its own document and, if it is a <s>, every real <s> (or, with `hierarchical_encoder` off,
        every real token of the item). (N, L) rows -> (N, L, D)."""
        x = self.embed(input_ids, unit_mask, attention_mask)  # (N, L, D)
        rows, length, dim = x.shape
        docs = unit_mask.shape[1]
        items = rows // docs
        real = attention_mask.bool().view(items, 1, docs * length)  # (B, 1, D*L) keys that are real tokens
        if self.parts.hierarchical_encoder:
            doc = torch.arange(docs, device=x.device).repeat_interleave(length)  # (D*L,)
            is_sos = (torch.arange(docs * length, device=x.device) % length) == 0
            pairs = (doc[:, None] == doc[None, :]) | (is_sos[:, None] & is_sos[None, :])  # (D*L, D*L)
            allowed = pairs[None] & real  # (B, D*L, D*L)
        else:
            allowed = real.expand(-1, docs * length, -1)
        bias = (~allowed).to(x.dtype)[:, None] * torch.finfo(x.dtype).min  # (B, 1, D*L, D*L)
        h = x.reshape(-1, dim)
        for layer in self.model.encoder.layers:
            h = layer(h, docs * length, bias)
        return h.view(rows, length, dim)

    # ---- decoder ------------------------------------------------------------------------------------------------
    def cross(self, layer, h: torch.Tensor, cross, key_mask, unit_mask, queries: int, keep: bool = False):
        """Cross-attention block of one decoder layer: h (B*Q, D) -> (B*Q, D), and the document weights
        (B, D, H, Q). key_mask (B, D, L) bool, unit_mask (B, D) bool. With `keep`, also what a copy distribution
        reads: the attention output (B*Q, D) and each token's attention averaged over heads (B, D, Q, L)."""
        attn = layer.encoder_attn
        k_t, v = cross  # (N, H, d, L), (N, H, L, d)
        batch, docs, length = key_mask.shape
        q = attn.split(attn.q_proj(h), queries)  # (B, H, Q, d)
        if attn.scaling != 1.0:
            q = q * attn.scaling
        key = k_t.view(batch, docs, *k_t.shape[1:])  # (B, D, H, d, L)
        value = v.view(batch, docs, *v.shape[1:])  # (B, D, H, L, d)
        if self.parts.document_scaled_attention:
            out, weights = self.attend_documents(q, key, value, key_mask, unit_mask)
            tokens = doc_scaled_attention.token_attention(q, key, key_mask, weights) if keep else None
        else:  # one softmax over every real token of the item
            scores = torch.matmul(q.unsqueeze(1), key)  # (B, D, H, Q, L)
            scores = scores.masked_fill(~key_mask[:, :, None, None, :], torch.finfo(scores.dtype).min)
            probs = torch.softmax(scores.permute(0, 2, 3, 1, 4).reshape(batch, attn.heads, queries, -1), dim=-1)
            probs = probs.view(batch, attn.heads, queries, docs, length).permute(0, 3, 1, 2, 4)  # (B, D, H, Q, L)
            out = torch.matmul(probs, value).sum(dim=1)  # (B, H, Q, d)
            weights = probs.sum(-1)  # (B, D, H, Q): each document's share of the attention
            tokens = probs.mean(dim=2) if keep else None
        context = attn.out_proj(attn.merge(out))
        x = layer.after_memory(h, context)
        return (x, weights, context, tokens) if keep else (x, weights)

    def decode(self, x: torch.Tensor, queries: int, cross: CrossKV, key_mask, unit_mask, attend_self):
        """Every decoder layer on rows x (B*Q, D) -> hidden (B*Q, D), document weights (B, D, Q) averaged over
        heads and layers, and with copy, the last layer's attention output and token attention (see `cross`)."""
        total, last, read = 0.0, len(self.model.decoder.layers) - 1, ()
        for i, layer in enumerate(self.model.decoder.layers):
            keep = self.config.copy and i == last
            x, weights, *read = self.cross(layer, attend_self(i, layer, x), cross[i], key_mask, unit_mask, queries,
                                           keep)
            total = total + weights.mean(dim=2)  # (B, D, Q)
        return x, total / len(self.model.decoder.layers), read

    def log_probs(self, hidden: torch.Tensor, tokens: torch.Tensor, read, unit_ids) -> torch.Tensor:
        """hidden (B, Q, D), the query rows' input tokens (B, Q) -> log-probabilities (B, Q, V); with copy, one
        distribution with the copy distribution over the item's tokens, unit_ids (B*D, L)."""
        logits = self.model.lm_logits(hidden)
        if not self.config.copy:
            return torch.log_softmax(logits, dim=-1)
        context, attention = read
        batch, queries = tokens.shape
        source = CopySource(ids=unit_ids.reshape(batch, attention.shape[1], -1), attention=attention,
                            context=context.reshape(batch, 1, queries, -1),
                            embedded=self.model.token_embedding(tokens))
        gate = self.model.copy_gate(hidden.unsqueeze(1), source)[:, 0]  # (B, Q)
        return copy.joint(logits, gate, source)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, unit_mask: torch.Tensor,
                decoder_input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing. input_ids, attention_mask (B, D, L), unit_mask (B, D), decoder_input_ids (B, T) ->
        log-probabilities (B, T, V) and document weights (B, D, T)."""
        batch, docs, length = input_ids.shape
        _, cross = self.encode(input_ids.view(-1, length), attention_mask.view(-1, length), unit_mask)
        steps = decoder_input_ids.shape[1]
        x = Embeddings.forward(self.model.decoder, decoder_input_ids).reshape(-1, self.config.d_model)  # (B*T, D)
        causal = causal_bias(steps, x.dtype, x.device)

        def attend_self(i, layer, h):
            return layer.attend_self(h, steps, causal)

        hidden, weights, read = self.decode(x, steps, cross, attention_mask.bool(), unit_mask, attend_self)
        return self.log_probs(hidden.view(batch, steps, -1), decoder_input_ids, read, input_ids), weights

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
        """One decoding step for K beams of B items of D documents: input_ids (B, K) at `position` (1,);
        encoder_attention_mask (B*D, L); cache per layer (B, H, K, C, d), written in place at `position`;
        cache_slots (B, K, C); encoder_input_ids (B*D, L) the documents' tokens, read by a model that copies.
        Returns log-probabilities (B, K, V) and document weights (B, D, K)."""
        batch, beams = input_ids.shape
        docs = unit_mask.shape[1]
        x = Embeddings.forward(self.model.decoder, input_ids.reshape(-1, 1), position).reshape(-1, self.config.d_model)
        bias = slot_bias(cache_slots, x.dtype)  # (B, 1, K, K*C)
        at = write_index(cache[0][0], position)

        def attend_self(i, layer, h):
            return layer.attend_self(h, beams, bias, cache[i], at)

        key_mask = encoder_attention_mask.bool().view(batch, docs, -1)  # (B, D, L)
        hidden, weights, read = self.decode(x, beams, cross, key_mask, unit_mask, attend_self)
        return self.log_probs(hidden.view(batch, beams, -1), input_ids, read, encoder_input_ids), weights


def complete(config: BartConfig | LlamaConfig, state: dict[str, torch.Tensor],
             source: str) -> dict[str, torch.Tensor]:
    """HierEncDec adds no weights to its backbone: a PageSum's page confidence layer is left out."""
    extra = sorted(name for name in state if name.startswith("page_conf."))
    if extra:
        logger.info("%s: %s not used by hierencdec", source, extra)
    return {name: tensor for name, tensor in state.items() if name not in extra}


def build(config: BartConfig | LlamaConfig) -> nn.Module:
    """HierEncDec on the backbone `config` describes: BART, or a pretrained Llama (`hierencdec_llama`)."""
    if isinstance(config, LlamaConfig):
        from .hierencdec_llama import LlamaHierEncDec

        return LlamaHierEncDec(config)
    return HierEncDec(config)


def register_model_kind() -> None:
    from . import graphs
    from .registry import ModelKind, register

    register(ModelKind(
        name=KIND, model=build, complete=complete,
        graphs=lambda model: {"encoder": graphs.encoder_spec(model), "decoder": graphs.decoder_spec(model)},
        functions={"decoder": doc_scaled_attention.NAME}, register_symbolics=graphs.register_doc_scaled_attention,
        formats=("hf-bart", "pagesum-research", "llm"), llama_functions={},
    ))
