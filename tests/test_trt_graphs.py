"""Every prepared graph TensorRT would parse, checked against what the ONNX parser of the pinned TensorRT takes, and
every optimization profile run on ONNX Runtime at its min, opt and max shapes.

The parser's rules come from its operator table, `docs/operators.md` of onnx/onnx-tensorrt (read at its TensorRT
10.1 release: supported operators, their types and restrictions; the pinned 10.16 is held to the same table, which
is the stricter side if later releases relaxed any of it), and from its plugin importer: a node is mapped to a
plugin by its op type and its `plugin_namespace` string attribute, and the attributes the plugin declares become
plugin fields (int, float, string and their lists only). UINT8 is allowed only as a network input
or output; INT8 only through quantization, which the parser takes symmetric (`x_zero_point` must be zero).
ScatterElements (the copy distribution's scatter) is in the table; with `reduction` add the parser builds it
through TensorRT's own scatterElements plugin, which no machine here has run.
"""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import OptionError
from locsum_sdk.exporters import tensorrt as trt_export

ENGINES = Path(__file__).resolve().parents[1] / "engines"
SHIPPED = ("pagesum", "hierencdec", "dyle", "hiersumm")

F = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16}
N = {TensorProto.INT32, TensorProto.INT64}  # integers
B = {TensorProto.BOOL}
# operator -> the types its data input (input 0) may have, for every operator the exported graphs use
OPERATORS = {
    "Add": F | N, "And": B, "Cast": F | N | B | {TensorProto.UINT8}, "Clip": F, "Concat": F | N | B,
    "Constant": F | N | B, "ConstantOfShape": N, "Cos": F, "DequantizeLinear": {TensorProto.INT8}, "Div": F | N,
    "Equal": F | N, "Erf": F, "Exp": F, "Expand": F | N | B, "Gather": F | N | B, "Gemm": F, "Greater": F | N,
    "Identity": F | N | B, "IsInf": F, "IsNaN": F | N, "LayerNormalization": F, "Less": F | N, "Log": F,
    "LogSoftmax": F, "LSTM": F, "MatMul": F, "Max": F | N, "Min": F | N, "Mul": F | N, "Neg": F | N, "Not": B,
    "Or": B, "Pow": F, "Range": F | N, "ReduceMax": F | N, "ReduceMean": F | N, "ReduceSum": F | N, "Relu": F | N,
    "Reshape": F | N | B, "ScatterElements": F | N, "ScatterND": F | N, "Shape": F | N | B, "Sigmoid": F, "Sin": F,
    "Slice": F | N | B, "Softmax": F, "Sqrt": F, "Squeeze": F | N | B, "Sub": F | N, "Tanh": F, "TopK": F | N,
    "Transpose": F | N | B, "Unsqueeze": F | N | B, "Where": B,
}
AXES_CONSTANT = {"ReduceMax": 1, "ReduceMean": 1, "ReduceSum": 1, "Slice": 3, "Squeeze": 1, "Unsqueeze": 1}
# inputs whose values set an output's shape: a graph input reaching one would have to be a TensorRT shape input
SHAPE_SLOTS = {"Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2), "Slice": (1, 2, 3, 4),
               "Tile": (1,), "TopK": (1,), "Unsqueeze": (1,), "Squeeze": (1,), "ReduceMax": (1,),
               "ReduceMean": (1,), "ReduceSum": (1,), "Split": (1,), "Pad": (1, 2, 3), "Resize": (1, 2, 3),
               "OneHot": (1,), "CumSum": (1,), "NonZero": (0,)}
PLUGIN_FIELDS = {onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                 onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS}


@pytest.fixture(scope="module")
def tiny(bundle_dir, hierencdec_bundle_dir, dyle_bundle_dir, hiersumm_bundle_dir, llama_bundle_dir,
         llama_hierencdec_bundle_dir):
    return {"pagesum": bundle_dir, "hierencdec": hierencdec_bundle_dir, "dyle": dyle_bundle_dir,
            "hiersumm": hiersumm_bundle_dir, "llama": llama_bundle_dir, "llama-hierencdec": llama_hierencdec_bundle_dir}


def bundle_path(name, tiny):
    return tiny[name[len("tiny-"):]] if name.startswith("tiny-") else ENGINES / name


BUNDLES = [*SHIPPED, *(f"tiny-{kind}" for kind in ("pagesum", "hierencdec", "dyle", "hiersumm", "llama",
                                                    "llama-hierencdec"))]


def prepared_graphs(path: Path, target: Path, fp16: bool):
    """(graph name, prepared ModelProto) of each graph of the bundle at `path`, as `build_engines` prepares them."""
    prepared = Bundle.load(trt_export.prepared_bundle(path, target / "prepared", max_beams=4, fp16=fp16))
    for name, graph in sorted(prepared.manifest.graphs.items()):
        yield name, onnx.load(str(prepared.file(graph["file"])))


