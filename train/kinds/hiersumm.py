"""The Hierarchical Transformer's training data: each example's paragraphs (the runtime's own pager, its first
`max_pages`), the query as the ranker's title, every paragraph's ROUGE-2 recall against the summary (the ranker's
regression target) and the summary.

`objective_options.stage` picks what trains (`locsum_sdk.modeling.hiersumm.objective`): "ranker" (the paper trains
it first, alone), "summarizer" (its input: the paragraphs the current ranker ranks best, as at run time) or "both".

The "denoise" objective (`HierDenoisingSet`) pretrains the encoder and decoder before either: BART's noise over a
segment of text, cut into paragraphs read in order, and the whole segment as the target.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from locsum_sdk.modeling.objectives import IGNORE
from locsum_sdk.units import Pager, Unit

from ..batching import Sample, shifted_targets
from ..config import TrainConfig
from ..data import SummarizationSet
from ..noise import DenoisingSet
from ..oracle import rouge_tokens

OBJECTIVE_OPTIONS = ("stage", "ranker_listwise", "ranker_tfidf")  # see `prepare_model` and the modeling's `objective`


def rouge2_recall(paragraph: str, reference_bigrams: Counter) -> float:
    """The share of the reference's bigrams (clipped counts) the paragraph holds, rouge-score's tokens."""
    total = sum(reference_bigrams.values())
    if not total:
        return 0.0
    words = rouge_tokens(paragraph)
    have = Counter(zip(words, words[1:]))
    return sum(min(c, reference_bigrams[b]) for b, c in have.items()) / total


@dataclass(frozen=True)
class HierSample:
    paragraphs: list[Unit]
    title: list[int]  # the query's ids (empty without a query)
    recall: list[float]  # each paragraph's ROUGE-2 recall against the summary
    target: list[int]  # summary ids, ending in eos

    @property
    def units(self) -> list[list[int]]:
        return [list(u.token_ids) for u in self.paragraphs]


@dataclass
class HierBatch:
    """Per sample its paragraphs' ids, title and recall targets; for the batch the decoder inputs and labels, and
    L', the paragraphs the encoder reads: the ranker's best (`ranked`), or the first L' in input order."""

    top_paragraphs: int
    paragraphs: list[list[list[int]]]
    titles: list[list[int]]
    recall: list[list[float]]
    decoder_input_ids: torch.Tensor
    labels: torch.Tensor
    ranked: bool = True

    @property
    def tokens(self) -> int:
        return sum(len(ids) for sample in self.paragraphs for ids in sample) + int((self.labels != IGNORE).sum())


class HierSummSet(SummarizationSet):
    def __init__(self, paths: Sequence[str | os.PathLike], pager: Pager, tokenizer, config: TrainConfig):
        super().__init__(paths, pager, tokenizer, config.max_target_tokens, config.units.get("max_pages"))
        self.options = pager.options

    def get(self, index: int, epoch: int = 0) -> HierSample:
        example = self.example(index)
        title = self.pager.query_ids(example.query)
        paragraphs = self.pager.pages(example.documents, title)[: self.max_pages]
        words = rouge_tokens(example.summary)
        reference = Counter(zip(words, words[1:]))
        return HierSample(paragraphs, list(title), [rouge2_recall(u.text, reference) for u in paragraphs],
                          self.target(example))

    def collate(self, samples: list[HierSample], pad: int, decoder_start: int) -> HierBatch:
        decoder_input_ids, labels = shifted_targets([s.target for s in samples], pad, decoder_start)
        return HierBatch(self.options.top_paragraphs, [s.units for s in samples], [s.title for s in samples],
                         [s.recall for s in samples], decoder_input_ids, labels)

    @torch.no_grad()
    def inference_units(self, model, sample: HierSample) -> list[list[int]]:
        """The ranker's best `top_paragraphs`, best first, as the runtime keeps them."""
        from locsum_sdk.modeling.hiersumm import rank_paragraphs

        order = rank_paragraphs(model, sample.units, sample.title, self.options.top_paragraphs)
        return [sample.units[i] for i in order]


