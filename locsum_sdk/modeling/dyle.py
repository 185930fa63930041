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

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..configs.dyle import DyleConfig, ExtractorConfig, LlamaDyleConfig
from ..configs.llama import LlamaConfig
from ..configs.model import BartConfig
from ..errors import BundleError, BundleNotFoundError
from ..ops import snippet_marginalize
from . import copy
from .backbone import backbone
from .bart import Encoder, init_weights
from .bert import BertEncoder
from .copy import CopySource
from .objectives import IGNORE, label_smoothed_nll, unit_grid
from .per_unit import PerUnitModel

KIND = "dyle"

logger = logging.getLogger("locsum_sdk")


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
        if config.tfidf:
            self.tfidf_weight = nn.Parameter(torch.ones(()))

    def snippet_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       separators: torch.Tensor) -> torch.Tensor:
        """The encoder's state at each snippet's separator (n, D), which the scoring layer reads."""
        states = self.encoder(input_ids, attention_mask)  # (C, L, D)
        return states.reshape(-1, states.shape[-1])[separators]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, separators: torch.Tensor,
                tfidf: torch.Tensor | None = None) -> torch.Tensor:
        """Chunks input_ids, attention_mask (C, L); separators (n,): the flat index (chunk * L + position) of the
        separator after each snippet; tfidf (n,): each snippet's tf-idf feature, read when the config's `tfidf` is
        on -> the snippets' scores (n,)."""
        scores = self.classifier(self.snippet_states(input_ids, attention_mask, separators)).squeeze(-1)
        if not self.config.tfidf:
            return scores
        if tfidf is None:
            raise ValueError("this extractor reads a tf-idf feature (tfidf=) beside its chunks")
        return scores + self.tfidf_weight * tfidf.to(scores.dtype)


