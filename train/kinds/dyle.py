"""DYLE's training data: each example's snippets (the runtime's own pager), its extractive oracle, the extractor
chunks over all of its snippets, and the summary.

The oracle (`train.oracle`, at most `top_k` snippets) is computed once per data file and kept on disk in
`<output>/.oracle` (beside the runs), keyed by the split, the files' contents, the tokenizer and the snippet
options: a val or test file never reads a training file's oracle, and changing any input computes it again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from locsum_sdk.errors import OptionError
from locsum_sdk.kinds import TFIDF
from locsum_sdk.kinds.dyle import EXTRACTOR_TOKENIZER, extractor_inputs, own_ids
from locsum_sdk.limits import tfidf_feature
from locsum_sdk.modeling.dyle import LOSS_WEIGHTS
from locsum_sdk.modeling.objectives import IGNORE
from locsum_sdk.tokenizer_file import read_tokenizer
from locsum_sdk.units import Pager, Unit
from locsum_sdk.validation import check_keys

from ..batching import shifted_targets
from ..config import TrainConfig
from ..data import SummarizationSet
from ..files import write_whole
from ..oracle import Case, oracles, reference_sentences

logger = logging.getLogger("locsum_sdk.train")

OBJECTIVE_OPTIONS = ("loss_weights", "hybrid", "extractor_from", "extractor_tfidf", "extractor_tfidf_weight",
                     "extractor_checkpointing")  # see `prepare_model` and `locsum_sdk.modeling.dyle.objective`
ORACLE_VERSION = 1  # bumped when `train.oracle` changes what it chooses


@dataclass(frozen=True)
class DyleSample:
    snippets: list[Unit]  # every snippet the example keeps (its first `max_pages`)
    oracle: list[int]  # indices of the oracle snippets, best first
    target: list[int]  # summary ids, ending in eos
    query: str | None = None

    @property
    def units(self) -> list[list[int]]:
        return [list(u.token_ids) for u in self.snippets]


@dataclass
class DyleBatch:
    """What the DYLE objective reads: per sample the extractor chunks over all its snippets, the snippets' ids and
    its oracle; for the batch the decoder inputs and labels (B, T), and K, the snippets the generator reads."""

    top_k: int
    chunks: list[dict[str, torch.Tensor]]
    snippets: list[list[list[int]]]
    oracle: list[list[int]]
    decoder_input_ids: torch.Tensor
    labels: torch.Tensor

    @property
    def tokens(self) -> int:
        """Source tokens the extractor reads + target tokens (for throughput)."""
        return int(sum(c["attention_mask"].sum() for c in self.chunks) + (self.labels != IGNORE).sum())


class DyleSet(SummarizationSet):
    def __init__(self, paths: Sequence[str | os.PathLike], pager: Pager, tokenizer, config: TrainConfig, split: str,
                 progress: bool = True):
        super().__init__(paths, pager, tokenizer, config.max_target_tokens, config.units.get("max_pages"))
        self.options = pager.options
        self.extractor_tokenizer_file = extractor_tokenizer_file(config)
        self.extractor_tokenizer = None  # None: the extractor reads the generator's ids
        if self.extractor_tokenizer_file is not None:
            self.extractor_tokenizer = read_tokenizer(self.extractor_tokenizer_file)
        self.oracles = self._oracles(paths, split, Path(config.output).expanduser() / ".oracle", progress)

    @property
    def checkpoint_files(self) -> dict[str, Path]:
        """The extractor's own tokenizer, when it has one."""
        file = self.extractor_tokenizer_file
        return {} if file is None else {EXTRACTOR_TOKENIZER.file: file}

    def _key(self, paths: Sequence[str | os.PathLike], split: str) -> str:
        digest = hashlib.sha256()
        for path in paths:
            digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
        digest.update(self.tokenizer.to_str().encode())
        digest.update(json.dumps([split, dataclasses.asdict(self.options), self.max_pages, ORACLE_VERSION]).encode())
        return digest.hexdigest()[:20]

    def _oracles(self, paths, split: str, cache: Path, progress: bool) -> list[list[int]]:
        path = cache / f"{split}-{self._key(paths, split)}.json"
        if path.is_file():
            return json.loads(path.read_text())
        found = oracles(self._oracle_cases(), len(self), self.options.top_k, desc=f"oracle ({split})",
                        progress=progress)
        write_whole(path, lambda partial: partial.write_text(json.dumps(found)))
        return found

    def _oracle_cases(self) -> Iterator[Case]:
        for index in range(len(self)):
            example = self.example(index)
            yield [u.text for u in self.units(example)], reference_sentences(example.summary)

    def get(self, index: int, epoch: int = 0) -> DyleSample:
        example = self.example(index)
        return DyleSample(self.units(example), self.oracles[index], self.target(example), example.query)

    def chunks(self, snippets: Sequence[Unit], query: str | None = None) -> dict[str, torch.Tensor]:
        """The extractor's inputs over all the snippets, every chunk at once: in the snippets' own ids (which
        carry the query), or, for an extractor with a tokenizer of its own, in its ids; with each snippet's tf-idf
        feature (`TFIDF`, read by an extractor with `tfidf`) in the same ids."""
        if self.extractor_tokenizer is not None:
            tokenizer = self.extractor_tokenizer
            snippets, query_ids = own_ids(snippets, query, tokenizer, self.options.chunk_tokens,
                                          tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"))
        else:
            query_ids = self.pager.query_ids(query)
        inputs = {**extractor_inputs(snippets, [], self.options),
                  TFIDF: tfidf_feature([u.text_ids for u in snippets], query_ids)}
        return {name: torch.from_numpy(value) for name, value in inputs.items()}

    def collate(self, samples: list[DyleSample], pad: int, decoder_start: int) -> DyleBatch:
        decoder_input_ids, labels = shifted_targets([s.target for s in samples], pad, decoder_start)
        return DyleBatch(self.options.top_k, [self.chunks(s.snippets, s.query) for s in samples],
                         [s.units for s in samples], [s.oracle for s in samples], decoder_input_ids, labels)

    @torch.no_grad()
    def extractor_scores(self, model, snippets: Sequence[Unit], query: str | None) -> np.ndarray:
        """The extractor's score of every snippet, in torch, as training reads the snippets."""
        return model.extractor(**self.chunks(snippets, query)).float().numpy()

    def inference_units(self, model, sample: DyleSample) -> list[list[int]]:
        """The extractor's top_k snippets (in input order), as the runtime keeps them."""
        scores = self.extractor_scores(model, sample.snippets, sample.query)
        keep = np.sort(np.argsort(-scores, kind="stable")[: self.options.top_k])
        return [sample.units[i] for i in keep]


def extractor_tokenizer_file(config: TrainConfig) -> Path | None:
    """The extractor's own tokenizer: the tokenizer.json of `objective_options.extractor_from` (an HF BERT
    directory), or the one the `init_from` checkpoint carries; None when the extractor reads the generator's ids."""
    source = config.objective_options.get("extractor_from")
    if source:
        return config.resolve(source) / "tokenizer.json"
    if config.init_from:
        carried = config.resolve(config.init_from) / EXTRACTOR_TOKENIZER.file
        return carried if carried.is_file() else None
    return None


def prepare_model(model, config: TrainConfig):
    """`objective_options.extractor_from`: an HF BERT directory (config.json, model.safetensors, tokenizer.json; e.g.
    all-MiniLM-L6-v2): the extractor becomes that encoder, reading its own tokenizer's ids, with a zero scoring
    layer; the generator keeps its weights. `objective_options.extractor_tfidf = true`: an extractor without the
    tf-idf feature (`ExtractorConfig.tfidf`) gains it, every other weight kept; its weight starts at
    `objective_options.extractor_tfidf_weight` (default 1). The feature is standardized, so at weight w it alone
    scores like w z-scores: on QMSum train its oracle cross-entropy is lowest near w = 0.4 and worse than uniform
    at 1, where the first updates go into shrinking w rather than into the encoder's part.
    `objective_options.extractor_checkpointing = true`: the extractor's layers run again in the backward pass
    instead of keeping their activations over every chunk of the batch (`bart.run_encoder_layers`): the same
    gradients in the memory of one layer, for one more forward pass. The extractor reads all of an example's
    snippets with gradients, which for all-MiniLM-L6-v2 (12 heads) took over 24 GB without it (with every snippet
    padded to 128 ids, as its tokenizer file did before `read_tokenizer` turned that off)."""
    options = config.objective_options
    check_keys("objective_options.loss_weights", options.get("loss_weights", {}), LOSS_WEIGHTS, error=OptionError)
    if options.get("extractor_from"):
        model = extractor_from(model, config.resolve(options["extractor_from"]))
    if options.get("extractor_tfidf") and not model.config.extractor.tfidf:
        model = with_tfidf(model, float(options.get("extractor_tfidf_weight", 1.0)))
    model.extractor.encoder.checkpoint_layers = bool(options.get("extractor_checkpointing", False))
    return model


def hf_bert_extractor(directory: Path):
    """The HF BERT in `directory` as an extractor: its config (reading its own tokenizer) and its encoder's weights
    under the extractor's names, with a zero scoring layer."""
    from tokenizers import Tokenizer

    from locsum_sdk.configs.dyle import ExtractorConfig
    from locsum_sdk.modeling.bert import from_hf_bert_names
    from locsum_sdk.modeling.weights import read_config, read_state_dict

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    config = ExtractorConfig.from_hf_bert(read_config(directory / "config.json"), tokenizer.token_to_id("[CLS]"),
                                          tokenizer.token_to_id("[SEP]"))
    encoder = from_hf_bert_names(read_state_dict(directory / "model.safetensors"))
    state = {f"extractor.encoder.{k}": v for k, v in encoder.items()}
    state["extractor.classifier.weight"] = torch.zeros(1, config.d_model)
    state["extractor.classifier.bias"] = torch.zeros(1)
    return config, state


def extractor_from(model, directory: Path):
    """The model with its extractor replaced by the HF BERT in `directory` (see `prepare_model`)."""
    from locsum_sdk.configs.dyle import DyleConfig, LlamaDyleConfig
    from locsum_sdk.configs.llama import LlamaConfig
    from locsum_sdk.configs.model import BartConfig
    from locsum_sdk.modeling.dyle import Dyle
    from locsum_sdk.modeling.weights import load_into

    extractor, encoder = hf_bert_extractor(directory)
    kind = LlamaDyleConfig if isinstance(model.config, LlamaConfig) else DyleConfig
    generator = LlamaConfig if kind is LlamaDyleConfig else BartConfig
    fields = {f.name: getattr(model.config, f.name) for f in dataclasses.fields(generator)}
    replaced = Dyle(kind(**fields, extractor=extractor))
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("extractor.")}
    load_into(replaced, {**state, **encoder}, str(directory))
    logger.info("extractor from %s (%s, its own tokenizer)", directory, extractor.architecture)
    return replaced.train(model.training)


