"""HierEncDec, runtime side: documents as units (one page per document; a document over the page budget is split
into several, each starting with <s>), encoded a whole item at a time (their <s> states meet in every encoder
layer), and one decoder per item whose cross-attention ends in `locsum.DocScaledAttention`.

A document unit is framed as PageSum frames a page, `<s> [query </s>] text </s>`: the paper puts one </s> after the
last document of a concatenated input, but here every document is its own sequence with positions restarting,
so each ends as the BART sequences it was pretrained on do.

On a Llama backbone each document is a prompt read alone (`LlamaDocumentLayout`: PageSum's encoder runs) and one
summary per item reads all of them through document-scaled attention in every layer (`modeling.hierencdec_llama`);
the decoder holds no `locsum` function there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import constants as C
from ..configs.llama import BACKBONE as LLAMA
from ..configs.model import StepShape, step_shape
from ..memory import FLOAT, attention_scores, copy_scatter, encoder_pass, lm_head, step_rows
from ..unit_batch import UnitBatch
from ..units import Pager, PagingOptions
from . import BART, GraphIO, Kind, TensorIO, cross_outputs, register, step_graph, unit_rows, unit_rows_step
from .pagesum import PageSumLayout
from .pagesum import graphs as per_unit_graphs

REVISION = 2  # 2: the encoder scores the <s> exchange apart (D x D per head), no key copies per document


@dataclass(frozen=True)
class DocumentOptions(PagingOptions):
    """How text becomes documents: by default one unit per input document (`policy="document"`); a single long
    text can be cut into sections (`discourse`) or equal pages (`spatial`) that act as documents."""

    policy: str = "document"


def graphs(model: dict[str, Any]) -> dict[str, GraphIO]:
    """encoder and decoder IO of a HierEncDec with `model`'s decoder layers; on a Llama backbone the documents are
    encoded alone, as PageSum's pages are."""
    layers = step_shape(model).layers
    encoder = per_unit_graphs(model)["encoder"] if model.get("backbone") == LLAMA else GraphIO(
        C.ENCODER_FILE,
        inputs=(TensorIO(C.INPUT_IDS, "int64", {0: "rows", 1: "length"}),
                TensorIO(C.ATTENTION_MASK, "int64", {0: "rows", 1: "length"}),
                TensorIO(C.UNIT_MASK, "bool", {0: "items", 1: "units"})),
        outputs=(TensorIO(C.ENCODER_HIDDEN, "float32", {0: "rows", 1: "length"}), *cross_outputs(layers, "rows")),
    )
    rows = model.get("unit_rows", 0)
    if rows:  # each unit's keys and values with the summary's after them (`modeling.fused_unit_rows`); the final
        # hidden states, which no backend reads, are not written (a bundle exported before writes them first)
        dtype = "int8" if rows == 8 else "float32"
        encoder = replace(encoder, outputs=unit_rows(layers, dtype), former_outputs=encoder.outputs[:1])
        return {"encoder": encoder, "decoder": unit_rows_step(layers, dtype)}
    # one decoder per item: a cache row per item in every layer
    decoder = step_graph(layers, lambda i: "batch", model.get("copy", False))
    return {"encoder": encoder, "decoder": decoder}