def parser_problems(model) -> list[str]:
    """What TensorRT's ONNX parser would refuse in `model` (see the module docstring)."""
    problems = []
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *graph.input, *graph.output]}
    initializers = {i.name: i for i in graph.initializer}
    types.update({name: init.data_type for name, init in initializers.items()})
    constants = set(initializers) | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    for name, init in initializers.items():
        if init.data_type == TensorProto.UINT8:
            problems.append(f"uint8 initializer {name}")
    depends = {i.name for i in graph.input}  # tensors whose values depend on a graph input
    for node in graph.node:
        where = f"{node.op_type} {node.name or node.output[0]}"
        attributes = {a.name: a for a in node.attribute}
        if node.domain == trt_export.NAMESPACE:
            if attributes.get("plugin_namespace") is None or attributes["plugin_namespace"].s != b"locsum":
                problems.append(f"{where}: no plugin_namespace='locsum'")
            problems += [f"{where}: attribute {a.name} cannot be a plugin field" for a in node.attribute
                         if a.type not in PLUGIN_FIELDS]
        elif node.domain not in ("", "ai.onnx"):
            problems.append(f"{where}: domain {node.domain}")
        elif node.op_type not in OPERATORS:
            problems.append(f"{where}: not in the parser's operator table")
        else:
            data = node.input[0] if node.input else None  # Where: its condition
            kind = types.get(data) if data else None
            if kind and kind not in OPERATORS[node.op_type]:
                problems.append(f"{where}: input type {TensorProto.DataType.Name(kind)}")
            if node.op_type == "DequantizeLinear":
                zero = node.input[2] if len(node.input) > 2 and node.input[2] else None
                if zero and (zero not in initializers or numpy_helper.to_array(initializers[zero]).any()
                             or initializers[zero].data_type != TensorProto.INT8):
                    problems.append(f"{where}: zero point is not an int8 zero")
            slot = AXES_CONSTANT.get(node.op_type)
            if slot is not None and len(node.input) > slot and node.input[slot] and node.input[slot] not in constants:
                problems.append(f"{where}: axes are not an initializer")
            if node.op_type == "ScatterND" and attributes.get("reduction", None) is not None \
                    and attributes["reduction"].s not in (b"", b"none"):
                problems.append(f"{where}: reduction")
            if node.op_type == "TopK" and (attributes["sorted"].i != 1 if "sorted" in attributes else False):
                problems.append(f"{where}: sorted must be 1")
            if node.op_type == "LayerNormalization" and any(node.output[1:]):
                problems.append(f"{where}: only its first output is supported")
            if node.op_type == "LSTM" and any(attributes[a].i for a in ("layout", "input_forget") if a in attributes):
                problems.append(f"{where}: layout and input_forget must be 0")
            if node.op_type == "Cast" and attributes["to"].i not in F | N | B:
                problems.append(f"{where}: casts to {TensorProto.DataType.Name(attributes['to'].i)}")
        for slot in SHAPE_SLOTS.get(node.op_type, ()):
            if len(node.input) > slot and node.input[slot] in depends:
                problems.append(f"{where}: input {slot} (a shape) depends on a graph input's values")
        if node.op_type != "Shape" and any(name in depends for name in node.input):
            depends.update(node.output)
    return problems


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", BUNDLES)
def test_prepared_graphs_are_within_the_parser(name, fp16, tiny, tmp_path):
    for graph, model in prepared_graphs(bundle_path(name, tiny), tmp_path, fp16):
        assert parser_problems(model) == [], f"{name} {graph}"


def test_the_parser_check_sees_asymmetric_int8(tmp_path):
    """The shipped DYLE's embedding tables are uint8 with zero points 125-132: prepared as they were (a
    DequantizeLinear of the uint8 table) the check refuses them."""
    model = onnx.load(str(Bundle.load(ENGINES / "dyle").file("encoder.onnx")))
    assert any("uint8 initializer" in p or "zero point" in p or "UINT8" in p for p in parser_problems(model))


