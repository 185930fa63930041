"""Lookups over an ONNX graph that the exporters' rewrites share: each value's producing node, the nodes reading it,
the initializers by name."""

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