class Dyle(PerUnitModel):
    kind = KIND

    def __init__(self, config: BartConfig | LlamaDyleConfig):
        """config: a DyleConfig, a BartConfig (the extractor then takes its encoder's shape), or a LlamaDyleConfig
        (a Llama generator, its extractor an encoder of its own)."""
        super().__init__()
        config = config if isinstance(config, (DyleConfig, LlamaDyleConfig)) else DyleConfig.from_bart(config)
        self.config = config
        self.model = backbone(config)
        d = config.d_model
        self.dynamic_mlp = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))
        self.extractor = Extractor(config.extractor)
        self.marginalize = snippet_marginalize.torch_op()

    def reset_parameters(self, std: float = 0.02) -> None:
        init_weights(self, std)

    def mix(self, hidden: torch.Tensor, unit_mask: torch.Tensor,
            source: CopySource | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, U, K, D) -> marginal log-probabilities (B, K, V) and dynamic snippet weights (B, U, K). With
        copy, each snippet's distribution is g p_vocab + (1 - g) copy of its own tokens, marginalized: the snippets'
        log(g p_vocab) through SnippetMarginalize, then their copy mass under the same weights (`copy.unit_copies`)."""
        scores = self.dynamic_mlp(hidden).squeeze(-1)  # (B, U, K)
        log_probs = torch.log_softmax(self.model.lm_logits(hidden).float(), dim=-1)  # (B, U, K, V)
        if source is None:
            return self.marginalize(log_probs, scores.float(), unit_mask)
        gate = self.model.copy_gate(hidden, source)  # (B, U, K)
        generated, weights = self.marginalize(log_probs + copy.log_share(gate), scores.float(), unit_mask)
        return copy.unit_copies(generated, weights, gate, source), weights


LOSS_WEIGHTS = {"generation": 1.0, "oracle": 1.0, "consistency": 1.0}


def select_snippets(scores: torch.Tensor, oracle: list[int], top_k: int, hybrid: bool) -> list[int]:
    """The K snippets the generator trains on, in input order: the oracle's first (`hybrid`), then the extractor's
    best of the rest, up to K."""
    chosen = list(oracle[:top_k]) if hybrid else []
    for index in torch.argsort(scores.detach(), descending=True, stable=True).tolist():
        if len(chosen) >= top_k:
            break
        if index not in chosen:
            chosen.append(index)
    return sorted(chosen)


def oracle_cross_entropy(scores: torch.Tensor, oracle: Sequence[int]) -> torch.Tensor:
    """The extractor's oracle loss on one input: cross-entropy of its snippet scores (n,) over all snippets,
    averaged over the oracle snippets."""
    return -torch.log_softmax(scores, 0)[torch.tensor(list(oracle), device=scores.device)].mean()


def objective(model: Dyle, batch: Any, config: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """DYLE's training loss on a batch (`train.kinds.dyle.DyleBatch`):

    - oracle: the extractor's cross-entropy over all of a sample's snippets, averaged over its oracle snippets;
    - generation: label-smoothed NLL of the marginalized token distribution over the K chosen snippets (hybrid:
      the oracle first, `objective_options.hybrid`, default on);
    - consistency: KL(mean over the summary's steps of the dynamic weights || softmax of the extractor's scores of
      the K snippets), with gradients to the extractor only.

    Weighted by `objective_options.loss_weights` (default 1 each). Returns (loss, generation NLL, terms)."""
    options = config.objective_options
    weights = {**LOSS_WEIGHTS, **options.get("loss_weights", {})}
    hybrid = options.get("hybrid", True)
    top_k, pad = batch.top_k, model.config.pad_token_id
    scores = [model.extractor(**chunks).float() for chunks in batch.chunks]  # per sample (n,)
    oracle_terms = [oracle_cross_entropy(s, o) for s, o in zip(scores, batch.oracle) if o]
    oracle_loss = torch.stack(oracle_terms).mean() if oracle_terms else scores[0].new_zeros(())
    if weights["generation"] == 0 and weights["consistency"] == 0:  # the extractor alone: no generator pass
        return weights["oracle"] * oracle_loss, oracle_loss.new_zeros(()), {"oracle": oracle_loss.detach()}
    chosen = [select_snippets(s, o, top_k, hybrid) for s, o in zip(scores, batch.oracle)]
    input_ids, attention_mask, unit_mask = unit_grid([[batch.snippets[b][i] for i in c] for b, c in enumerate(chosen)],
                                                     pad, batch.decoder_input_ids.device)
    log_probs, dynamic = model(input_ids, attention_mask, unit_mask, batch.decoder_input_ids)  # (B,T,V), (B,U,T)
    generation, nll = label_smoothed_nll(log_probs.float(), batch.labels, config.label_smoothing)
    steps = (batch.labels != IGNORE).float()  # (B, T)
    consistency = []
    for b, indices in enumerate(chosen):
        target = (dynamic[b, : len(indices)].float() * steps[b]).sum(-1) / steps[b].sum().clamp_min(1)  # (K,)
        target = target.detach().clamp_min(1e-12)
        log_extracted = torch.log_softmax(scores[b][torch.tensor(indices, device=scores[b].device)], 0)
        consistency.append((target * (target.log() - log_extracted)).sum())
    terms = {"generation": generation, "oracle": oracle_loss, "consistency": torch.stack(consistency).mean()}
    loss = sum(weights[name] * value for name, value in terms.items())
    return loss, nll, {name: value.detach() for name, value in terms.items()}


def complete(config: BartConfig, state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Give a BART (or PageSum, or a DYLE generator without its retriever) the DYLE parts it lacks: the extractor
    starts as a copy of the BART's encoder (its shape by default) with a zero classifier, so every snippet scores
    alike until it is trained; the dynamic MLP gets small random hidden layers (seeded) and a zero output layer,
    so snippets weigh equally."""
    has_mlp = any(name.startswith("dynamic_mlp.") for name in state)
    has_extractor = any(name.startswith("extractor.") for name in state)
    if has_mlp and has_extractor:
        return state
    if isinstance(config, LlamaConfig) and not has_extractor:
        raise BundleError(f"{source}: a DYLE on a Llama backbone needs its extractor's weights (an encoder of its own, "
                          "e.g. MiniLM); a decoder-only generator has none to start it from")
    lacking = [part for part, has in (("extractor", has_extractor), ("dynamic MLP", has_mlp)) if not has]
    logger.warning("%s has no DYLE %s: %s", source, " or ".join(lacking),
                   "the extractor starts from its encoder, snippets weigh equally until trained")
    state = {k: v for k, v in state.items() if not k.startswith("page_conf.")}  # a PageSum's page confidence
    config = config if isinstance(config, (DyleConfig, LlamaDyleConfig)) else DyleConfig.from_bart(config)
    fresh = Dyle(config)
    generator = torch.Generator().manual_seed(0)
    for index in (0, 2):
        layer = fresh.dynamic_mlp[index]
        with torch.no_grad():
            layer.weight.normal_(0.0, 0.02, generator=generator)
            layer.bias.zero_()
    same_shape = isinstance(config, DyleConfig) and config.extractor == ExtractorConfig.from_bart(config)
    out = dict(state)
    for name, tensor in fresh.state_dict().items():
        if name.startswith("dynamic_mlp.") and not has_mlp:
            out[name] = torch.zeros_like(tensor) if name.startswith("dynamic_mlp.4.") else tensor
        elif name.startswith("extractor.") and not has_extractor:
            if name.startswith("extractor.classifier."):
                out[name] = torch.zeros_like(tensor)
            elif same_shape and name.startswith("extractor.encoder."):
                out[name] = state[name.replace("extractor.encoder.", "model.encoder.", 1)]
            elif same_shape and name == "extractor.shared.weight":
                out[name] = state["model.shared.weight"]
            else:
                out[name] = tensor
    return out


