"""HierEncDec on a Llama backbone: each document is read as its own prefix (its encoding is every layer's keys and
values over its prompt, as for PageSum and DYLE on the backbone), and one summary per item reads all of them at
every layer through document-scaled attention.

At a layer, a summary position p's query q is rotated for each document u at that document's L_u + p (so it sits
right after every document, as the summary does after its one unit in the per-unit kinds) and at p for the
summary's own keys, which are rotated at their own positions (only differences of positions count). It scores

    a[u, l] = q_u . k[u, l]     the real tokens of each document
    b[s]    = q . k_self[s]     the summary's positions so far (its own included)

and reads, per head,

    m[u] = logsumexp_l a[u, l]            m_self = logsumexp_s b[s]
    t[u] = logsumexp of a[u, l] over the document's text (l past the prompt's head)
    w    = softmax over real documents of t          the document weights            (B, D, ...)
    r[u] = sigmoid(m[u] - m_self)                    document u's share beside the summary
    out  = sum_u w[u] r[u] softmax_l(a[u]) v[u] + (1 - sum_u w[u] r[u]) softmax_s(b) v_self

`r[u] softmax(a[u]) v[u] + (1 - r[u]) softmax(b) v_self` is the pretrained layer's own attention over document u
followed by the summary; the output mixes those readings by the documents' weights. The weights leave out the
prompt's head (`LlamaConfig.unit_head`): the same tokens at the same positions in every document, so the same keys,
which tell the documents apart in nothing and draw much of a pretrained model's attention (its first positions
are where its attention rests). So one document (or copies of one) gives exactly the pretrained model reading its
prompt, and the documents together take the share of each step's attention that one document would, whatever
their number (one flat softmax over twenty documents would give them twenty times the summary's share). The
exchange between documents inside HierEncDec's encoder has no place among independent prefixes and is left out
(one of its paper's ablations, `hierencdec.Parts`).

    unit weights: w, averaged over heads and layers                                  (B, D, K)
"""

from __future__ import annotations

import torch
from torch import nn

from ..configs.llama import LlamaConfig
from .bart import attention_bias, init_weights, slot_bias, write_index
from .llama import Attention, Llama, SlotCache, UnitKV, causal_bias, rotate, stacked

Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # key_t (.., d, S), value (.., S, d), additive bias