class HierEncDecLayout:
    """The encoder runs whole items (the grid rows of each, padding documents included, with the item's unit
    mask), as many as fit `unit_batch_size` units and at least one; the decoder runs once per item."""

    units_alone = False  # the documents' <s> states meet in every encoder layer: no document's states are its own

    def encoder_runs(self, batch: UnitBatch, size: int) -> list[tuple[int, int, int]]:
        per_run = max(1, size // batch.width)  # items per run
        rows = batch.width * per_run
        total = batch.batch * batch.width
        return [(first, min(first + rows, total), first) for first in range(0, total, rows)]

    def encoder_inputs(self, batch: UnitBatch, first: int, end: int) -> dict[str, np.ndarray]:
        """Grid rows [first, end) of whole items: their units' ids and masks, zeros for padding documents."""
        width, length = batch.width, batch.input_ids.shape[1]
        items = range(first // width, end // width)
        starts = np.concatenate([[0], np.cumsum(batch.counts)])  # each item's first real unit
        input_ids = np.zeros((end - first, length), dtype=np.int64)
        attention_mask = np.zeros((end - first, length), dtype=np.int64)
        for i, item in enumerate(items):
            count, start = batch.counts[item], starts[item]
            input_ids[i * width : i * width + count] = batch.input_ids[start : start + count]
            attention_mask[i * width : i * width + count] = batch.attention_mask[start : start + count]
        return {C.INPUT_IDS: input_ids, C.ATTENTION_MASK: attention_mask,
                C.UNIT_MASK: batch.unit_mask[items.start : items.stop]}

    def decoder_inputs(self, batch: UnitBatch) -> dict[str, np.ndarray]:
        return {C.UNIT_MASK: batch.unit_mask, C.ENCODER_ATTENTION_MASK: batch.grid_mask(),
                C.ENCODER_INPUT_IDS: batch.grid_ids()}

    def encoder_memory(self, model: dict[str, Any], items: int, width: int, length: int, size: int) -> int:
        """The largest run's layer over its rows, and the <s> exchange: each item's D x D scores per head, joined
        to the <s> rows' own scores, D x (D + L), and their softmax."""
        run = min(items, max(1, size // width))  # items per run
        heads = model["encoder_heads"]
        return (encoder_pass(run * width, length, model["d_model"], heads, model["encoder_ffn_dim"])
                + attention_scores(run * width, heads, width + length))

    def step_memory(self, model: dict[str, Any], items: int, width: int, length: int, beams: int,
                    capacity: int) -> int:
        """One decoder per item (B*K rows); the cross-attention scores every document's tokens (B, D, H, K, L),
        with a softmax inside each and over the documents, and a weighted context per document (B, D, H, K, d); a
        copying model scores its last layer's tokens once more (the op keeps them to itself) and scatters their
        attention (B*K*D*L) into the step's distributions."""
        queries, heads, dim, vocab = items * beams, model["decoder_heads"], model["d_model"], model["vocab_size"]
        copying = (attention_scores(queries * width, heads, length) + copy_scatter(queries * width * length, queries,
                                                                                   vocab)) if model.get("copy") else 0
        return (step_rows(queries, dim, model["decoder_ffn_dim"])
                + attention_scores(queries * width, heads, length) + 2 * FLOAT * queries * width * dim
                + attention_scores(queries, heads, beams * capacity) + lm_head(queries, vocab) + copying)

    def cache_groups(self, items: int, width: int, shape: StepShape) -> list[int]:
        return [items] * shape.layers


class LlamaDocumentLayout(PageSumLayout):
    """On a Llama backbone each document is a prompt read alone (PageSum's encoder runs; a `UnitCache` serves
    them), and one summary per item reads them all (`modeling.hierencdec_llama`): its caches hold a row per item in
    every layer."""

    def step_memory(self, model: dict[str, Any], items: int, width: int, length: int, beams: int,
                    capacity: int) -> int:
        """B*K rows through the layers; at a layer, each row's queries rotated for every document, their scores
        over every document's tokens (B, D, H, K, L) and each document's reading (B, D, H, K, d), weighted; the
        summary's own scores over its slots; the LM head over B*K rows."""
        shape = step_shape(model)
        queries, heads = items * beams, shape.query_heads
        readings = 3 * FLOAT * queries * width * heads * shape.head_dim
        return (step_rows(queries, shape.d_model, shape.ffn_dim * shape.ffn_streams)
                + attention_scores(queries * width, heads, length, shape.score_tensors) + readings
                + attention_scores(queries, heads, beams * capacity, shape.score_tensors)
                + lm_head(queries, model["vocab_size"]))

    def cache_groups(self, items: int, width: int, shape: StepShape) -> list[int]:
        return [items] * shape.layers


UNITS = ("documents (or the sections or pages a long one was cut into); a unit's weight is its document weight in "
         "the step's attention (on BART, softmax over the documents' <s> scores; on a Llama backbone, softmax over "
         "the attention mass each document draws), averaged over heads and layers")

KIND = register(Kind("hierencdec", REVISION, UNITS, DocumentOptions, Pager, graphs, HierEncDecLayout(),
                     backbones=(BART, LLAMA), llama_layout=LlamaDocumentLayout()))
