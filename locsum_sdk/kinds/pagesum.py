"""PageSum, runtime side: pages of the input (`units.PagingOptions`), and its two graphs' IO.

encoder.onnx: unit tokens -> encoder states and every decoder layer's cross keys/values, computed once.
decoder.onnx: one step over the (batch, units) grid; ends in `locsum.PageCombine`, so what leaves it is per beam.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import constants as C
from ..backends.base import UnitBatch
from ..units import Pager, PagingOptions
from . import GraphIO, Kind, TensorIO, register

REVISION = 1  # the layout of bundle format 4 (self-attention cache in beam slots, written in place)


def graphs(model: dict[str, Any]) -> dict[str, GraphIO]:
    """encoder and decoder IO of a PageSum with `model`'s decoder layers."""
    layers = range(model["decoder_layers"])
    encoder = GraphIO(
        C.ENCODER_FILE,
        inputs=(TensorIO(C.INPUT_IDS, "int64", {0: "units", 1: "length"}),
                TensorIO(C.ATTENTION_MASK, "int64", {0: "units", 1: "length"})),
        outputs=(TensorIO(C.ENCODER_HIDDEN, "float32", {0: "units", 1: "length"}),
                 *[t for i in layers for t in (TensorIO(C.cross_key(i), "float32", {0: "units", 3: "length"}),
                                               TensorIO(C.cross_value(i), "float32", {0: "units", 2: "length"}))]),
    )

    def cache(name, i):  # layer 0's cache is shared by the pages of an item
        return TensorIO(name(i), "float32", {0: "batch" if i == 0 else "rows", 2: "beams", 3: "capacity"})

    decoder = GraphIO(
        C.DECODER_FILE,
        inputs=(TensorIO(C.INPUT_IDS, "int64", {0: "batch", 1: "beams"}),
                TensorIO(C.UNIT_MASK, "bool", {0: "batch", 1: "units"}),
                TensorIO(C.ENCODER_ATTENTION_MASK, "int64", {0: "rows", 1: "length"}),
                TensorIO(C.POSITION, "int64", {}),
                TensorIO(C.CACHE_SLOTS, "int64", {0: "batch", 1: "beams", 2: "capacity"}),
                *[cache(name, i) for i in layers for name in (C.past_key, C.past_value)],
                *[t for i in layers for t in (TensorIO(C.cross_key(i), "float32", {0: "rows", 3: "length"}),
                                              TensorIO(C.cross_value(i), "float32", {0: "rows", 2: "length"}))]),
        outputs=(TensorIO(C.LOG_PROBS, "float32", {0: "batch", 1: "beams"}),
                 TensorIO(C.UNIT_WEIGHTS, "float32", {0: "batch", 1: "units", 2: "beams"}),
                 *[cache(name, i) for i in layers for name in (C.present_key, C.present_value)]),
    )
    return {"encoder": encoder, "decoder": decoder}


class PageSumLayout:
    """Pages are encoded alone, in micro-batches that never cross an item; the decoder runs once per page, so its
    caches hold a row per grid page, except layer 0's, which the pages of an item share (its input is the same
    for all of them)."""

    def encoder_runs(self, batch: UnitBatch, size: int) -> list[tuple[int, int, int]]:
        return batch.runs(size)

    def encoder_inputs(self, batch: UnitBatch, first: int, end: int) -> dict[str, np.ndarray]:
        return {C.INPUT_IDS: batch.input_ids[first:end], C.ATTENTION_MASK: batch.attention_mask[first:end]}

    def decoder_inputs(self, batch: UnitBatch) -> dict[str, np.ndarray]:
        return {C.UNIT_MASK: batch.unit_mask, C.ENCODER_ATTENTION_MASK: batch.grid_mask()}

    def cache_groups(self, items: int, width: int, layers: int) -> list[int]:
        return [items] + [items * width] * (layers - 1)


KIND = register(Kind("pagesum", REVISION, PagingOptions, Pager, graphs, PageSumLayout()))
