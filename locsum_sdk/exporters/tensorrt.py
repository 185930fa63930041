"""Bundle -> TensorRT engines: prepare each ONNX graph for TensorRT's parser, derive optimization profiles from the
largest input the engines must take, build one `.plan` per graph, write a new bundle atomically.

Preparing a graph (`prepare_graph`, no TensorRT needed):

- every `locsum` custom-op node gets `plugin_namespace="locsum"` and `aot=1`, so that the parser maps it to the
  ahead-of-time plugin of `locsum_sdk.kernels.plugins` instead of its ONNX function body (the function still
  declares both attributes, so the checker and ONNX Runtime accept the graph and run the body);
- the decoder also returns each beam's best `2 * max_beams + TOP_SPARE` tokens (`top_log_probs`, `top_tokens`:
  a TopK on the device), so that a decoding step copies those to the host rather than the whole vocabulary; the
  decoding loop reads the full log-probabilities only at a step where its filters left a beam too few of them;
- with `--fp16`, the graph computes in float16 (`float16_graph`): TensorRT builds strongly typed networks, whose
  types are the graph's, and the cross keys/values and caches take half the device memory;
- an int8 bundle's ONNX Runtime dynamic quantization (DynamicQuantizeLinear + MatMulInteger, which TensorRT
  does not parse) becomes weight-only quantization: `DequantizeLinear` of the same int8 weights, scales and
  zero points, then a float MatMul; int8 embedding tables are dequantized before the lookup. Activations are
  no longer quantized per run, so outputs follow the float graph with the bundle's int8 weights.

Profiles come from the graphs' named dynamic axes (`batch`, `units`, `length`, ...) and `EngineShapes`; an axis
without a rule is refused by name. `build_engines(..., dry_run=True)` stops after writing the prepared graphs
and the plan; without it TensorRT (10.9 or later), a CUDA GPU and the plugins are needed. The manifest of the
output bundle records TensorRT's version, the GPU, its compute capability, the precision and the profiles, and
checksums the plans like every other file; a failed build leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import constants as C
from .. import kinds
from ..bundle import Bundle, write_manifest
from ..configs.model import step_shape
from ..errors import BackendUnavailableError, ExportError, OptionError
from ..ops import doc_scaled_attention, page_combine, snippet_marginalize
from . import graph_index
from .staging import staged

logger = logging.getLogger("locsum_sdk")

NAMESPACE = "locsum"
OPS = (page_combine.NAME, doc_scaled_attention.NAME, snippet_marginalize.NAME)
PLUGIN_ATTRIBUTES = ("plugin_namespace", "aot")
PREPARED_SUFFIX = ".trt.onnx"
PLAN_SUFFIX = ".plan"
PLAN_FILE = "plan.json"  # what a dry run writes beside the prepared graphs
TOP_SPARE = 32  # best tokens a beam returns beyond the 2K a step may choose, for the filters to remove


@dataclass(frozen=True)
class EngineShapes:
    """The largest input the engines take: the maxima of their optimization profiles.

    `dims` overrides or adds the maximum of any named axis of the graphs (`--dim NAME=MAX`). Unit tokens and
    decoding steps default to the model's positions (`fitted`), the most any input can use; on a Llama backbone,
    whose summary continues each unit, half of them each (or what the other leaves). A maximum past them is refused,
    since the graphs cannot take such shapes (their position lookup would fail)."""

    max_batch: int = 1  # items summarized together
    max_units: int = 64  # pages, documents or snippets per item after selection
    max_unit_len: int | None = None  # tokens per unit; None: the model's positions
    max_beams: int = 4
    max_steps: int | None = None  # decoding steps, the self-attention cache's capacity; None: the model's positions
    max_candidates: int = 1024  # what a selection stage scores: snippets, paragraphs or chunks of the input
    dims: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_units", "max_unit_len", "max_beams", "max_steps", "max_candidates"):
            value = getattr(self, name)
            if value is None and name in ("max_unit_len", "max_steps"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"{name}={value!r} must be a whole number of at least 1")
        for name, value in self.dims.items():
            if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"dims[{name!r}]={value!r}: give each axis a whole number of at least 1")

    def fitted(self, model: dict[str, Any], units_ranked: bool = False) -> EngineShapes:
        """These shapes for a bundle's `model` settings: unit tokens and steps not given become the model's
        positions (the least of its networks'); a maximum past them is refused with OptionError, and so are more
        units than positions for a kind whose encoder codes each unit's rank (`Kind.units_ranked`)."""
        positions = model_positions(model)
        continued = step_shape(model).continues_units  # a unit and its summary share the positions
        half = positions // 2 if continued else positions
        unit_len = half if self.max_unit_len is None else self.max_unit_len
        steps = (positions - unit_len if continued else positions) if self.max_steps is None else self.max_steps
        bounded = [("max_unit_len", unit_len), ("max_steps", steps),
                   *((f"dims[{axis!r}]", value) for axis, value in self.dims.items() if axis in POSITIONAL_AXES)]
        if continued:
            bounded.append(("max_unit_len + max_steps", unit_len + steps))
        if units_ranked:
            bounded.append(("max_units", self.dims.get("units", self.max_units)))
        for name, value in bounded:
            if value > positions:
                raise OptionError(f"{name}={value} is past the model's {positions} positions: the graphs cannot take "
                                  f"such shapes; give at most {positions}")
        return replace(self, max_unit_len=unit_len, max_steps=steps)

    def maxima(self) -> dict[str, int]:
        """The maximum of every named axis the exported graphs use (of `fitted` shapes)."""
        return self._axes(self.max_batch, self.max_units, self.max_unit_len, self.max_beams, self.max_steps,
                          self.max_candidates, self.dims)

    def optima(self) -> dict[str, int]:
        """The shape TensorRT tunes for on every axis: half of each maximum (rounded up), all beams, and the axes
        that are products of others (rows = batch x units) their product, so that the opt shapes of all inputs
        are one input the graphs can take."""
        half = {name: -(-value // 2) for name, value in self.dims.items()}
        if self.max_unit_len is None or self.max_steps is None:
            raise OptionError("these shapes are not fitted to a bundle yet: use EngineShapes.fitted(manifest.model)")
        return self._axes(-(-self.max_batch // 2), -(-self.max_units // 2), -(-self.max_unit_len // 2),
                          self.max_beams, -(-self.max_steps // 2), -(-self.max_candidates // 2), half)

    @staticmethod
    def _axes(batch: int, units: int, length: int | None, beams: int, steps: int | None, candidates: int,
              dims: dict[str, int]) -> dict[str, int]:
        if length is None or steps is None:
            raise OptionError("these shapes are not fitted to a bundle yet: use EngineShapes.fitted(manifest.model)")
        base = {
            "batch": batch, "items": batch, "beams": beams, "units": units, "length": length, "capacity": steps,
            "chunks": candidates, "snippets": candidates, "paragraphs": candidates, "title_length": length,
        }
        axes = {**base, **dims}
        axes.setdefault("rows", axes["batch"] * axes["units"])
        return axes


POSITIONAL_AXES = ("length", "title_length", "capacity")  # axes the model's positions bound


def model_positions(model: dict[str, Any]) -> int:
    """The positions every network of a bundle's model takes: the least of the model's and its extractor's."""
    extractor = model.get("extractor") or {}
    return min(model["max_positions"], extractor.get("max_positions", model["max_positions"]))


@dataclass(frozen=True)
class GraphPlan:
    """One graph's engine: the file parsed, the plan written, the plugins used and the input profile."""

    name: str
    source: str  # the bundle's ONNX file
    prepared: str  # the prepared ONNX that TensorRT parses
    plan: str
    plugins: list[str]  # locsum op types mapped to plugins, sorted
    weight_only: int  # int8 MatMulInteger nodes rewritten to DequantizeLinear + MatMul
    profile: dict[str, list[list[int]]]  # input -> [min shape, opt shape, max shape]
    top_tokens: int = 0  # best tokens per beam the graph returns (the decoder), else 0


@dataclass(frozen=True)
class EnginePlan:
    bundle: str
    output: str
    precision: str  # "fp32" or "fp16"
    graphs: list[GraphPlan]

    def describe(self) -> str:
        lines = [f"TensorRT engines for {self.bundle} -> {self.output} ({self.precision})"]
        for graph in self.graphs:
            plugins = ", ".join(f"{NAMESPACE}::{op}" for op in graph.plugins) or "none"
            top = f"; best tokens per beam: {graph.top_tokens}" if graph.top_tokens else ""
            lines.append(f"  {graph.plan}: parse {graph.prepared} (plugins: {plugins}; int8 weight-only "
                         f"matmuls: {graph.weight_only}{top})")
            for name, (low, opt, high) in graph.profile.items():
                lines.append(f"    {name:<24} min {low}  opt {opt}  max {high}")
        return "\n".join(lines)


def annotate(model: Any) -> list[str]:
    """Mark every `locsum` op node (in the graph and in function bodies) for TensorRT's plugin override; returns
    the op types found. The op's local function declares the two attributes."""
    from onnx import helper

    found = set()
    bodies = [model.graph.node, *(function.node for function in model.functions)]
    for nodes in bodies:
        for node in nodes:
            if node.domain == NAMESPACE and node.op_type in OPS:
                kept = [a for a in node.attribute if a.name not in PLUGIN_ATTRIBUTES]
                del node.attribute[:]
                node.attribute.extend([*kept, helper.make_attribute("plugin_namespace", NAMESPACE),
                                       helper.make_attribute("aot", 1)])
                found.add(node.op_type)
    for function in model.functions:
        if function.domain == NAMESPACE and function.name in OPS:
            declared = list(function.attribute)
            function.attribute.extend([a for a in PLUGIN_ATTRIBUTES if a not in declared])
    return sorted(found)


def weight_only(model: Any) -> int:
    """Rewrite ONNX Runtime's dynamic int8 quantization into weight-only int8 (see the module docstring);
    returns the number of MatMulInteger nodes rewritten. A pattern it does not recognize is refused."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    fold_transposed_weights(graph)
    initializers = graph_index.initializers(graph)
    producer, consumers = graph_index.producers(graph), graph_index.consumers(graph)
    dropped, added, tables, rewritten = set(), [], set(), 0
    for node in graph.node:
        if node.op_type == "MatMulInteger":
            quantized = producer.get(node.input[0])
            cast = consumers.get(node.output[0], [])
            scale = consumers.get(cast[0].output[0], []) if len(cast) == 1 else []
            if (quantized is None or quantized.op_type != "DynamicQuantizeLinear" or node.input[1] not in initializers
                    or len(cast) != 1 or cast[0].op_type != "Cast" or len(scale) != 1 or scale[0].op_type != "Mul"):
                raise ExportError(f"int8 node {node.name or node.output[0]} is not ONNX Runtime's dynamic "
                                  "quantization pattern; export the bundle again (float32 or --quantize int8)")
            scales = producer.get(next(i for i in scale[0].input if i != cast[0].output[0]))
            weight_scale = next((i for i in scales.input if i in initializers), None) if scales else None
            if weight_scale is None:
                raise ExportError(f"cannot find the weight scale of int8 node {node.name or node.output[0]}")
            weight, zero = node.output[0] + ".weight", node.input[3] if len(node.input) > 3 else ""
            if initializers[node.input[1]].data_type == TensorProto.INT8 and not (
                    zero and np.any(numpy_helper.to_array(initializers[zero]))):  # the parser's form already
                added.append(helper.make_node("DequantizeLinear", [node.input[1], weight_scale, zero], [weight],
                                              name=weight))
            else:  # a uint8 weight (an LM head reading its table): shifted to int8 with a zero point of 0
                added.extend(symmetric_table(graph, initializers, node.input[1], [weight_scale, zero], weight))
            added.append(helper.make_node("MatMul", [quantized.input[0], weight], [scale[0].output[0]],
                                          name=node.output[0] + ".matmul"))
            dropped.update(id(n) for n in (node, cast[0], scale[0]))
            rewritten += 1
        elif (node.op_type == "DequantizeLinear" and node.input[0] in producer
              and producer[node.input[0]].op_type == "Gather"
              and producer[node.input[0]].input[0] in initializers
              and initializers[producer[node.input[0]].input[0]].data_type in (TensorProto.INT8, TensorProto.UINT8)):
            gather = producer[node.input[0]]
            table = f"{gather.input[0]}.dequantized"
            if table not in tables:  # one dequantized table per int8 table, however many lookups read it
                tables.add(table)
                added.extend(symmetric_table(graph, initializers, gather.input[0], node.input[1:], table))
            added.append(helper.make_node("Gather", [table, gather.input[1]], list(node.output),
                                          name=node.output[0] + ".gather", axis=_axis(gather)))
            dropped.update(id(n) for n in (node, gather))
    if not dropped:
        return 0
    kept = [n for n in graph.node if id(n) not in dropped]
    results = {o.name for o in graph.output}
    while True:  # drop what only fed the removed nodes (the activation quantizers, the scale products)
        used = {name for n in kept + added for name in n.input} | results
        still = [n for n in kept if any(out in used for out in n.output)]
        if len(still) == len(kept):
            break
        kept = still
    del graph.node[:]
    graph.node.extend(_topological(kept + added, graph))
    read = {name for n in graph.node for name in n.input}
    unread = [init for init in graph.initializer if init.name not in read]  # the replaced tables and scales
    for init in unread:
        graph.initializer.remove(init)
    return rewritten


def fold_transposed_weights(graph: Any) -> None:
    """Replace each Transpose of an initializer (an int8 LM head reading its embedding table, `packing.tie_lm_head`)
    with the transposed initializer, so the rewrites below see a constant weight."""
    from onnx import numpy_helper

    initializers = graph_index.initializers(graph)
    for node in [n for n in graph.node if n.op_type == "Transpose" and n.input[0] in initializers]:
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        values = numpy_helper.to_array(initializers[node.input[0]])
        graph.initializer.append(numpy_helper.from_array(np.transpose(values, perm), node.output[0]))
        graph.node.remove(node)


def symmetric_table(graph: Any, initializers: dict[str, Any], name: str, quantization: list[str],
                    table: str) -> list[Any]:
    """The float table `table` from the int8 or uint8 table `name` and its (scale, zero point) initializers, in a
    form TensorRT's parser takes (it dequantizes only int8 with a zero point of 0): an int8 table shifted by its
    zero point with a DequantizeLinear node when every shifted value fits int8 (exact), else the table itself
    dequantized into a float initializer (exact too; four times the bytes). Returns the nodes to add."""
    from onnx import helper, numpy_helper

    values = numpy_helper.to_array(initializers[name]).astype(np.int32)
    scale = numpy_helper.to_array(initializers[quantization[0]])
    zero = (numpy_helper.to_array(initializers[quantization[1]]).astype(np.int32)
            if len(quantization) > 1 and quantization[1] else np.int32(0))
    shifted = values - zero
    if shifted.min() >= -128 and shifted.max() <= 127:
        graph.initializer.append(numpy_helper.from_array(shifted.astype(np.int8), f"{table}.int8"))
        return [helper.make_node("DequantizeLinear", [f"{table}.int8", quantization[0]], [table], name=table)]
    graph.initializer.append(numpy_helper.from_array((shifted * scale).astype(scale.dtype), table))
    return []


def _axis(node: Any) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 0)


def _topological(nodes: list[Any], graph: Any) -> list[Any]:
    """Nodes in an order where every input is produced before it is read: wave by wave (a wave holds the nodes whose
    inputs the waves before it produce), each in the nodes' own order; linear in the graph's size."""
    ready = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    producer = {name: index for index, node in enumerate(nodes) for name in node.output}
    readers: list[list[int]] = [[] for _ in nodes]
    waiting = []
    for index, node in enumerate(nodes):
        if any(name not in ready and name not in producer for name in node.input):
            raise ExportError("the prepared graph has an input nothing produces; export the bundle again")
        needs = {producer[name] for name in node.input if name not in ready}
        for source in needs:
            readers[source].append(index)
        waiting.append(len(needs))
    wave = [index for index, count in enumerate(waiting) if count == 0]
    ordered: list[int] = []
    while wave:
        ordered += wave
        following = []
        for source in wave:
            for reader in readers[source]:
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    following.append(reader)
        wave = sorted(following)
    if len(ordered) < len(nodes):
        raise ExportError("the prepared graph has a cycle; export the bundle again")
    return [nodes[index] for index in ordered]


FLOAT16_MAX = 65504.0
FLOAT16_FILL = FLOAT16_MAX / 4  # what a constant beyond float16 becomes: a mask fill, finite even summed 4 times
STATE = ("cross_key.", "cross_value.", "past_key.", "past_value.", "present_key.", "present_value.")


def float16_graph(model: Any) -> None:
    """Rewrite a prepared graph to compute in float16, for a strongly typed TensorRT network (whose types are the
    graph's): float weights and constants become float16, casts to float cast to float16, and a LogSoftmax reads
    float32, and so does a ScatterElements (a copy distribution's sum of attention mass onto token ids). A constant
    beyond float16's range (float32's -3.4e38 mask fills, -inf) becomes -FLOAT16_FILL: far
    below any score, and finite where masks add up, so a row with every key masked stays uniform as in float32
    instead of turning into NaN; a nonzero constant below float16's smallest normal (an epsilon such as 1e-9 in
    `x / max(count, eps)`) becomes that normal instead of 0. The cross keys/values and the self-attention caches
    become float16 inputs and outputs (half the device memory); every other float input or output stays float32
    behind a cast."""
    from onnx import AttributeProto, TensorProto, helper, numpy_helper

    tiny = float(np.finfo(np.float16).tiny)

    def half(array: np.ndarray, constant: bool = True) -> np.ndarray:
        array = np.where(np.abs(array) > FLOAT16_MAX, np.sign(array) * FLOAT16_FILL, array)
        if constant:
            array = np.where((array != 0) & (np.abs(array) < tiny), np.sign(array) * tiny, array)
        return array.astype(np.float16)

    graph = model.graph
    scales = {n.input[1] for n in graph.node if n.op_type == "DequantizeLinear"}  # float16 scales need opset 19
    for init in graph.initializer:
        if init.data_type == TensorProto.FLOAT and init.name not in scales:
            array = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(half(array, constant=array.size == 1), init.name))
    for nodes in (graph.node, *(function.node for function in model.functions)):
        for node in nodes:
            for attribute in node.attribute:
                if node.op_type == "Cast" and attribute.name == "to" and attribute.i == TensorProto.FLOAT:
                    attribute.i = TensorProto.FLOAT16
                elif attribute.type == AttributeProto.TENSOR and attribute.t.data_type == TensorProto.FLOAT:
                    attribute.t.CopyFrom(numpy_helper.from_array(half(numpy_helper.to_array(attribute.t)),
                                                                 attribute.t.name))
                elif node.op_type == "Constant" and attribute.name in ("value_float", "value_floats"):
                    value = np.array(attribute.f if attribute.name == "value_float" else list(attribute.floats))
                    attribute.CopyFrom(helper.make_attribute("value", numpy_helper.from_array(half(value))))
    inner = {}  # float32 graph input or output -> its float16 name inside the graph
    for value in [*graph.input, *graph.output]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            if value.name.startswith(STATE):
                value.type.tensor_type.elem_type = TensorProto.FLOAT16
            else:
                inner[value.name] = f"{value.name}.float16"
    for body in (graph, *model.functions):
        nodes = []
        for node in body.node:
            # IsInf takes float16 only from opset 20; the output's LogSoftmax keeps float32 (its output stays so)
            if node.op_type in ("IsInf", "IsNaN") or (
                    body is graph and node.op_type == "LogSoftmax" and inner.pop(node.output[0], None)):
                cast = f"{node.input[0]}.float32"
                nodes.append(helper.make_node("Cast", [node.input[0]], [cast], name=cast, to=TensorProto.FLOAT))
                node.input[0] = cast
            if node.op_type == "ScatterElements":  # a copy distribution's scatter-add: summed in float32
                for index in (0, 2):
                    cast = f"{node.name or node.output[0]}.{index}.float32"
                    nodes.append(helper.make_node("Cast", [node.input[index]], [cast], name=cast,
                                                  to=TensorProto.FLOAT))
                    node.input[index] = cast
                summed = f"{node.output[0]}.float32"
                nodes += [node, helper.make_node("Cast", [summed], [node.output[0]], name=f"{node.output[0]}.float16",
                                                 to=TensorProto.FLOAT16)]
                node.output[0] = summed
                continue
            nodes.append(node)
            if node.op_type == "DequantizeLinear":  # float32 (its scales are), then float16
                dequantized = f"{node.output[0]}.float32"
                nodes.append(helper.make_node("Cast", [dequantized], [node.output[0]],
                                              name=f"{node.output[0]}.float16", to=TensorProto.FLOAT16))
                node.output[0] = dequantized
        del body.node[:]
        body.node.extend(nodes)
    outputs = {o.name for o in graph.output}
    first, last = [], []
    for node in graph.node:
        node.input[:] = [inner.get(name, name) for name in node.input]
        node.output[:] = [inner.get(name, name) for name in node.output]
    for name, renamed in inner.items():
        if name in outputs:
            last.append(helper.make_node("Cast", [renamed], [name], name=f"{name}.float32", to=TensorProto.FLOAT))
        else:
            first.append(helper.make_node("Cast", [name], [renamed], name=renamed, to=TensorProto.FLOAT16))
    nodes = [*first, *graph.node, *last]  # still in order: every cast sits just before or after its tensor's use
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]


def top_tokens(vocab: int, max_beams: int) -> int:
    """Best tokens per beam a prepared decoder returns: the 2K a step may choose, and TOP_SPARE more."""
    return min(vocab, 2 * max_beams + TOP_SPARE)


def add_top_tokens(model: Any, count: int) -> bool:
    """If `model` is a decoder (it returns `log_probs`), make it also return each beam's `count` best tokens;
    returns whether it did."""
    from onnx import TensorProto, helper, numpy_helper

    output = next((o for o in model.graph.output if o.name == C.LOG_PROBS), None)
    if output is None or count < 1:
        return False
    model.graph.initializer.append(numpy_helper.from_array(np.array([count], np.int64), "top.count"))
    model.graph.node.extend([
        helper.make_node("TopK", [C.LOG_PROBS, "top.count"], [C.TOP_LOG_PROBS, "top.indices"], name="top",
                         axis=-1, largest=1, sorted=1),
        helper.make_node("Cast", ["top.indices"], [C.TOP_TOKENS], name="top.cast", to=TensorProto.INT32),
    ])
    leading = [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim[:2]]
    model.graph.output.extend([
        helper.make_tensor_value_info(C.TOP_LOG_PROBS, output.type.tensor_type.elem_type, [*leading, count]),
        helper.make_tensor_value_info(C.TOP_TOKENS, TensorProto.INT32, [*leading, count]),
    ])
    return True


def import_onnx() -> Any:
    """The `onnx` package, which preparing graphs needs, or a typed error saying which extra brings it."""
    try:
        import onnx
    except ImportError:
        raise BackendUnavailableError("preparing graphs for TensorRT needs onnx: pip install 'locsum[gpu]' on the "
                                      "GPU machine, or 'locsum[export]' for a dry run anywhere") from None
    return onnx


def prepare_graph(source: Path, target: Path, top: int = 0, fp16: bool = False
                  ) -> tuple[list[str], int, Any, int]:
    """Write the TensorRT-ready form of one bundle graph, a decoder returning each beam's `top` best tokens too
    (`top_tokens`), computing in float16 with `fp16`; returns (plugin op types, int8 matmuls rewritten, the
    prepared ModelProto, best tokens per beam returned: `top` for the decoder, else 0)."""
    onnx = import_onnx()
    model = onnx.load(str(source))
    rewritten = weight_only(model)
    plugins = annotate(model)
    if fp16:
        float16_graph(model)
    top = top if add_top_tokens(model, top) else 0
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return plugins, rewritten, model, top


@contextlib.contextmanager
def engine_source(bundle: Bundle) -> Iterator[Bundle]:
    """`bundle`, or, where its decoder is a fused step (ONNX Runtime's contrib operators, which TensorRT's parser does
    not take), the bundle exported again as float32 graphs from its rebuilt module (`rebuild.export_again`: the same
    base file and adapters), in a temporary directory for as long as the block runs."""
    if bundle.manifest.dtype != "blocks":
        yield bundle
        return
    if importlib.util.find_spec("torch") is None:
        raise ExportError(f"{bundle.path}'s decoder is a fused step for ONNX Runtime; TensorRT's engines are built "
                          "from float32 graphs exported again from it, which needs pip install 'locsum[export]'")
    from .rebuild import export_again

    logger.info("%s: its decoder is a fused step for ONNX Runtime; exporting float32 graphs of the same weights for "
                "TensorRT", bundle.path)
    with tempfile.TemporaryDirectory() as work:
        yield export_again(bundle, Path(work) / bundle.path.name, None)


def prepared_bundle(bundle: str | os.PathLike, output: str | os.PathLike, max_beams: int = 4,
                    fp16: bool = False) -> Path:
    """A copy of `bundle` at `output` whose graphs are the prepared graphs: what TensorRT engines built from it
    compute, runnable on ONNX Runtime (the reference `locsum doctor` compares engines' tokens against)."""
    with engine_source(Bundle.load(bundle)) as source, staged(Path(output)) as work:
        count = top_tokens(source.manifest.model["vocab_size"], max_beams)
        for name in source.names():  # packed files unpacked: the copy is not on pretrained weights
            if name != C.WEIGHTS_FILE:  # the prepared graphs hold their weights themselves
                shutil.copyfile(source.file(name), work / name)
        for graph in source.manifest.graphs.values():
            prepare_graph(source.file(graph["file"]), work / graph["file"], count, fp16)
        write_manifest(work, source.manifest, base={}, packed={})  # weights inside the prepared graphs, unpacked
    return Path(output)


def profile(model: Any, shapes: EngineShapes) -> dict[str, list[list[int]]]:
    """[min, opt, max] shapes of every graph input from the named axes: min 1, opt and max from `shapes`."""
    maxima, optima = shapes.maxima(), shapes.optima()
    profiles: dict[str, list[list[int]]] = {}
    for value in model.graph.input:
        low, opt, high = [], [], []
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                if dim.dim_param not in maxima:
                    raise OptionError(f"input {value.name} has axis {dim.dim_param!r}, which has no maximum; give "
                                      f"one with --dim {dim.dim_param}=MAX")
                low.append(1), opt.append(optima[dim.dim_param]), high.append(maxima[dim.dim_param])
            else:
                low.append(dim.dim_value), opt.append(dim.dim_value), high.append(dim.dim_value)
        profiles[value.name] = [low, opt, high]
    return profiles


def build_plan(trt: Any, prepared: Path, graph_profile: dict[str, list[list[int]]]) -> bytes:
    """Parse one prepared graph with the plugin override and build its serialized engine: a strongly typed
    network, whose precision is the graph's (float16 graphs from `--fp16`)."""
    log = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(log)
    typing = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    flags = 0 if typing is None else 1 << int(typing)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, log)
    override = getattr(trt.OnnxParserFlag, "ENABLE_PLUGIN_OVERRIDE", None)
    if override is not None:
        parser.set_flag(override)
    if not parser.parse_from_file(str(prepared)):
        problems = "; ".join(str(parser.get_error(i).desc()) for i in range(parser.num_errors))
        raise ExportError(f"TensorRT could not parse {prepared.name}: {problems}")
    config = builder.create_builder_config()
    shapes = builder.create_optimization_profile()
    for name, (low, opt, high) in graph_profile.items():
        shapes.set_shape(name, low, opt, high)
    config.add_optimization_profile(shapes)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise ExportError(f"TensorRT could not build an engine from {prepared.name} (see its log above); try "
                          "smaller maxima (--max-units, --max-unit-len, --max-batch)")
    return bytes(engine)


def build_engines(bundle: str | os.PathLike, output: str | os.PathLike | None = None,
                  shapes: EngineShapes | None = None, fp16: bool = False, dry_run: bool = False,
                  force: bool = False) -> EnginePlan:
    """Build TensorRT engines for every graph of `bundle` into a new bundle at `output` (default: the bundle's
    path with `-trt` appended). With `dry_run`, write only the prepared graphs and `plan.json` and build nothing
    (any machine). Returns the plan; the output appears only when everything succeeded."""
    original = Bundle.load(bundle)
    import_onnx()  # before any other work
    output = Path(output) if output is not None else original.path.with_name(original.path.name + "-trt")
    if output.resolve() == original.path.resolve():
        raise ExportError(f"--output {output} is the bundle itself; choose a new directory")
    if output.exists() and not force:
        raise ExportError(f"{output} already exists; pass force=True (--force) to replace it")
    trt, device = None, None
    if not dry_run:  # before any other work too
        from ..backends import cuda
        from ..backends.tensorrt import import_tensorrt

        trt = import_tensorrt("building engines needs an NVIDIA GPU with CUDA and pip install 'locsum[gpu]'; "
                              "`--dry-run` writes the prepared graphs and the plan on any machine")
        device = cuda.device()
    with engine_source(original) as source:
        return _build(original, source, output, shapes, fp16, trt, device)


def _build(original: Bundle, source: Bundle, output: Path, shapes: EngineShapes | None, fp16: bool, trt: Any,
           device: tuple[str, str] | None) -> EnginePlan:
    """`build_engines` from `source` (`original`, or float32 graphs exported from it); a dry run where `trt` is
    None."""
    dry_run = trt is None
    shapes = (shapes or EngineShapes()).fitted(source.manifest.model, kinds.get(source.manifest.kind).units_ranked)
    count = top_tokens(source.manifest.model["vocab_size"], shapes.max_beams)
    with staged(output) as work:
        plans = []
        for name, graph in sorted(source.manifest.graphs.items()):
            stem = Path(graph["file"]).stem
            prepared = work / f"{stem}{PREPARED_SUFFIX}"
            plugins, rewritten, model, top = prepare_graph(source.file(graph["file"]), prepared, count, fp16)
            plans.append(GraphPlan(name, graph["file"], prepared.name, f"{stem}{PLAN_SUFFIX}", plugins, rewritten,
                                   profile(model, shapes), top))
        plan = EnginePlan(str(original.path), str(output), "fp16" if fp16 else "fp32", plans)
        if dry_run:
            (work / PLAN_FILE).write_text(json.dumps(asdict(plan), indent=2), encoding="utf-8")
        else:
            from ..kernels import plugins as trt_plugins

            trt_plugins.register(device[1])
            for graph_plan in plans:
                logger.info("building %s", graph_plan.plan)
                try:
                    engine = build_plan(trt, work / graph_plan.prepared, graph_plan.profile)
                except (ExportError, OptionError):
                    raise
                except Exception as err:  # TensorRT's own exceptions (TypeError, RuntimeError, ...)
                    raise ExportError(f"TensorRT failed building {graph_plan.plan} ({type(err).__name__}: {err}); "
                                      "run `locsum doctor` to see which GPU stage fails") from err
                (work / graph_plan.plan).write_bytes(engine)
            for name in source.manifest.files:
                shutil.copyfile(source.file(name), work / name)
            record = {
                "version": trt.__version__, "gpu": device[0], "compute_capability": device[1],
                "precision": plan.precision, "plans": {g.name: g.plan for g in plans},
                "profiles": {g.name: g.profile for g in plans},
            }
            write_manifest(work, source.manifest, tensorrt=record)
    return plan


def load_plan(path: str | os.PathLike) -> EnginePlan:
    """Read the `plan.json` a dry run wrote."""
    values = json.loads(Path(path, PLAN_FILE).read_text(encoding="utf-8"))
    return EnginePlan(**{**values, "graphs": [GraphPlan(**g) for g in values["graphs"]]})