def feeds(model, shapes: dict[str, list[int]], vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs of the given shapes: token ids in the vocabulary, masks all true, indices and positions 0."""
    values = {}
    for value in model.graph.input:
        shape, kind = shapes[value.name], value.type.tensor_type.elem_type
        if kind == TensorProto.BOOL:
            values[value.name] = np.ones(shape, dtype=bool)
        elif kind in (TensorProto.INT64, TensorProto.INT32):
            dtype = np.int64 if kind == TensorProto.INT64 else np.int32
            values[value.name] = (rng.integers(0, vocab, shape) if value.name.endswith("_ids")
                                  else np.ones(shape) if value.name.endswith("mask") else np.zeros(shape)).astype(dtype)
        else:
            dtype = np.float16 if kind == TensorProto.FLOAT16 else np.float32
            values[value.name] = rng.normal(0, 0.5, shape).astype(dtype)
    return values


@pytest.mark.parametrize("max_batch", [1, 2, 3])
@pytest.mark.parametrize("name", BUNDLES)
def test_every_profile_runs_at_min_opt_and_max(name, max_batch, tiny, tmp_path):
    """The raw prepared graphs on ONNX Runtime (CPU) at each profile's min, opt and max shapes, which TensorRT
    would build for: every run succeeds and its outputs are finite."""
    import onnxruntime as ort

    shapes = trt_export.EngineShapes(max_batch=max_batch, max_units=3, max_unit_len=12, max_beams=2, max_steps=6,
                                     max_candidates=5)
    path = bundle_path(name, tiny)
    vocab = Bundle.load(path).manifest.model["vocab_size"]
    rng = np.random.default_rng(max_batch)
    for graph, model in prepared_graphs(path, tmp_path, fp16=False):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        profile = trt_export.profile(model, shapes)
        for point, label in enumerate(("min", "opt", "max")):
            outputs = session.run(None, feeds(model, {k: v[point] for k, v in profile.items()}, vocab, rng))
            for output, meta in zip(outputs, session.get_outputs()):
                if np.issubdtype(output.dtype, np.floating) and meta.name != "log_probs":
                    assert np.isfinite(output).all(), f"{name} {graph} at {label}: {meta.name}"


@pytest.mark.parametrize("name", [*SHIPPED, "tiny-llama", "tiny-llama-hierencdec"])
def test_shipped_profiles_at_their_default_maxima_fit_the_model(name, tiny, tmp_path):
    """`to_trt.py`'s default maxima for a shipped bundle (and a Llama-backed one, whose units and summary share the
    positions): every axis the model's positions bound (unit tokens, the cache) at most its positions, and every
    graph runs on ONNX Runtime with those axes at their maxima (the others at 1, the decoding step at its last
    position, every unit full), where a profile past the positions failed on the position lookup. A maximum past
    them is refused."""
    import onnxruntime as ort

    path = bundle_path(name, tiny)
    manifest = Bundle.load(path).manifest
    positions = trt_export.model_positions(manifest.model)
    plan = trt_export.build_engines(path, tmp_path / "trt", dry_run=True)
    rng = np.random.default_rng(0)
    for graph in plan.graphs:
        model = onnx.load(str(tmp_path / "trt" / graph.prepared))
        axes = {value.name: [d.dim_param for d in value.type.tensor_type.shape.dim] for value in model.graph.input}
        shapes = {}
        for value, (low, _, high) in graph.profile.items():
            bounded = [axis in trt_export.POSITIONAL_AXES for axis in axes[value]]
            assert all(h <= positions for h, b in zip(high, bounded) if b), (graph.name, value, high)
            shapes[value] = [h if b else lo for lo, h, b in zip(low, high, bounded)]
        inputs = feeds(model, shapes, manifest.model["vocab_size"], rng)
        if "position" in inputs:
            inputs["position"][:] = trt_export.EngineShapes().fitted(manifest.model).maxima()["capacity"] - 1
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        session.run(None, inputs)
    with pytest.raises(OptionError, match=f"past the model's {positions} positions"):
        trt_export.build_engines(path, tmp_path / "over", trt_export.EngineShapes(max_unit_len=positions + 1),
                                 dry_run=True)
    assert not (tmp_path / "over").exists()
    if manifest.kind == "hiersumm":  # each kept paragraph's rank is coded: no more of them than positions
        with pytest.raises(OptionError, match=f"max_units={positions + 1} is past the model's {positions} positions"):
            trt_export.build_engines(path, tmp_path / "ranks", trt_export.EngineShapes(max_units=positions + 1),
                                     dry_run=True)


def test_prepared_nodes_are_ordered_wave_by_wave_and_a_cycle_or_a_missing_input_is_refused():
    from onnx import helper

    from locsum_sdk.errors import ExportError

    def graph(*nodes):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
        return helper.make_graph(list(nodes), "g", [x], [y])

    def node(name, *inputs):
        return helper.make_node("Add", list(inputs), [name], name=name)

    nodes = [node("y", "c", "b"), node("c", "a", "b"), node("b", "x", "x"), node("a", "x", "")]
    ordered = trt_export._topological(nodes, graph(*nodes))
    assert [n.name for n in ordered] == ["b", "a", "c", "y"]  # wave 0 in the given order, then 1, then 2
    cycle = [node("p", "x", "q"), node("q", "p", "x")]
    with pytest.raises(ExportError, match="has a cycle"):
        trt_export._topological(cycle, graph(*cycle))
    orphan = [node("p", "x", "nowhere")]
    with pytest.raises(ExportError, match="an input nothing produces"):
        trt_export._topological(orphan, graph(*orphan))