def read_documents(q_docs: torch.Tensor, documents: Part, text_bias: torch.Tensor, doc_mask: torch.Tensor,
                   q_self: torch.Tensor, summary: Part, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Document-scaled attention (the module docstring's maths) for one layer.

    q_docs (B, U, KV, Q, d): the queries rotated for each document (Q = heads sharing a key/value head x positions,
    stacked); documents: key_t (B, U, KV, d, L), value (B, U, KV, L, d), bias (B, U, 1, 1, L); text_bias
    (B, U, 1, 1, L) further hides the prompt's head from the weights; doc_mask (B, U) True for real documents; q_self
    (B, KV, Q, d); summary: key_t (B, KV, d, S), value (B, KV, S, d), bias broadcasting to (B, KV, Q, S). Returns
    the output (B, KV, Q, d) and the document weights (B, U, KV, Q), both computed in float32 and the output cast
    back to the queries' dtype."""
    scores = _scores(q_docs, documents, scaling)  # (B, U, KV, Q, L)
    mass, context = _read(scores, documents[1])  # (B, U, KV, Q, 1): m[u]; (B, U, KV, Q, d)
    text, _ = _log_mass(scores + text_bias.float())  # t[u]
    own_mass, own_context = _read(_scores(q_self, summary, scaling), summary[1])  # (B, KV, Q, 1), (B, KV, Q, d)
    real = doc_mask[:, :, None, None, None]
    weights = torch.softmax(text.masked_fill(~real, torch.finfo(text.dtype).min), dim=1) * real
    shares = weights * torch.sigmoid(mass - own_mass[:, None])  # (B, U, KV, Q, 1): w[u] r[u]
    out = (shares * context).sum(1) + (1 - shares.sum(1)) * own_context
    return out.to(q_docs.dtype), weights[..., 0]


def _scores(q: torch.Tensor, part: Part, scaling: float) -> torch.Tensor:
    """q (..., Q, d) against one part's keys, its bias added: (..., Q, S) in float32."""
    return torch.matmul(q, part[0]).float() * scaling + part[2].float()


def _log_mass(scores: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """scores (..., S) -> their log-sum-exp (..., 1), and exp(scores - max) with its sum (the log-sum-exp spelled
    out: TensorRT's parser has no ReduceLogSumExp)."""
    top = scores.amax(-1, keepdim=True)
    exp = torch.exp(scores - top)
    total = exp.sum(-1, keepdim=True)
    return top + torch.log(total), (exp, total)


def _read(scores: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """scores (..., Q, S) over a part whose values are (..., S, d) -> the log of the part's attention mass
    (..., Q, 1) and its softmax's reading (..., Q, d), in float32."""
    mass, (exp, total) = _log_mass(scores)
    return mass, torch.matmul((exp / total).to(value.dtype), value).float()


class LlamaHierEncDec(nn.Module):
    """HierEncDec's documents and document-scaled attention on a pretrained decoder-only Llama (`model`)."""

    kind = "hierencdec"  # hierencdec.KIND (that module builds this one: importing it here would be a circle)

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.model = Llama(config)

    def reset_parameters(self, std: float = 0.02) -> None:
        init_weights(self, std)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, UnitKV]:
        """Documents (N, L), each alone -> their states (N, L, D) and every layer's key_t/value over them."""
        return self.model.encode_units(input_ids, attention_mask)

    def codes(self, lengths: torch.Tensor, steps: torch.Tensor, dtype: torch.dtype):
        """The rotary codes of T summary positions `steps` (T,): for each document of lengths (B, U), cos and sin
        (B, U, 1, T, d) at L_u + step; for the summary's own attention, (1, 1, T, d) at step."""
        batch, units = lengths.shape
        cos, sin = self.model.codes((lengths.reshape(-1, 1) + steps[None, :]), dtype)  # (N, 1, T, d)
        own = self.model.codes(steps[None, :], dtype)
        return (cos.view(batch, units, *cos.shape[1:]), sin.view(batch, units, *sin.shape[1:])), own

    def text_bias(self, length: int | torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """(L,) additive bias hiding the prompt's head (the same `unit_head` tokens at the start of every document)
        from the document weights."""
        head = torch.arange(length, device=device) < len(self.config.unit_head)
        return head.to(dtype) * torch.finfo(dtype).min

    def layers(self, x: torch.Tensor, length: int | torch.Tensor, cross: UnitKV, unit_bias: torch.Tensor,
               unit_mask: torch.Tensor, codes, own_keys) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer on the summary rows x (B*T, D), T = `length` queries per item -> hidden (B*T, D) after the
        final norm and the document weights (B, U, T) averaged over heads and layers. `own_keys(i, k, v)` gives
        layer i's summary part (key_t, value, bias) from its new rotated keys and values (B, KV, T, d)."""
        (doc_cos, doc_sin), (cos, sin) = codes
        batch, units = unit_mask.shape
        text_bias = self.text_bias(unit_bias.shape[-1], unit_bias.dtype, unit_bias.device)
        total, h = 0.0, x
        for i, layer in enumerate(self.model.layers):
            attn: Attention = layer.self_attn
            normed = layer.input_layernorm(h)
            q = attn.split(attn.q_proj(normed), attn.heads, length)  # (B, H, T, d)
            k = rotate(attn.split(attn.k_proj(normed), attn.kv_heads, length), cos, sin)
            v = attn.split(attn.v_proj(normed), attn.kv_heads, length)
            steps = q.shape[2]
            grouped = (attn.kv_heads, attn.group * steps, attn.head_dim)
            q_docs = rotate(q[:, None], doc_cos, doc_sin).reshape(batch, units, *grouped)
            q_self = rotate(q, cos, sin).reshape(batch, *grouped)
            key_t, value = cross[i]
            documents = (key_t.view(batch, units, *key_t.shape[1:]), value.view(batch, units, *value.shape[1:]),
                         unit_bias)
            out, weights = read_documents(q_docs, documents, text_bias, unit_mask, q_self, own_keys(i, k, v),
                                          attn.scaling)
            h = layer.finish(h, attn.merge(out, length))
            total = total + weights.view(batch, units, attn.kv_heads * attn.group, steps).mean(2)
        return self.model.norm(h), total / len(self.model.layers)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, unit_mask: torch.Tensor,
                decoder_input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing. input_ids, attention_mask (B, D, L), unit_mask (B, D), decoder_input_ids (B, T) ->
        log-probabilities (B, T, V) and document weights (B, D, T)."""
        batch, units, length = input_ids.shape
        flat_mask = attention_mask.reshape(-1, length)
        _, cross = self.encode(input_ids.reshape(-1, length), flat_mask)
        steps = decoder_input_ids.shape[1]
        x = self.model.embed_tokens(decoder_input_ids).reshape(-1, self.config.d_model)  # (B*T, D)
        codes = self.codes(flat_mask.sum(-1).view(batch, units), torch.arange(steps, device=x.device), x.dtype)
        unit_bias = attention_bias(flat_mask, x.dtype).view(batch, units, 1, 1, length)
        causal = stacked(causal_bias(steps, x.dtype, x.device), self.config.group)

        def own_keys(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
            return k.transpose(2, 3), v, causal

        hidden, weights = self.layers(x, steps, cross, unit_bias, unit_mask, codes, own_keys)
        return torch.log_softmax(self.model.lm_logits(hidden.view(batch, steps, -1)), dim=-1), weights

    def step(
        self,
        input_ids: torch.Tensor,
        unit_mask: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        position: torch.Tensor,
        cache_slots: torch.Tensor,
        cache: SlotCache,
        cross: UnitKV,
        encoder_input_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoding step for K beams of B items of D documents: input_ids (B, K) at summary `position` (1,);
        encoder_attention_mask (B*D, L); cache per layer (B, KV, K, C, d) (one summary per item), written in place
        at `position`; cache_slots (B, K, C) (see `bart.slot_bias`). Returns log-probabilities (B, K, V) and
        document weights (B, D, K)."""
        batch, beams = input_ids.shape
        units, length = unit_mask.shape[1], encoder_attention_mask.shape[1]
        x = self.model.embed_tokens(input_ids.reshape(-1))  # (B*K, D)
        codes = self.codes(encoder_attention_mask.sum(-1).view(batch, units), position, x.dtype)
        unit_bias = attention_bias(encoder_attention_mask, x.dtype).view(batch, units, 1, 1, length)
        own_bias = stacked(slot_bias(cache_slots, x.dtype), self.config.group)  # (B, 1, G*K, K*C)
        at = write_index(cache[0][0], position)
        flat = (batch, self.config.kv_heads, -1, self.config.head_dim)  # (B, KV, K*C, d)

        def own_keys(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
            keys, values = cache[i]
            keys.index_put_(at, k)
            values.index_put_(at, v)
            return keys.view(flat).transpose(2, 3), values.view(flat), own_bias

        hidden, weights = self.layers(x, beams, cross, unit_bias, unit_mask, codes, own_keys)
        return torch.log_softmax(self.model.lm_logits(hidden.view(batch, beams, -1)), dim=-1), weights