def from_base(base: Path, extractor: Path, tfidf_weight: float = 0.4):
    """A DYLE on an LLM (the wheel's base model, or a user's: `llm_checkpoint.read_start`) with the HF BERT in
    `extractor` (e.g. all-MiniLM-L6-v2) reading its own tokenizer, untrained: the extractor's scoring layer at zero
    and its tf-idf feature at `tfidf_weight`, so snippets are chosen by tf-idf to the query until it is trained, and
    the dynamic weights equal. Returns (model in eval mode, the LLM's tokenizer file)."""
    from locsum_sdk.configs.dyle import LlamaDyleConfig
    from locsum_sdk.modeling.dyle import Dyle
    from locsum_sdk.modeling.llm_checkpoint import read_start
    from locsum_sdk.modeling.weights import load_into

    source = read_start(base)
    config, encoder = hf_bert_extractor(extractor)
    model = Dyle(LlamaDyleConfig(**dataclasses.asdict(source.config), extractor=config))
    state = dict(source.state)
    state.update({k: torch.zeros_like(v) if k.startswith("dynamic_mlp.4.") else v
                  for k, v in model.state_dict().items() if k.startswith("dynamic_mlp.")})
    load_into(model, {**state, **encoder}, str(base))
    return with_tfidf(model, tfidf_weight).eval(), source.tokenizer_file


