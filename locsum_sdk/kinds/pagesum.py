"""PageSum, runtime side: pages of the input (`units.PagingOptions`), and its two graphs' IO.

encoder.onnx: unit tokens -> encoder states and every decoder layer's cross keys/values, computed once.
decoder.onnx: one step over the (batch, units) grid; ends in `locsum.PageCombine`, so what leaves it is per beam.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import constants as C
from ..configs.llama import BACKBONE as LLAMA
from ..configs.model import StepShape, step_shape
from ..memory import attention_scores, copy_scatter, encoder_pass, lm_head, step_rows
from ..unit_batch import UnitBatch
from ..units import Pager, PagingOptions
from . import BART, GraphIO, Kind, TensorIO, cross_outputs, register, step_graph

REVISION = 1  # the layout of bundle format 4 (self-attention cache in beam slots, written in place)


def graphs(model: dict[str, Any]) -> dict[str, GraphIO]:
    """encoder and decoder IO of a PageSum with `model`'s decoder layers."""
    shape = step_shape(model)
    layers = shape.layers
    encoder = GraphIO(
        C.ENCODER_FILE,
        inputs=(TensorIO(C.INPUT_IDS, "int64", {0: "units", 1: "length"}),
                TensorIO(C.ATTENTION_MASK, "int64", {0: "units", 1: "length"})),
        outputs=(TensorIO(C.ENCODER_HIDDEN, "float32", {0: "units", 1: "length"}), *cross_outputs(layers, "units")),
    )
    # the decoder runs per page, except BART's layer 0, whose cache the pages of an item share
    shared = shape.shares_first_layer
    decoder = step_graph(layers, lambda i: "batch" if i == 0 and shared else "rows", model.get("copy", False))
    return {"encoder": encoder, "decoder": decoder}


class PageSumLayout:
    """Pages are encoded alone, in micro-batches that never cross an item; the decoder runs once per page, so its
    caches hold a row per grid page, except BART's layer 0's, which the pages of an item share (its input is the
    same for all of them; a Llama backbone's first layer already reads the page)."""

    units_alone = True

    def encoder_runs(self, batch: UnitBatch, size: int) -> list[tuple[int, int, int]]:
        return batch.runs(size)

    def encoder_inputs(self, batch: UnitBatch, first: int, end: int) -> dict[str, np.ndarray]:
        return {C.INPUT_IDS: batch.input_ids[first:end], C.ATTENTION_MASK: batch.attention_mask[first:end]}

    def decoder_inputs(self, batch: UnitBatch) -> dict[str, np.ndarray]:
        return {C.UNIT_MASK: batch.unit_mask, C.ENCODER_ATTENTION_MASK: batch.grid_mask(),
                C.ENCODER_INPUT_IDS: batch.grid_ids()}

    def encoder_memory(self, model: dict[str, Any], items: int, width: int, length: int, size: int) -> int:
        shape = step_shape(model)
        return encoder_pass(min(size, width), length, shape.d_model, shape.unit_heads,
                            shape.unit_ffn_dim * shape.ffn_streams)

    def step_memory(self, model: dict[str, Any], items: int, width: int, length: int, beams: int,
                    capacity: int) -> int:
        """Every page decodes its own rows (B*U*K) against its own tokens; the LM head reads the mixed B*K rows;
        a copying model scatters every page's attention mass (B*U*K*L) into the head rows' distributions."""
        shape = step_shape(model)
        queries, heads, head_rows = items * width * beams, shape.query_heads, self.head_rows(items, width, beams)
        copying = copy_scatter(queries * length, head_rows, model["vocab_size"]) if model.get("copy") else 0
        return (step_rows(queries, shape.d_model, shape.ffn_dim * shape.ffn_streams)
                + attention_scores(queries, heads, length + beams * capacity, shape.score_tensors)
                + lm_head(head_rows, model["vocab_size"]) + copying)

    def head_rows(self, items: int, width: int, beams: int) -> int:
        """Rows the LM head reads in a step: PageCombine mixes the pages' hidden states first."""
        return items * beams

    def cache_groups(self, items: int, width: int, shape: StepShape) -> list[int]:
        first = items if shape.shares_first_layer else items * width
        return [first] + [items * width] * (shape.layers - 1)


UNITS = "pages of the input; a unit's weight is its page weight in the step's hidden-space mixture (PageCombine)"

KIND = register(Kind("pagesum", REVISION, UNITS, PagingOptions, Pager, graphs, PageSumLayout(),
                     backbones=(BART, LLAMA)))