RETRIEVER_FILES = ("retriever.safetensors", "retriever.bin", "retriever.pt")  # beside a generator file
RETRIEVER_CONFIG = "retriever_config.json"  # HF RoBERTa config of the retriever


def from_research_names(generator: dict[str, torch.Tensor],
                        retriever: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """DYLE research weights -> `Dyle` names. Generator: `rag.generator.model.*` (HF BART), `rag.generator.lm_head
    .weight` (tied: must equal the shared table), `rag.generator.final_logits_bias`, `rag.dynamic_mlp.{0,2,4}.*`.
    Retriever: `roberta.*` (HF RoBERTa) and `classifier.{weight,bias}` (one score per separator)."""
    from .bert import from_hf_bert_names
    from .weights import from_hf_names

    bart, out = {}, {}
    for name, tensor in generator.items():
        if name.startswith("rag.generator."):
            bart[name.removeprefix("rag.generator.")] = tensor
        elif name.startswith("rag.dynamic_mlp."):
            out[name.removeprefix("rag.")] = tensor
        else:
            raise BundleError(f"{name!r} is not a DYLE generator weight (rag.generator.*, rag.dynamic_mlp.*)")
    out.update(from_hf_names(bart))
    if retriever is not None:
        head = {k: v for k, v in retriever.items() if k.startswith("classifier.")}
        if set(head) != {"classifier.weight", "classifier.bias"} or head["classifier.weight"].shape[0] != 1:
            raise BundleError(f"the retriever's classifier must be one linear score (classifier.weight (1, d), "
                              f"classifier.bias); found {sorted((k, tuple(v.shape)) for k, v in head.items())}")
        encoder = from_hf_bert_names({k: v for k, v in retriever.items() if not k.startswith("classifier.")})
        out.update({f"extractor.encoder.{k}": v for k, v in encoder.items()})
        out.update({f"extractor.{k}": v for k, v in head.items()})
    return out


def load_research(file, config_path: Path | None, kind: str | None):
    """A DYLE research generator file (`rag.*` weights, read once as `file`) as a `Dyle`: its HF BART
    config.json is `config_path` or beside the file; the retriever (`retriever.{safetensors,bin,pt}` with its HF
    RoBERTa `retriever_config.json`) is read from beside it when there, else the extractor starts from the
    generator's encoder."""
    from .registry import build
    from .weights import CONFIG_FILE, Checkpoint, read_config, read_state_dict, tokenizer_beside

    path, generator = file.path, file.state

    if kind not in (None, KIND):
        raise BundleError(f"{path} is a DYLE research checkpoint; it loads as dyle, not {kind}")
    config_path = config_path or path.parent / CONFIG_FILE
    if not config_path.is_file():
        raise BundleNotFoundError(f"{path} needs its HF BART config.json: pass one, or put it beside the file")
    bart = BartConfig.from_hf(read_config(config_path))
    retriever_file = next((path.parent / f for f in RETRIEVER_FILES if (path.parent / f).is_file()), None)
    extractor = retriever = None
    if retriever_file is not None:
        if not (path.parent / RETRIEVER_CONFIG).is_file():
            raise BundleNotFoundError(f"{retriever_file} needs its HF RoBERTa config as {RETRIEVER_CONFIG} beside it")
        extractor = ExtractorConfig.from_hf_bert(read_config(path.parent / RETRIEVER_CONFIG), bart.bos_token_id,
                                                 bart.eos_token_id)
        retriever = read_state_dict(retriever_file)
    config = DyleConfig.from_bart(bart, extractor)
    model = build(KIND, config, from_research_names(generator, retriever), str(path))
    return Checkpoint(model, tokenizer_beside(path.parent))


def register_snippet_marginalize(opset: int) -> None:
    """Export `locsum::snippet_marginalize` as one `locsum.SnippetMarginalize` node whose body is the onnxscript
    function."""
    snippet_marginalize.torch_op()

    def symbolic(g, log_probs, scores, mask):
        mixed, weights = g.onnxscript_op(snippet_marginalize.function(), log_probs, scores, mask, outputs=2)
        mixed.setType(log_probs.type().with_sizes([None, None, None]))  # (B, K, V)
        weights.setType(scores.type())  # (B, U, K)
        return mixed, weights

    torch.onnx.register_custom_op_symbolic(snippet_marginalize.TORCH_NAME, symbolic, opset)


class ExtractorGraph(nn.Module):
    def __init__(self, model: Dyle):
        super().__init__()
        self.extractor = model.extractor

    def forward(self, input_ids, attention_mask, separators, tfidf=None):
        return (self.extractor(input_ids, attention_mask, separators, tfidf),)


def extractor_spec(model: Dyle, chunks: int = 2, length: int = 12):
    """extractor.onnx, traced on `chunks` chunks (the second shorter) with a separator after every 3 tokens."""
    from . import graphs

    cfg = model.config.extractor
    g = torch.Generator().manual_seed(2)
    input_ids = torch.randint(3, cfg.vocab_size, (chunks, length), generator=g)
    attention_mask = torch.ones(chunks, length, dtype=torch.int64)
    attention_mask[1, length - 3 :] = 0
    separators = torch.tensor([c * length + p for c in range(chunks) for p in range(3, length - 3 * c, 3)])
    inputs = (input_ids, attention_mask, separators)
    if cfg.tfidf:
        inputs += (torch.randn(len(separators), generator=g),)
    io = graphs.declared(model)["extractor"]
    return graphs.GraphSpec(ExtractorGraph(model), inputs, io.input_names, io.output_names, io.axes)


def register_model_kind() -> None:
    from . import graphs
    from .registry import Loader, ModelKind, register, register_loader

    register_loader(Loader("dyle-research", load=load_research, claims=lambda file: file.state is not None and any(
        name.startswith("rag.") for name in file.state)))
    register(ModelKind(
        name=KIND, model=Dyle, complete=complete,
        graphs=lambda model: {"extractor": extractor_spec(model), "encoder": graphs.encoder_spec(model),
                              "decoder": graphs.decoder_spec(model)},
        functions={"decoder": snippet_marginalize.NAME}, register_symbolics=register_snippet_marginalize,
        formats=("hf-bart", "pagesum-research", "dyle-research"), objective=objective,
    ))
