"""What a unit-row bundle's encoder writes (`modeling.fused_unit_rows`): each layer's keys as (units, H, L, d), like
its values, so that a unit's outputs are the head of its grid row; in int8, both quantized with the fixed
per-channel scales the step's GroupQueryAttention reads them with.

The scales come from calibration text read as units are (the model's unit frame around pages of its text): each
layer's largest key and value magnitude per channel, times `MARGIN`, over 127. Across the shared data's sets the
largest magnitude of a channel varies by 1.4x between inputs at the median and 1.9x at the 95th percentile, and the
summary's own keys and values are written into the rows with the same scales; the margin keeps both within range at
about 6 bits of resolution for a typical value.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import constants as C
from ..errors import ExportError
from . import graph_index

MARGIN = 2.0  # headroom over the calibration's largest magnitude
CALIBRATION_PAGES = 64  # pages of calibration text read at most
INT8_TOP = 127


def calibration_pages(tokenizer_file: Path, texts: Sequence[str], config: Any, page_tokens: int) -> list[list[int]]:
    """Pages of `texts` framed as the model frames a unit (`unit_head`, text, `unit_tail`), at most
    `CALIBRATION_PAGES`, spread over the texts."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    room = page_tokens - len(config.unit_head) - len(config.unit_tail)
    if room < 1:
        raise ExportError(f"pages of {page_tokens} tokens leave no room for text inside the unit frame")
    pages: list[list[list[int]]] = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        pages.append([[*config.unit_head, *ids[i:i + room], *config.unit_tail] for i in range(0, len(ids), room)])
    chosen = [page for turn in range(max(map(len, pages), default=0)) for doc in pages if turn < len(doc)
              for page in [doc[turn]]][:CALIBRATION_PAGES]  # each text's first page, then each one's second, ...
    if not chosen:
        raise ExportError("int8 unit rows need calibration text (texts like the ones the bundle will read)")
    return chosen


def calibrate(model: Any, pages: list[list[int]], batch: int = 4) -> np.ndarray:
    """(layers, 2, KV, d): each layer's key and value scales of int8 unit rows, from the torch encoder over `pages`."""
    import torch

    largest = None
    with torch.no_grad():
        for first in range(0, len(pages), batch):
            run = pages[first:first + batch]
            length = max(map(len, run))
            ids = torch.tensor([page + [model.config.pad_token_id] * (length - len(page)) for page in run])
            mask = torch.tensor([[1] * len(page) + [0] * (length - len(page)) for page in run])
            _, cross = model.encode(ids, mask)  # padded positions are zeros
            found = np.stack([np.stack([key_t.abs().amax(dim=(0, 3)).numpy(), value.abs().amax(dim=(0, 2)).numpy()])
                              for key_t, value in cross])
            largest = found if largest is None else np.maximum(largest, found)
    tiniest = np.finfo(np.float32).tiny * INT8_TOP
    return (np.maximum(largest, tiniest) * MARGIN / INT8_TOP).astype(np.float32)


def encoder_rows(path: Path, config: Any, scales: np.ndarray | None) -> list[str]:
    """Rewrite the encoder at `path` (its outputs `cross_key.i` (N, H, d, L), `cross_value.i` (N, H, L, d)) to
    write unit rows: `unit_key.i` and `unit_value.i`, (N, H, L, d), int8 with `scales` where given. Its final hidden
    states, which no backend reads, are no longer written, nor what only they need (the last layer's output
    projection and MLP, the final norm): nodes and initializers pruned. Weights kept outside the graph stay where
    they are. Returns the names of the outputs it now writes."""
    graph = onnx.load(str(path), load_external_data=False)
    names = {output.name for output in graph.graph.output}
    layers = config.layers
    for i in range(layers):
        for source, target in ((C.cross_key(i), C.unit_key(i)), (C.cross_value(i), C.unit_value(i))):
            if source not in names:
                raise ExportError(f"{path.name} has no {source} to write as {target}")
            value = source
            if source == C.cross_key(i):
                value = _node(graph, "Transpose", [value], f"{target}.rows", perm=[0, 1, 3, 2])
            if scales is not None:
                part = 0 if source == C.cross_key(i) else 1
                scale = numpy_helper.from_array(scales[i, part].reshape(1, -1, 1, scales.shape[-1]),
                                                f"{target}.scale")
                one, zero = (numpy_helper.from_array(np.array(v, dtype), f"{target}.{name}")
                             for v, dtype, name in ((1.0, np.float32, "one"), (0, np.int8, "zero")))
                graph.graph.initializer.extend([scale, one, zero])
                value = _node(graph, "Div", [value, scale.name], f"{target}.scaled")
                value = _node(graph, "QuantizeLinear", [value, one.name, zero.name], f"{target}.codes")
            _node(graph, "Identity", [value], target)
    dtype = TensorProto.INT8 if scales is not None else TensorProto.FLOAT
    outputs = [helper.make_tensor_value_info(name(i), dtype, ["units", config.kv_heads, "length", config.head_dim])
                for i in range(layers) for name in (C.unit_key, C.unit_value)]
    del graph.graph.output[:]
    graph.graph.output.extend(outputs)
    graph_index.prune(graph.graph)
    onnx.save(graph, str(path))
    return [output.name for output in outputs]


def _node(graph: onnx.ModelProto, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
    graph.graph.node.append(helper.make_node(op, inputs, [output], name=f"node_{output}", **attributes))
    return output