def with_tfidf(model, weight: float = 1.0):
    """The model with an extractor that also reads the tf-idf feature at `weight`, every other weight kept."""
    from locsum_sdk.modeling.dyle import Dyle
    from locsum_sdk.modeling.weights import load_into

    extractor = dataclasses.replace(model.config.extractor, tfidf=True)
    grown = Dyle(dataclasses.replace(model.config, extractor=extractor))
    state = {**model.state_dict(), "extractor.tfidf_weight": torch.full_like(grown.extractor.tfidf_weight, weight)}
    load_into(grown, state, "the extractor with a tf-idf feature")
    logger.info("the extractor reads each snippet's tf-idf feature, its weight from %g", weight)
    return grown.train(model.training)


def training_set(paths: Sequence[Path], pager: Pager, tokenizer, config: TrainConfig, split: str) -> DyleSet:
    return DyleSet(paths, pager, tokenizer, config, split)


def selection_report(summarizer, data: Path, limit: int | None) -> dict:
    """The extractor's recall of oracle snippets at K = 5, 10, 25, next to tf-idf, lead and random rankings."""
    from ..recall import bundle_items, recall_report

    ks = [5, 10, 25]
    return {"title": "extractor recall of the oracle snippets among the K best scored (%)", "cutoff": "R@{}",
            "report": recall_report(bundle_items(summarizer, data, limit, max(ks)), ks)}
