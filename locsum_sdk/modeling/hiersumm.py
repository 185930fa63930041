"""The Hierarchical Transformer (Liu & Lapata 2019): the hierarchical encoder over ranked paragraphs
(`hiersumm_encoder`) and one pre-LayerNorm transformer decoder over the flattened memory of all paragraphs.

The paragraphs of an item lie on grid rows as the runtime lays units out (B items x U paragraphs, N = B*U rows of
L tokens); every decoder layer's cross keys/values are stored per row, and a step's cross-attention is one softmax
over all the item's real tokens, `(B, U, H, Q, L)` jointly over U and L. A unit's weight is the attention mass on
its tokens, averaged over heads and layers: where in the input each step read. With the config's `copy`, the last
layer's attention on each token, averaged over heads, is also a copy distribution (`copy.joint`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..configs.hiersumm import KIND, HierSummConfig, from_bart_shape
from ..errors import BundleError
from . import copy
from .bart import Attention, CrossKV, SlotCache, attention_bias, causal_bias, init_weights, slot_bias, write_index
from .copy import CopyGate, CopySource
from .hiersumm_encoder import EncoderParts, FeedForward, HierarchicalEncoder, sinusoid
from .objectives import label_smoothed_nll, unit_grid
from .paragraph_ranker import ParagraphRanker, RankerConfig, ranker_loss

logger = logging.getLogger("locsum_sdk")


def item_cross_attention(attention: Attention, x: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor],
                         bias: torch.Tensor, units: int, queries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B*Q, D): Q query rows of each of B items attend to all real tokens of the item's U rows.

    kv: key (B*U, H, d, L), value (B*U, H, L, d); bias (B*U, 1, 1, L). Returns the output (B*Q, D) and the
    attention probabilities (B, U, H, Q, L), one softmax over U and L. Shapes come from `bias`, which every layer
    shares, so the exported graph computes them once per step."""
    k_t, v = kv
    heads, dim, length = attention.heads, attention.head_dim, bias.shape[-1]
    batch = bias.shape[0] // units
    q = attention.split(attention.q_proj(x), queries)  # (B, H, Q, d)
    if attention.scaling != 1.0:
        q = q * attention.scaling
    scores = torch.matmul(q[:, None], k_t.view(batch, units, heads, dim, length))  # (B, U, H, Q, L)
    scores = scores + bias.view(batch, units, 1, 1, length)
    flat = scores.permute(0, 2, 3, 1, 4).reshape(batch, heads, queries, units * length)
    probs = torch.softmax(flat, dim=-1).view(batch, heads, queries, units, length).permute(0, 3, 1, 2, 4)
    probs = F.dropout(probs, attention.dropout, attention.training)  # (B, U, H, Q, L)
    out = torch.matmul(probs, v.view(batch, units, heads, length, dim)).sum(1)  # (B, H, Q, d)
    return attention.out_proj(attention.merge(out)), probs


class DecoderLayer(nn.Module):
    """Pre-LayerNorm: x + SelfAttention(LN(x)), + CrossAttention(LN(.)), then x + FFN(LN(x))."""

    def __init__(self, config: HierSummConfig):
        super().__init__()
        d = config.d_model
        self.self_norm = nn.LayerNorm(d, eps=1e-6)
        self.self_attn = Attention(d, config.decoder_heads, config.dropout)
        self.cross_norm = nn.LayerNorm(d, eps=1e-6)
        self.cross_attn = Attention(d, config.decoder_heads, config.dropout)
        self.feed_forward = FeedForward(d, config.decoder_ffn_dim, config.dropout)
        self.dropout = config.dropout

    def forward(self, x, attend_self, cross, cross_bias, units: int, queries: int):
        """x (B*Q, D) -> (B*Q, D), this layer's attention probabilities (B, U, H, Q, L) and its cross-attention
        output (B*Q, D)."""
        x = x + F.dropout(attend_self(self.self_norm(x)), self.dropout, self.training)
        h, probs = item_cross_attention(self.cross_attn, self.cross_norm(x), cross, cross_bias, units, queries)
        return self.feed_forward(x + F.dropout(h, self.dropout, self.training)), probs, h