class HierDenoisingSet(DenoisingSet):
    """BART's noise over each segment (`DenoisingSet`), the noised text cut into consecutive paragraphs of at most
    `paragraph_tokens` (`<s> text </s>`, as the pager frames them), read in order with no title; the target is the
    whole segment. Rebuilding it teaches the decoder to read every paragraph through the hierarchical encoder, which
    the summarizer stage alone did not learn at our budget (it wrote one summary whatever its input)."""

    def __init__(self, segments, bos: int, eos: int, mask_id: int, seed: int, paragraph_tokens: int):
        super().__init__(segments, bos, eos, mask_id, seed)
        self.paragraph_tokens = paragraph_tokens

    def get(self, index: int, epoch: int = 0) -> Sample:
        noised = super().get(index, epoch)
        text, body = noised.units[0][1:-1], self.paragraph_tokens - 2
        paragraphs = [[self.bos, *text[i : i + body], self.eos] for i in range(0, len(text), body)]
        return Sample(paragraphs or [[self.bos, self.eos]], noised.target)

    def collate(self, samples: list[Sample], pad: int, decoder_start: int) -> HierBatch:
        decoder_input_ids, labels = shifted_targets([s.target for s in samples], pad, decoder_start)
        return HierBatch(max(len(s.units) for s in samples), [s.units for s in samples], [[] for _ in samples],
                         [[0.0] * len(s.units) for s in samples], decoder_input_ids, labels, ranked=False)


def denoising_set(segments, special, mask_id: int, seed: int, config: TrainConfig) -> HierDenoisingSet:
    """The denoising data in paragraphs of the config's `paragraph_tokens` (the summarizer stage's)."""
    from locsum_sdk import kinds

    options = kinds.get("hiersumm").unit_options(**config.paging())
    return HierDenoisingSet(segments, special.bos, special.eos, mask_id, seed, options.paragraph_tokens)


def training_set(paths: Sequence[Path], pager: Pager, tokenizer, config: TrainConfig, split: str) -> HierSummSet:
    return HierSummSet(paths, pager, tokenizer, config)


def selection_report(summarizer, data: Path, limit: int | None) -> dict:
    """The ranker's ROUGE-L recall of the reference by its best L' paragraphs (L' = 5, 10, 20, 40; the paper's Table
    1), next to tf-idf, lead and random rankings."""
    from ..ranker_recall import ranker_report

    return {"title": "ROUGE-L recall of the reference by the best L' paragraphs (%)", "cutoff": "L'={}",
            "report": ranker_report(summarizer, data, [5, 10, 20, 40], limit)}


def prepare_model(model, config: TrainConfig):
    """`objective_options.ranker_tfidf = true`: the ranker also reads each paragraph's standardized tf-idf cosine to
    the title (`RankerConfig.tfidf`). A ranker without it gains it with every weight kept, a zero column for the
    feature in its mix layer and the feature's own weight at 1, so training starts from the old scores plus the
    feature."""
    if not config.objective_options.get("ranker_tfidf") or model.config.ranker_tfidf:
        return model
    import dataclasses

    from locsum_sdk.modeling.hiersumm import HierSumm
    from locsum_sdk.modeling.weights import load_into

    grown = HierSumm(dataclasses.replace(model.config, ranker_tfidf=True))
    state = model.state_dict()
    mix = state["ranker.mix.weight"]
    state["ranker.mix.weight"] = torch.cat([mix, mix.new_zeros(mix.shape[0], 1)], dim=1)
    state["ranker.tfidf_weight"] = grown.ranker.tfidf_weight.detach().clone()
    load_into(grown, state, "the ranker with a tf-idf feature")
    return grown.train(model.training)
