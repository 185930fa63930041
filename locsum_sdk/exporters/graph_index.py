"""Lookups over an ONNX graph that the exporters' rewrites share: each value's producing node, the nodes reading it,
the initializers by name; and the graph pruned to what its outputs need."""

from __future__ import annotations

from typing import Any


def producers(graph: Any) -> dict[str, Any]:
    """Each node output's name -> the node that writes it."""
    return {output: node for node in graph.node for output in node.output}


def consumers(graph: Any) -> dict[str, list[Any]]:
    """Each value's name -> the nodes that read it, in graph order (the graph's outputs are not nodes: not counted)."""
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def initializers(graph: Any) -> dict[str, Any]:
    """Each initializer's name -> its TensorProto."""
    return {init.name: init for init in graph.initializer}


def prune(graph: Any) -> int:
    """Remove the nodes that no graph output depends on, and the initializers no node reads any more (a subgraph's
    reads of outer values count); returns how many nodes went."""
    needed = {output.name for output in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(output in needed for output in node.output):
            kept.append(node)
            needed.update(_reads(node))
    removed = len(graph.node) - len(kept)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    initializers = [init for init in graph.initializer if init.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    return removed


def _reads(node: Any) -> set[str]:
    """The values `node` reads, its subgraphs' reads included."""
    from onnx import AttributeProto

    names = {name for name in node.input if name}
    for attribute in node.attribute:
        subgraphs = {AttributeProto.GRAPH: [attribute.g], AttributeProto.GRAPHS: list(attribute.graphs)}
        for subgraph in subgraphs.get(attribute.type, []):
            for inner in subgraph.node:
                names |= _reads(inner)
    return names
