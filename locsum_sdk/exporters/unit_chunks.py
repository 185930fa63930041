"""A unit's causal self-attention run in chunks of its queries, for ONNX Runtime's CPU kernel.

`GroupQueryAttention` without a past (the encoder's `modeling.unit_attention`) scores every query of a unit against
every key and masks the upper half afterwards: a unit of T tokens costs T^2 scores of which T(T+1)/2 are read. Run
as CHUNKS calls, each chunk's queries with the keys of the chunks before it as the past, the scores computed are
(CHUNKS + 1) / (2 CHUNKS) of the square (5/8 at 4), and the maths is the same: each score is the same dot product,
each softmax runs over the same causal prefix, and the keys past it enter the reading with weight zero in both
forms. The reading's sums over a query's prefix may be grouped otherwise where the product over a chunk's keys is
blocked differently from the one over the whole unit: measured, an output row in a hundred or so differs in the last
bits (at most 8e-7 on values about 1; 513-token units), and at most lengths (512 among them) none does.

The kernel takes a past with more than one new token only for one sequence at a time, so the chunks run inside a
`Scan` over the run's units: a CPU form (on a GPU the fused kernels skip the masked half themselves, and the `Scan`
would encode a run's units one after another), which the exporter writes into unit-row bundles, the form that runs
on the CPU only. Each call has a cost of its own, which short units do not pay back: a run whose units are shorter
than SHORTEST tokens takes the node as it was, under an `If` on the run's length (measured on a 2-core AMD EPYC, 4
chunks against the node alone: 0.81x as fast at 128-token units, 1.04x at 256, 1.11x at 384, 1.18x at 512, 1.09x at
1,024).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx

from ..modeling.onnx_builder import MS, GraphBuilder

logger = logging.getLogger("locsum_sdk")

CHUNKS = 4
SHORTEST = 384  # units of fewer tokens keep one call


def rewrite(path: Path, chunks: int = CHUNKS, shortest: int = SHORTEST) -> int:
    """Rewrite every `GroupQueryAttention` without a past in the graph at `path` (weights kept outside the graph stay
    where they are) to run in `chunks` for units of at least `shortest` tokens; returns how many were rewritten."""
    model = onnx.load(str(path), load_external_data=False)
    nodes, count = [], 0
    for node in model.graph.node:
        if _without_past(node):
            nodes.extend(_chunked(node, chunks, shortest, f"unit_chunks{count}/"))
            count += 1
        else:
            nodes.append(node)
    if count:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        onnx.save(model, str(path))
        logger.info("%s: %d unit attentions run in %d chunks of their queries", path.name, count, chunks)
    return count


def _without_past(node: onnx.NodeProto) -> bool:
    return (node.op_type == "GroupQueryAttention" and node.domain == MS
            and not any(node.input[3:5]))  # past_key, past_value absent


def _chunked(node: onnx.NodeProto, chunks: int, shortest: int, prefix: str) -> list[onnx.NodeProto]:
    """`node` (query (R, T, H d), key and value (R, T, KV d)) as If(T >= shortest, Scan over the R units of the
    chunked calls, the node as it was), writing the node's outputs."""
    query, key, value = node.input[:3]
    rotary = list(node.input[7:])  # cos_cache, sin_cache (and whatever follows), read from the outer graph
    outer = GraphBuilder("outer", prefix)
    length = outer.op("Shape", query, start=1, end=2)
    long = outer.op("Squeeze", outer.op("GreaterOrEqual", length, outer.ints(shortest)), outer.ints(0))

    alone = GraphBuilder("alone", prefix)
    alone.nodes.append(onnx.NodeProto())
    alone.nodes[0].CopyFrom(node)
    alone.nodes[0].output[:] = [f"{prefix}alone_{name}" for name in node.output]
    plain = alone.graph([], [(name, "float32", None) for name in alone.nodes[0].output])

    body = _unit_body(node, rotary, chunks, f"{prefix}unit/")
    scan = GraphBuilder("chunked", f"{prefix}scan/")
    scanned = scan.op("Scan", query, key, value, outputs=len(node.output), body=body, num_scan_inputs=3)
    chunked = scan.graph([], [(name, "float32", None) for name in scanned])

    outer.op("If", long, outputs=len(node.output), then_branch=chunked, else_branch=plain)
    outer.nodes[-1].output[:] = node.output
    return [*_constants(outer), *outer.nodes]


def _unit_body(node: onnx.NodeProto, rotary: list[str], chunks: int, prefix: str) -> onnx.GraphProto:
    """Scan's body: one unit's query (T, H d), key and value (T, KV d) -> its output (T, H d) and present key and
    value (KV, T, d), the queries in `chunks` calls, each chunk's with the keys and values before it as the past."""
    g = GraphBuilder("unit", prefix)
    names = [g.fresh(stem) for stem in ("query", "key", "value")]
    first = g.ints(0)
    query, key, value = (g.op("Unsqueeze", name, first) for name in names)  # (1, T, .)
    length = g.op("Shape", query, start=1, end=2)  # (1,) int64
    size = g.op("Div", g.op("Add", length, g.ints(chunks - 1)), g.ints(chunks))  # ceil(T / chunks)
    last = g.op("Sub", length, g.op("Mul", size, g.ints(chunks - 1)))
    sizes = g.op("Concat", *[size] * (chunks - 1), last, axis=0)
    parts = [g.op("Split", tensor, sizes, outputs=chunks, axis=1) for tensor in (query, key, value)]
    size32 = g.op("Cast", size, to=onnx.TensorProto.INT32)
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    past_key = past_value = ""
    outputs = []
    for i in range(chunks):
        total = (g.op("Mul", size32, g.const(np.array([i + 1], np.int32))) if i < chunks - 1
                 else g.op("Cast", length, to=onnx.TensorProto.INT32))  # (1,): the tokens up to this chunk's end
        seen = g.op("Sub", total, g.const(np.array([1], np.int32)))
        out, past_key, past_value = g.op("GroupQueryAttention", parts[0][i], parts[1][i], parts[2][i], past_key,
                                         past_value, seen, total, *rotary, outputs=3, domain=MS, **attributes)
        outputs.append(out)
    results = [g.op("Squeeze", tensor, first) for tensor in (g.op("Concat", *outputs, axis=1), past_key, past_value)]
    return g.graph([(names[0], "float32", ["length", "query_width"]), (names[1], "float32", ["length", "kv_width"]),
                    (names[2], "float32", ["length", "kv_width"])],
                   [(results[0], "float32", ["length", "query_width"]),
                    (results[1], "float32", ["kv_heads", "length", "head_dim"]),
                    (results[2], "float32", ["kv_heads", "length", "head_dim"])])


def _constants(g: GraphBuilder) -> list[onnx.NodeProto]:
    """The outer builder's initializers as `Constant` nodes, so that the rewrite adds nodes only."""
    return [onnx.helper.make_node("Constant", [], [init.name], value=init) for init in g.initializers]
