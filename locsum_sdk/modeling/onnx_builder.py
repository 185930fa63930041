"""A small writer of ONNX graphs node by node: each `op` returns its outputs' names, `const` adds an initializer
once per distinct array, and `model` closes the graph with its inputs and outputs declared (`kinds.GraphIO`).

The fused step graphs (`modeling.fused_llama`) are written with it: they name every operator themselves, so the
graph that runs is the one written, with no shape arithmetic a tracer would add."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
ELEMENT_TYPES = {"int64": TensorProto.INT64, "int32": TensorProto.INT32, "float32": TensorProto.FLOAT,
                 "bool": TensorProto.BOOL, "int8": TensorProto.INT8}


class GraphBuilder:
    """Nodes and initializers of one graph, names made unique by a counter (after `prefix`: a subgraph's names must
    not meet its outer graph's)."""

    def __init__(self, name: str, prefix: str = ""):
        self.name, self.prefix = name, prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.held: dict[tuple, str] = {}  # (dtype, shape, sha256) -> the initializer holding that array
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{self.prefix}{stem}_{self.count}"

    def const(self, array: Any, stem: str = "const") -> str:
        """An initializer holding `array` (numpy dtype kept; Python ints become int64, floats float32); an array
        equal to one already held (dtype, shape and bytes) is that initializer, so the graph holds each once (a tied
        LM head reads the embedding's codes, every layer the same block sums and shapes)."""
        value = np.ascontiguousarray(np.asarray(array))
        if value.dtype == np.float64:
            value = value.astype(np.float32)
        key = (value.dtype.str, value.shape, hashlib.sha256(value.tobytes()).digest())
        if key not in self.held:
            self.held[key] = self.fresh(stem)
            self.initializers.append(numpy_helper.from_array(value, self.held[key]))
        return self.held[key]

    def ints(self, *values: int) -> str:
        return self.const(np.array(values, np.int64), "shape")

    def op(self, op_type: str, *inputs: str, outputs: int = 1, domain: str = "", name: str | None = None,
           **attributes: Any):
        """Append one node; its output name (or a list of `outputs` names); `name` names its only output (a graph
        output)."""
        names = [name] if name is not None else [self.fresh(op_type) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.fresh(f"node_{op_type}"),
                                           domain=domain, **attributes))
        return names[0] if outputs == 1 else names

    def graph(self, inputs: list[tuple[str, str, list[Any] | None]],
              outputs: list[tuple[str, str, list[Any] | None]]) -> onnx.GraphProto:
        """The nodes as a graph (a model's, or a subgraph of `If`/`Scan`); inputs and outputs are (name, dtype, shape
        with dims or axis names, None where unknown)."""
        def info(name: str, dtype: str, shape: list[Any] | None) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(name, ELEMENT_TYPES[dtype], shape)

        return helper.make_graph(self.nodes, self.name, [info(*i) for i in inputs], [info(*o) for o in outputs],
                                 self.initializers)

    def model(self, inputs: list[tuple[str, str, list[Any]]], outputs: list[tuple[str, str, list[Any]]],
              opset: int = 17) -> onnx.ModelProto:
        """The graph as a model; inputs and outputs are (name, dtype, shape with dims or axis names). Its IR version
        is the lowest its opsets need, not the installed onnx's newest: ONNX Runtime refuses a model of an IR
        version newer than it knows, whatever its operators."""
        opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
        return helper.make_model(self.graph(inputs, outputs), opset_imports=opsets, producer_name="locsum",
                                 ir_version=helper.find_min_ir_version_for(opsets, ignore_unknown=True))