class HierSumm(nn.Module):
    kind = KIND

    def __init__(self, config: HierSummConfig, parts: EncoderParts = EncoderParts()):
        """config: a HierSummConfig, or a BART config (`from_bart_shape`: to start from its token embeddings)."""
        super().__init__()
        config = config if isinstance(config, HierSummConfig) else from_bart_shape(config)
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        if not config.share_embeddings:
            self.decoder_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = HierarchicalEncoder(self.embed_tokens, config.encoder_layers, config.encoder_heads,
                                           config.encoder_ffn_dim, config.dropout, parts, config.max_positions)
        self.ranker = ParagraphRanker(RankerConfig(config.vocab_size, config.d_model, config.ranker_hidden,
                                                   config.pad_token_id, config.ranker_tfidf))
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=1e-6)
        if not config.tie_generator:
            self.generator_weight = nn.Parameter(torch.zeros(config.vocab_size, config.d_model))
        self.generator_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.register_buffer("positions", sinusoid(config.max_positions, config.d_model), persistent=False)
        if config.copy:
            self.copy_gate = CopyGate(config.d_model)

    @property
    def decoder_embed(self) -> nn.Embedding:
        """The decoder's token table: the encoder's when they are shared."""
        return self.embed_tokens if self.config.share_embeddings else self.decoder_tokens

    def reset_parameters(self, std: float = 0.02) -> None:
        init_weights(self, std)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, unit_mask: torch.Tensor,
               graph: torch.Tensor) -> tuple[torch.Tensor, CrossKV]:
        """Grid rows of whole items: input_ids, attention_mask (B*U, L; zero rows for padding paragraphs),
        unit_mask (B, U), graph (B, U, U) -> memory (B*U, L, D) (zeros at padding) and every decoder layer's cross
        key/value per row."""
        batch, units = unit_mask.shape
        length = input_ids.shape[1]
        memory = self.encoder(input_ids.view(batch, units, length), attention_mask.view(batch, units, length), graph)
        memory = memory.reshape(batch * units, length, -1)
        return memory, [layer.cross_attn.cross_kv(memory) for layer in self.layers]

    def embed_targets(self, input_ids: torch.Tensor, start: int | torch.Tensor) -> torch.Tensor:
        """input_ids (R, T) from position `start` -> (R, T, D): token * sqrt(d) + the sinusoid of the position."""
        length = input_ids.shape[1]
        positions = self.positions[start : start + length] if isinstance(start, int) else \
            self.positions.index_select(0, torch.arange(length, device=input_ids.device) + start)
        x = self.decoder_embed(input_ids) * math.sqrt(self.config.d_model) + positions
        return F.dropout(x, self.config.dropout, self.training)

    def generate_log_probs(self, hidden: torch.Tensor, tokens: torch.Tensor, last: tuple, unit_ids) -> torch.Tensor:
        """Decoder states (B, Q, D) -> log-probabilities (B, Q, V): final LayerNorm, the generator; with copy, mixed
        with the copy distribution read from the last layer (`last`: its probabilities and output, see
        `DecoderLayer`) over the units' tokens unit_ids (B*U, L); tokens (B, Q) the query rows' input tokens."""
        normed = self.final_norm(hidden)
        weight = self.decoder_embed.weight if self.config.tie_generator else self.generator_weight
        logits = F.linear(normed.reshape(-1, hidden.shape[-1]), weight, self.generator_bias)
        logits = logits.view(*hidden.shape[:-1], -1)
        if not self.config.copy:
            return torch.log_softmax(logits.float(), dim=-1)
        probs, context = last
        batch, units, _, queries, length = probs.shape
        source = CopySource(ids=unit_ids.reshape(batch, units, length), attention=probs.mean(dim=2),
                            context=context.reshape(batch, 1, queries, -1),
                            embedded=self.decoder_embed(tokens) * math.sqrt(self.config.d_model))
        return copy.joint(logits, self.copy_gate(normed.unsqueeze(1), source)[:, 0], source)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, unit_mask: torch.Tensor,
                decoder_input_ids: torch.Tensor, graph: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing. input_ids, attention_mask (B, U, L), unit_mask (B, U), decoder_input_ids (B, T),
        graph (B, U, U) or None -> log-probabilities (B, T, V) and unit weights (B, U, T)."""
        batch, units, length = input_ids.shape
        graph = graph if graph is not None else torch.zeros(batch, units, units, device=input_ids.device)
        _, cross = self.encode(input_ids.reshape(-1, length), attention_mask.reshape(-1, length), unit_mask, graph)
        steps = decoder_input_ids.shape[1]
        bias = attention_bias(attention_mask.reshape(-1, length), cross[0][1].dtype)
        causal = causal_bias(steps, cross[0][1].dtype, decoder_input_ids.device)
        x = self.embed_targets(decoder_input_ids, 0).reshape(batch * steps, -1)
        masses = []
        for i, layer in enumerate(self.layers):
            x, probs, context = layer(x, lambda h, layer=layer: layer.self_attn.self_attention(h, steps, causal),
                                      cross[i], bias, units, steps)
            masses.append(probs.sum(-1))  # (B, U, H, T)
        weights = torch.stack(masses).mean(dim=(0, 3))  # (B, U, T): mean over layers and heads
        return self.generate_log_probs(x.view(batch, steps, -1), decoder_input_ids, (probs, context),
                                       input_ids.reshape(-1, length)), weights

    def step(self, input_ids: torch.Tensor, unit_mask: torch.Tensor, encoder_attention_mask: torch.Tensor,
             position: torch.Tensor, cache_slots: torch.Tensor, cache: SlotCache, cross: CrossKV,
             encoder_input_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoding step of K beams of B items (one decoder per item, a cache row per item in every layer):
        log-probabilities (B, K, V) and unit weights (B, U, K); encoder_input_ids (B*U, L), the paragraphs' tokens,
        read by a model that copies."""
        batch, beams = input_ids.shape
        units = unit_mask.shape[1]
        x = self.embed_targets(input_ids.reshape(-1, 1), position).reshape(batch * beams, -1)  # (B*K, D)
        bias = attention_bias(encoder_attention_mask, cross[0][1].dtype)  # padding paragraphs: rows of zeros
        self_bias = slot_bias(cache_slots, x.dtype)
        at = write_index(cache[0][0], position)
        masses = []
        for i, layer in enumerate(self.layers):
            x, probs, context = layer(
                x, lambda h, i=i, layer=layer: layer.self_attn.slot_attention(h, cache[i], at, self_bias), cross[i],
                bias, units, beams)
            masses.append(probs.sum(-1))  # (B, U, H, K)
        weights = torch.stack(masses).mean(dim=(0, 3))  # (B, U, K)
        return self.generate_log_probs(x.view(batch, beams, -1), input_ids, (probs, context), encoder_input_ids), \
            weights


