"""A graph's low-rank adapter products kept in float32 and summed into their layer's output by one `Gemm`.

A LoRA linear layer exports as `Add(x @ W, (x @ A^T) @ (B s)^T)`. Left to ONNX Runtime's dynamic quantization, the
second product quantizes its r-column input again and writes a full (rows, N) tensor that the `Add` then reads back
beside the layer's output: three passes over (rows, N) where one is needed. `up_projections` names those second
products, for the quantizer to leave alone, and `sum_as_gemm` then writes each with its `Add` as `Gemm(z, (B s)^T,
y)` over the rows flattened (y and z viewed 2-D: the reshapes copy nothing): the up-projection in float32 and the sum
in one pass. A, the down-projection, is quantized with its layer's other products as before. This pays where a run
reads many rows (an encoder's units), not in a one-row step, where the int8 matrix is the smaller read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import graph_index


def _constant_dims(initializers: dict[str, Any], producer: dict[str, Any], name: str) -> tuple[int, ...] | None:
    """The dims of the initializer `name` is (or is an `Identity` of, as the exporter writes repeated weights)."""
    node = producer.get(name)
    if node is not None and node.op_type == "Identity":
        name = node.input[0]
    return tuple(initializers[name].dims) if name in initializers else None


def up_projections(model: Any) -> list[str]:
    """The names of `model`'s adapter up-projections: `MatMul(MatMul(x, A^T), (B s)^T)` read by one `Add` alone,
    A^T and (B s)^T constant, of one rank r smaller than both their other sides (a node without a name is given
    one)."""
    graph = model.graph
    producer, readers = graph_index.producers(graph), graph_index.consumers(graph)
    initializers = graph_index.initializers(graph)
    outputs = {output.name for output in graph.output}
    found = []
    for node in graph.node:
        if (node.op_type != "MatMul" or node.output[0] in outputs
                or [reader.op_type for reader in readers.get(node.output[0], [])] != ["Add"]):
            continue
        down = producer.get(node.input[0])
        if down is None or down.op_type != "MatMul":
            continue
        up_dims = _constant_dims(initializers, producer, node.input[1])
        down_dims = _constant_dims(initializers, producer, down.input[1])
        if up_dims is None or down_dims is None or len(up_dims) != 2 or len(down_dims) != 2:
            continue
        rank = up_dims[0]
        if down_dims[1] != rank or rank >= min(down_dims[0], up_dims[1]):
            continue
        node.name = node.name or f"{node.output[0]}/up_projection"
        found.append(node.name)
    return found


def sum_as_gemm(model: Any, names: list[str]) -> int:
    """Rewrite, in place, each `Add(y, MatMul(z, U))` whose `MatMul` is named in `names` (U a constant of r rows) as
    `Reshape(Gemm(z, U, y), shape of y)` over y and z viewed 2-D. Returns how many were rewritten."""
    from onnx import helper, numpy_helper

    graph = model.graph
    producer, initializers = graph_index.producers(graph), graph_index.initializers(graph)
    wanted = set(names)
    rewritten: dict[int, list[Any]] = {}
    dropped: set[int] = set()
    for node in graph.node:
        if node.op_type != "Add" or len(node.input) != 2:
            continue
        for side in (1, 0):
            up = producer.get(node.input[side])
            if up is None or up.op_type != "MatMul" or up.name not in wanted:
                continue
            rank, width = _constant_dims(initializers, producer, up.input[1])
            stem, y, z = node.output[0], node.input[1 - side], up.input[0]
            shapes = {f"{stem}/rows_of_z": [-1, rank], f"{stem}/rows_of_y": [-1, width]}
            graph.initializer.extend(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in shapes.items())
            rewritten[id(node)] = [
                helper.make_node("Shape", [y], [f"{stem}/shape"], name=f"{stem}/shape"),
                helper.make_node("Reshape", [z, f"{stem}/rows_of_z"], [f"{stem}/z"], name=f"{stem}/z"),
                helper.make_node("Reshape", [y, f"{stem}/rows_of_y"], [f"{stem}/y"], name=f"{stem}/y"),
                helper.make_node("Gemm", [f"{stem}/z", up.input[1], f"{stem}/y"], [f"{stem}/sum"],
                                 name=f"{stem}/adapter_sum"),
                helper.make_node("Reshape", [f"{stem}/sum", f"{stem}/shape"], [stem], name=f"{stem}/out")]
            dropped.add(id(up))
            break
    nodes = []
    for node in graph.node:
        if id(node) in rewritten:
            nodes.extend(rewritten[id(node)])
        elif id(node) not in dropped:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return len(rewritten)
