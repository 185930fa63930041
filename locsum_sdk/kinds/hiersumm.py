"""The Hierarchical Transformer, runtime side: paragraphs as units (`locsum_sdk.paragraphs`); the ranker graph
scores every paragraph against the query (the title) and keeps the best `top_paragraphs`, best first (their rank
is part of the encoder's positional code); the encoder reads an item's kept paragraphs and their tf-idf graph at
once; one decoder per item attends to all their tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import constants as C
from ..configs.hiersumm import HierSummConfig
from ..configs.model import step_shape
from ..memory import FLOAT, arrays_bytes, attention_scores, copy_scatter, encoder_pass, lm_head, step_rows
from ..paragraphs import ParagraphOptions, ParagraphPager, tfidf_graph
from ..unit_batch import UnitBatch
from ..units import Unit
from . import (
    GraphIO,
    Kind,
    Selection,
    TensorIO,
    cross_outputs,
    keep_top,
    register,
    step_graph,
    tfidf_features,
    tfidf_input,
)
from .hierencdec import HierEncDecLayout

REVISION = 1
TITLE_IDS, TITLE_MASK = "title_ids", "title_mask"
PARAGRAPH_IDS, PARAGRAPH_MASK = "paragraph_ids", "paragraph_mask"
GRAPH, SCORES = "graph", "scores"


def ranker_arrays(texts: Sequence[Sequence[int]], title: Sequence[int]) -> dict[str, np.ndarray]:
    """The ranker's inputs: each paragraph's text ids (no special tokens) beside the title (the query's ids; one
    masked token when there is none)."""
    n, tokens = len(texts), max(len(ids) for ids in texts)
    title_ids = np.zeros((n, max(1, len(title))), dtype=np.int64)
    title_mask = np.zeros_like(title_ids)
    if len(title):
        title_ids[:], title_mask[:] = title, 1
    paragraph_ids = np.zeros((n, tokens), dtype=np.int64)
    paragraph_mask = np.zeros_like(paragraph_ids)
    for row, ids in enumerate(texts):
        paragraph_ids[row, : len(ids)], paragraph_mask[row, : len(ids)] = ids, 1
    return {TITLE_IDS: title_ids, TITLE_MASK: title_mask, PARAGRAPH_IDS: paragraph_ids, PARAGRAPH_MASK: paragraph_mask}


def ranker_inputs(units: Sequence[Unit], query_ids: Sequence[int], options: ParagraphOptions) -> dict[str, np.ndarray]:
    """One run of paragraphs, as the ranker graph reads them."""
    return ranker_arrays([u.text_ids for u in units], query_ids)


def reads_tfidf(model: dict[str, Any]) -> bool:
    return bool(model.get("ranker_tfidf"))


def ranker_memory(model: dict[str, Any], inputs: dict[str, np.ndarray]) -> int:
    """Working memory of one ranker run: its inputs; per token the embedding, the LSTM's input projection (4
    gates), its output, the title-paragraph concatenation, the tanh layer; the same for the title."""
    embed, hidden = model["d_model"], model["ranker_hidden"]
    rows, length = inputs[PARAGRAPH_IDS].shape
    title = inputs[TITLE_IDS].shape[1]
    return arrays_bytes(inputs) + rows * FLOAT * (length * (embed + 9 * hidden) + title * (embed + 5 * hidden))


def keep(units: Sequence[Unit], scores: np.ndarray, options: ParagraphOptions) -> list[Unit]:
    """The top_paragraphs best-scored paragraphs, best first."""
    return keep_top(units, scores, options.top_paragraphs, ranked=True)


def graphs(model: dict[str, Any]) -> dict[str, GraphIO]:
    layers = step_shape(model).layers
    ranker = GraphIO(
        "ranker.onnx",
        inputs=(TensorIO(TITLE_IDS, "int64", {0: "paragraphs", 1: "title_length"}),
                TensorIO(TITLE_MASK, "int64", {0: "paragraphs", 1: "title_length"}),
                TensorIO(PARAGRAPH_IDS, "int64", {0: "paragraphs", 1: "length"}),
                TensorIO(PARAGRAPH_MASK, "int64", {0: "paragraphs", 1: "length"}),
                *tfidf_input(reads_tfidf(model), "paragraphs")),
        outputs=(TensorIO(SCORES, "float32", {0: "paragraphs"}),),
    )
    encoder = GraphIO(
        C.ENCODER_FILE,
        inputs=(TensorIO(C.INPUT_IDS, "int64", {0: "rows", 1: "length"}),
                TensorIO(C.ATTENTION_MASK, "int64", {0: "rows", 1: "length"}),
                TensorIO(C.UNIT_MASK, "bool", {0: "items", 1: "units"}),
                TensorIO(GRAPH, "float32", {0: "items", 1: "units", 2: "units"})),
        outputs=(TensorIO(C.ENCODER_HIDDEN, "float32", {0: "rows", 1: "length"}), *cross_outputs(layers, "rows")),
    )
    return {"ranker": ranker, "encoder": encoder,
            "decoder": step_graph(layers, lambda i: "batch", model.get("copy", False))}


class HierSummLayout(HierEncDecLayout):
    """HierEncDec's layout (whole items per encoder run, one decoder per item), with each item's paragraph graph."""

    def encoder_memory(self, model: dict[str, Any], items: int, width: int, length: int, size: int) -> int:
        """The largest run's local layer over its rows, its paragraph graph, and the global layers' attention
        between an item's paragraphs (B, H, P, P)."""
        run = min(items, max(1, size // width))  # items per run
        heads = model["encoder_heads"]
        return (encoder_pass(run * width, length, model["d_model"], heads, model["encoder_ffn_dim"])
                + attention_scores(run * width, heads + 1, width))

    def step_memory(self, model: dict[str, Any], items: int, width: int, length: int, beams: int,
                    capacity: int) -> int:
        """One decoder per item (B*K rows) attending to all its paragraphs' tokens (B, H, K, P*L) at once; a copying
        model scatters its last layer's attention (B*K*P*L) into the step's distributions."""
        queries, heads, vocab = items * beams, model["decoder_heads"], model["vocab_size"]
        copying = copy_scatter(queries * width * length, queries, vocab) if model.get("copy") else 0
        return (step_rows(queries, model["d_model"], model["decoder_ffn_dim"])
                + attention_scores(queries, heads, width * length) + attention_scores(queries, heads, beams * capacity)
                + lm_head(queries, vocab) + copying)

    def encoder_inputs(self, batch: UnitBatch, first: int, end: int) -> dict[str, np.ndarray]:
        inputs = super().encoder_inputs(batch, first, end)
        width = batch.width
        ids, mask, units = inputs[C.INPUT_IDS], inputs[C.ATTENTION_MASK], inputs[C.UNIT_MASK]
        graph = np.zeros((len(units), width, width), dtype=np.float32)
        for item, real in enumerate(units):
            rows = range(item * width, item * width + int(real.sum()))
            graph[item, : len(rows), : len(rows)] = tfidf_graph([ids[r][mask[r] == 1][1:-1] for r in rows])
        return {**inputs, GRAPH: graph}


UNITS = ("paragraphs (blank-line blocks, or runs of speaker turns) the ranker kept, best first, each with its ranker "
         "score; a unit's weight is the decoder's attention mass on its tokens in the step, averaged over heads and "
         "layers")

KIND = register(Kind("hiersumm", REVISION, UNITS, ParagraphOptions, ParagraphPager, graphs, HierSummLayout(),
                     HierSummConfig, Selection("ranker", ranker_inputs, SCORES, keep, memory=ranker_memory,
                                                     features=tfidf_features(reads_tfidf)),
                     units_ranked=True))