def ranker_tensors(model: HierSumm, paragraphs: list[list[int]], title: list[int]) -> dict[str, torch.Tensor]:
    """The ranker's inputs as the runtime builds them (`kinds.hiersumm.ranker_arrays`, and for a ranker that reads
    it the `kinds.TFIDF` feature) from all of an input's paragraphs' unit ids (<s> text </s>) and the title's ids, as
    tensors by name."""
    from ..kinds import TFIDF
    from ..kinds.hiersumm import ranker_arrays
    from ..limits import tfidf_feature

    texts = [ids[1:-1] for ids in paragraphs]
    arrays = ranker_arrays(texts, title)
    if model.config.ranker_tfidf:
        arrays[TFIDF] = tfidf_feature(texts, title)
    device = next(model.parameters()).device
    return {name: torch.from_numpy(value).to(device) for name, value in arrays.items()}


@torch.no_grad()
def rank_paragraphs(model: HierSumm, paragraphs: list[list[int]], title: list[int], top: int) -> list[int]:
    """Indices of the ranker's `top` best paragraphs, best first (ties to the earlier)."""
    scores = model.ranker(**ranker_tensors(model, paragraphs, title)).float()
    return torch.argsort(-scores, stable=True)[:top].tolist()


def objective(model: HierSumm, batch: Any, config: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The Hierarchical Transformer's training loss on a batch (`train.kinds.hiersumm.HierBatch`), by
    `objective_options.stage`: "ranker" (`ranker_loss` against each paragraph's ROUGE-2 recall, its listwise term
    weighted by `objective_options.ranker_listwise`, default 1; 0 leaves the paper's regression alone),
    "summarizer" (label-smoothed NLL of the summary from the L' paragraphs the current ranker ranks best, best
    first, with their tf-idf graph; a batch that is not `ranked`, denoising, gives its first L' in input order) or
    "both" (their sum). Returns (loss, summary NLL, terms)."""
    from ..paragraphs import tfidf_graph

    stage = config.objective_options.get("stage", "both")
    if not batch.ranked and stage != "summarizer":
        raise ValueError(f"objective_options.stage={stage!r}: paragraphs in input order (denoising) have no ranker "
                         "targets; use 'summarizer'")
    device = batch.decoder_input_ids.device
    terms: dict[str, torch.Tensor] = {}
    if stage in ("ranker", "both"):
        listwise = float(config.objective_options.get("ranker_listwise", 1.0))
        errors = [ranker_loss(model.ranker.logits(**ranker_tensors(model, p, t)).float(),
                              torch.tensor(r, dtype=torch.float32, device=device), listwise)
                  for p, t, r in zip(batch.paragraphs, batch.titles, batch.recall)]
        terms["ranker"] = torch.stack(errors).mean()
    nll = torch.zeros((), device=device)
    if stage in ("summarizer", "both"):
        chosen = ([[p[i] for i in rank_paragraphs(model, p, t, batch.top_paragraphs)]
                   for p, t in zip(batch.paragraphs, batch.titles)] if batch.ranked
                  else [p[: batch.top_paragraphs] for p in batch.paragraphs])
        input_ids, attention_mask, unit_mask = unit_grid(chosen, model.config.pad_token_id, device)
        graph = torch.zeros(len(chosen), unit_mask.shape[1], unit_mask.shape[1])
        for b, paragraphs in enumerate(chosen):
            size = len(paragraphs)
            graph[b, :size, :size] = torch.from_numpy(tfidf_graph([ids[1:-1] for ids in paragraphs]))
        graph = graph.to(device)
        log_probs, _ = model(input_ids, attention_mask, unit_mask, batch.decoder_input_ids, graph)
        terms["summarizer"], nll = label_smoothed_nll(log_probs.float(), batch.labels, config.label_smoothing)
    if not terms:
        raise ValueError(f"objective_options.stage={stage!r}: use 'ranker', 'summarizer' or 'both'")
    loss = sum(terms.values())
    return loss, nll, {name: value.detach() for name, value in terms.items()}


def complete(config: Any, state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """A BART (or PageSum) checkpoint gives a Hierarchical Transformer only its token embeddings (the encoder and
    decoder are other architectures: pre-LayerNorm, sinusoidal positions); the rest starts from a seeded
    initialisation."""
    if "layers.0.self_norm.weight" in state:
        if any(name.startswith("ranker.") for name in state):
            return state
        logger.warning("%s has no paragraph ranker (the research code never shipped one): it starts untrained",
                       source)
        torch.manual_seed(0)
        fresh = HierSumm(config if isinstance(config, HierSummConfig) else from_bart_shape(config))
        fresh.reset_parameters(0.02)
        return {**state, **{k: v for k, v in fresh.state_dict().items() if k.startswith("ranker.")}}
    if "model.shared.weight" not in state:
        raise BundleError(f"{source} has neither Hierarchical Transformer weights nor BART token embeddings")
    logger.warning("%s: only the token embeddings carry over to the Hierarchical Transformer; the rest starts "
                   "untrained", source)
    torch.manual_seed(0)
    fresh = HierSumm(config if isinstance(config, HierSummConfig) else from_bart_shape(config))
    fresh.reset_parameters(0.02)
    out = dict(fresh.state_dict())
    for name in ("embed_tokens.weight", "ranker.embed.weight"):
        out[name] = state["model.shared.weight"].clone()
    return out


class RankerGraph(nn.Module):
    def __init__(self, model: HierSumm):
        super().__init__()
        self.ranker = model.ranker

    def forward(self, title_ids, title_mask, paragraph_ids, paragraph_mask, tfidf=None):
        return (self.ranker(title_ids, title_mask, paragraph_ids, paragraph_mask, tfidf),)


def ranker_spec(model: HierSumm, paragraphs: int = 3, title: int = 4, length: int = 9):
    from . import graphs

    g = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    title_ids = torch.randint(3, vocab, (paragraphs, title), generator=g)
    title_mask = torch.ones_like(title_ids)
    paragraph_ids = torch.randint(3, vocab, (paragraphs, length), generator=g)
    paragraph_mask = torch.ones_like(paragraph_ids)
    paragraph_mask[1, length - 3 :] = 0
    inputs = (title_ids, title_mask, paragraph_ids, paragraph_mask)
    if model.config.ranker_tfidf:
        inputs += (torch.randn(paragraphs, generator=g),)
    io = graphs.declared(model)["ranker"]
    return graphs.GraphSpec(RankerGraph(model), inputs, io.input_names, io.output_names, io.axes)


def encoder_spec(model: HierSumm, items: int = 2, units: int = 3, length: int = 10):
    """encoder.onnx, traced on `items` x `units` grid rows (the last one a padding paragraph), with a graph."""
    from . import graphs

    g = torch.Generator().manual_seed(4)
    cfg = model.config
    unit_mask = torch.ones(items, units, dtype=torch.bool)
    unit_mask[-1, -1] = False
    input_ids = torch.randint(3, cfg.vocab_size, (items * units, length), generator=g)
    attention_mask = torch.ones(items * units, length, dtype=torch.int64)
    attention_mask[1, length // 2 :] = 0
    attention_mask[~unit_mask.reshape(-1)] = 0
    graph = torch.rand(items, units, units, generator=g)
    io = graphs.declared(model)["encoder"]
    return graphs.GraphSpec(graphs.EncoderGraph(model), (input_ids, attention_mask, unit_mask, graph),
                            io.input_names, io.output_names, io.axes)


def register_model_kind() -> None:
    from . import graphs
    from .hiersumm_research import load_research
    from .registry import Loader, ModelKind, register, register_loader

    register_loader(Loader("hiersumm-research", claims=lambda file: file.state is None, load=load_research,
                           fallback=True))  # any file that is not a state dict: asked after the specific formats
    register(ModelKind(
        name=KIND, model=HierSumm, complete=complete,
        graphs=lambda model: {"ranker": ranker_spec(model), "encoder": encoder_spec(model),
                              "decoder": graphs.decoder_spec(model)},
        functions={}, register_symbolics=lambda opset: None, formats=("hf-bart", "pagesum-research"),
        objective=objective,
    ))
