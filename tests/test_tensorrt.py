"""The TensorRT export as far as a machine without a GPU or TensorRT can take it: the prepared graphs (plugin
annotation, int8 weight-only rewrite) of every kind, their profiles, the dry run, clean failures without
TensorRT, and the manifest's record of where engines were built."""

import copy
import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from conftest import unpacked_copy  # noqa: E402

from locsum_sdk import Summarizer  # noqa: E402
from locsum_sdk.bundle import Bundle, Manifest, check_engine_host, write_manifest  # noqa: E402
from locsum_sdk.cli import main  # noqa: E402
from locsum_sdk.configs.model import step_shape  # noqa: E402
from locsum_sdk.errors import (  # noqa: E402
    BackendUnavailableError,
    BundleError,
    BundleIntegrityError,
    BundleVersionError,
    OptionError,
)
from locsum_sdk.exporters import tensorrt as trt_export  # noqa: E402

ENGINES = Path(__file__).resolve().parents[1] / "engines"
PLUGIN_TYPES = {onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS}  # int, float, str, bytes, 1-D arrays
KIND_OP = {"pagesum": "PageCombine", "hierencdec": "DocScaledAttention", "dyle": "SnippetMarginalize",
           "hiersumm": None}
TEXT = ("The committee met on Tuesday. Anna proposed moving the library budget to the spring. "
        "Ben said the roof repair costs 15,000 euros and must come first. They agreed to vote next week. ") * 6


@pytest.fixture(scope="module", params=["pagesum", "hierencdec", "dyle", "hiersumm"])
def tiny_bundle(request, bundle_dir, hierencdec_bundle_dir, dyle_bundle_dir, hiersumm_bundle_dir):
    return {"pagesum": bundle_dir, "hierencdec": hierencdec_bundle_dir, "dyle": dyle_bundle_dir,
            "hiersumm": hiersumm_bundle_dir}[request.param]


def prepared_bundle(source: Path, target: Path) -> Path:
    """A copy of `source` whose graphs are the prepared (TensorRT) graphs: runnable on ONNX Runtime."""
    return trt_export.prepared_bundle(source, target)


def locsum_nodes(model):
    return [n for nodes in (model.graph.node, *(f.node for f in model.functions)) for n in nodes
            if n.domain == trt_export.NAMESPACE]


def test_every_kind_prepared_for_the_plugins(tiny_bundle, tmp_path):
    bundle = Bundle.load(tiny_bundle)
    seen = set()
    for graph in bundle.manifest.graphs.values():
        target = tmp_path / graph["file"]
        count = trt_export.top_tokens(bundle.manifest.model["vocab_size"], 3)
        plugins, _, _, top = trt_export.prepare_graph(bundle.file(graph["file"]), target, count)
        model = onnx.load(str(target))
        onnx.checker.check_model(model, full_check=True)
        outputs = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
                   for o in model.graph.output}
        if "log_probs" in outputs:  # the decoder: each beam's best tokens too, for the host to copy
            assert top == count == 2 * 3 + trt_export.TOP_SPARE
            assert outputs["top_log_probs"] == outputs["top_tokens"] == ["batch", "beams", top]
        else:
            assert top == 0 and "top_tokens" not in outputs
        nodes = locsum_nodes(model)
        assert sorted({n.op_type for n in nodes}) == plugins
        for node in nodes:
            attributes = {a.name: a for a in node.attribute}
            assert attributes["plugin_namespace"].s == b"locsum" and attributes["aot"].i == 1
            assert all(a.type in PLUGIN_TYPES for a in node.attribute), node
        for function in model.functions:
            if function.domain == trt_export.NAMESPACE:
                assert {"plugin_namespace", "aot"} <= set(function.attribute)
        seen.update(plugins)
    expected = KIND_OP[bundle.manifest.kind]
    assert seen == ({expected} if expected else set())


@pytest.mark.parametrize("options", [{"num_beams": 2, "max_length": 16, "min_length": 2},
                                     {"num_beams": 3, "max_length": 24, "min_length": 20, "no_repeat_ngram_size": 1}])
def test_prepared_graphs_give_the_same_tokens_on_onnxruntime(tiny_bundle, tmp_path, options, monkeypatch):
    """The annotation changes nothing ONNX Runtime runs, and the decoder's best tokens (all the session copies
    to the host) decide as the full log-probabilities do, also where the filters ban many of them: float32
    bundles of every kind, token-identical."""
    prepared = prepared_bundle(tiny_bundle, tmp_path / "prepared")
    kind = Bundle.load(tiny_bundle).manifest.kind
    documents = TEXT if kind in ("pagesum", "dyle") else TEXT.split(". ")[:8]
    want = Summarizer.from_pretrained(tiny_bundle).summarize(documents, **options)
    from locsum_sdk.backends import onnxruntime as ort_backend

    copied = []  # the (B, K, T) best tokens each step brought to the host
    scatter = ort_backend.scatter_top
    monkeypatch.setattr(ort_backend, "scatter_top", lambda v, t, out: copied.append(t.shape) or scatter(v, t, out))
    got = Summarizer.from_pretrained(prepared).summarize(documents, **options)
    assert got.token_ids == want.token_ids
    assert copied and all(shape[1:] == (options["num_beams"], 2 * 4 + trt_export.TOP_SPARE) for shape in copied)


def exact_int8(model):
    """`model` with each MatMulInteger computed in float32 from the same integers (activation and weight minus
    their zero points): ONNX Runtime's int8 graph without its int8 kernels, whose rounding and saturation differ by
    instruction set (AVX2's u8s8 saturates where AVX-512 VNNI does not). What it computes is fixed on any x86-64 CPU:
    the bundle's int8 graph, activations quantized."""
    from onnx import helper

    model = copy.deepcopy(model)
    nodes = []
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            nodes.append(node)
            continue
        out = node.output[0]
        for side, (value, zero) in enumerate(((node.input[0], node.input[2]), (node.input[1], node.input[3]))):
            nodes.append(helper.make_node("Cast", [value], [f"{out}.{side}"], to=onnx.TensorProto.FLOAT))
            nodes.append(helper.make_node("Cast", [zero], [f"{out}.{side}.zero"], to=onnx.TensorProto.FLOAT))
            nodes.append(helper.make_node("Sub", [f"{out}.{side}", f"{out}.{side}.zero"], [f"{out}.{side}.centred"]))
        nodes.append(helper.make_node("MatMul", [f"{out}.0.centred", f"{out}.1.centred"], [out]))
    del model.graph.node[:]
    model.graph.node.extend(nodes)  # the Cast that read the int32 product now casts a float to float
    return model


def test_int8_becomes_weight_only():
    """The shipped int8 DYLE: no MatMulInteger or DynamicQuantizeLinear left; the same int8 weights, scales and
    zero points feed DequantizeLinear; the encoder's outputs stay within the activation quantization's error
    (2% of the largest value) of the int8 graph computed exactly (`exact_int8`), on real tokens."""
    import onnxruntime as ort

    source = Bundle.load(ENGINES / "dyle").file("encoder.onnx")
    original = onnx.load(str(source))
    model = onnx.load(str(source))
    rewritten = trt_export.weight_only(model)
    assert rewritten == sum(n.op_type == "MatMulInteger" for n in original.graph.node) > 0
    assert not {n.op_type for n in model.graph.node} & {"MatMulInteger", "DynamicQuantizeLinear"}
    weights = {i.name for i in original.graph.initializer
               if i.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)}
    dequantized = {n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    assert dequantized <= weights and len(dequantized) >= rewritten
    onnx.checker.check_model(model)
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(Bundle.load(ENGINES / "dyle").file("tokenizer.json"))).encode(TEXT).ids[:96]
    feeds = {"input_ids": np.array([ids[:48], ids[48:96]], dtype=np.int64),
             "attention_mask": np.ones((2, 48), dtype=np.int64)}
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
           for m in (exact_int8(original), model)]
    for want, got in zip(*run):
        assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


def test_profiles_from_named_axes():
    model = onnx.load(str(Bundle.load(ENGINES / "pagesum").file("decoder.onnx")), load_external_data=False)
    shapes = trt_export.EngineShapes(max_batch=2, max_units=8, max_unit_len=512, max_beams=4, max_steps=64)
    profile = trt_export.profile(model, shapes)
    assert profile["unit_mask"] == [[1, 1], [1, 4], [2, 8]]
    assert profile["cross_key.0"][2] == [16, 4, 64, 512]  # rows = batch x units; head size static
    assert profile["cross_key.0"][1] == [4, 4, 64, 256]  # at opt too: rows = 1 x 4
    assert profile["input_ids"][1] == [1, 4]  # beams: opt at the max
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "novel"
    with pytest.raises(OptionError, match="--dim novel=MAX"):
        trt_export.profile(model, shapes)
    assert trt_export.profile(model, replace(shapes, dims={"novel": 5}))[model.graph.input[0].name][1][0] == 3
    with pytest.raises(OptionError, match="max_units"):
        trt_export.EngineShapes(max_units=0)


def test_dry_run_writes_the_prepared_graphs_and_plan(tmp_path, capsys):
    output = tmp_path / "dyle-trt"
    code = main(["export", "--trt", "--bundle", str(ENGINES / "dyle"), "--output", str(output), "--dry-run",
                 "--max-units", "16", "--dim", "snippets=4096"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "locsum::SnippetMarginalize" in printed and "int8 weight-only matmuls" in printed
    plan = trt_export.load_plan(output)
    assert {g.name for g in plan.graphs} == {"encoder", "decoder", "extractor"}
    assert sorted(p.name for p in output.iterdir()) == ["decoder.trt.onnx", "encoder.trt.onnx",
                                                        "extractor.trt.onnx", "plan.json"]
    extractor = next(g for g in plan.graphs if g.name == "extractor")
    assert extractor.profile["separators"][2] == [4096]
    decoder = next(g for g in plan.graphs if g.name == "decoder")
    assert decoder.profile["unit_mask"][2] == [1, 16] and decoder.top_tokens == 2 * 4 + trt_export.TOP_SPARE
    assert plan.precision == "fp32"
    half = tmp_path / "dyle-trt-fp16"
    assert main(["export", "--trt", "--fp16", "--bundle", str(ENGINES / "dyle"), "--output", str(half),
                 "--dry-run"]) == 0
    assert trt_export.load_plan(half).precision == "fp16"
    inputs = {i.name: i.type.tensor_type.elem_type for i in onnx.load(str(half / "decoder.trt.onnx")).graph.input}
    assert inputs["cross_key.0"] == inputs["past_key.0"] == onnx.TensorProto.FLOAT16


def test_without_tensorrt_the_build_fails_cleanly(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)  # as on a machine without TensorRT
    output = tmp_path / "engines"
    with pytest.raises(BackendUnavailableError, match="--dry-run"):
        trt_export.build_engines(ENGINES / "pagesum", output)
    assert main(["export", "--trt", "--bundle", str(ENGINES / "pagesum"), "--output", str(output)]) == 2
    assert "TensorRT cannot be loaded" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no output, no staging directory


def test_export_options_are_checked(tmp_path, capsys):
    assert main(["export", "--trt", "--output", str(tmp_path / "x")]) == 2
    assert "--bundle" in capsys.readouterr().err
    assert main(["export", "--fp16", "--checkpoint", "c", "--output", str(tmp_path / "y")]) == 2
    assert "add --trt" in capsys.readouterr().err
    assert main(["export", "--trt", "--bundle", str(ENGINES / "pagesum"), "--dim", "units"]) == 2
    assert "NAME=MAX" in capsys.readouterr().err


def engine_manifest(**changes) -> Manifest:
    manifest = Bundle.load(ENGINES / "pagesum").manifest
    files = {**manifest.files, "decoder.plan": "0" * 64, "encoder.plan": "1" * 64}
    record = {"version": "10.13.0", "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
              "precision": "fp32", "plans": {"decoder": "decoder.plan", "encoder": "encoder.plan"},
              "profiles": {"decoder": {}, "encoder": {}}}
    return Manifest(**{**asdict(manifest), "files": files, "tensorrt": {**record, **changes}})


def test_plans_run_only_where_they_were_built():
    manifest = engine_manifest()
    assert Manifest.from_json(manifest.to_json(), Path("manifest.json")) == manifest
    check_engine_host(manifest, "10.13.0", "9.0")
    with pytest.raises(BundleVersionError, match="compute capability 9.0.*compute capability 8.0"):
        check_engine_host(manifest, "10.13.0", "8.0")
    with pytest.raises(BundleVersionError, match="TensorRT 10.13.0.*TensorRT 10.9.0"):
        check_engine_host(manifest, "10.9.0", "9.0")
    with pytest.raises(BundleError, match="no TensorRT engines"):
        check_engine_host(replace(manifest, tensorrt={}), "10.13.0", "9.0")


@pytest.mark.parametrize("changes, message", [
    ({"plans": {"decoder": "decoder.plan", "encoder": "missing.plan"}}, "not a checksummed file"),
    ({"plans": {"decoder": "decoder.plan"}}, "every graph"),
    ({"precision": "int4"}, "precision"),
    ({"gpu": 7}, "gpu"),
])
def test_a_damaged_engine_record_is_refused(changes, message):
    text = json.loads(engine_manifest().to_json())
    text["tensorrt"].update(changes)
    with pytest.raises(BundleIntegrityError, match=message):
        Manifest.from_json(json.dumps(text), Path("manifest.json"))


def bundle_with_engines(tmp_path: Path) -> Path:
    """The shipped PageSum bundle with (stand-in) plans and the record `locsum export --trt` writes."""
    target = tmp_path / "default-trt"
    shutil.copytree(ENGINES / "pagesum", target)
    (target / "decoder.plan").write_bytes(b"decoder plan")
    (target / "encoder.plan").write_bytes(b"encoder plan")
    manifest = engine_manifest()
    write_manifest(target, manifest)
    return target


def test_tensorrt_backend_without_tensorrt_is_a_typed_error(tmp_path, monkeypatch):
    import sys
    import types

    from locsum_sdk.backends.tensorrt import TensorRTBackend

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    bundle = bundle_with_engines(tmp_path)
    with pytest.raises(BackendUnavailableError, match="pip install 'locsum\\[gpu\\]'"):
        Summarizer.from_pretrained(bundle, backend="tensorrt")
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))  # TensorRT, but a bundle without plans
    with pytest.raises(BundleError, match="no TensorRT engines; build them"):
        TensorRTBackend(Bundle.load(ENGINES / "pagesum"))


def test_auto_falls_back_to_onnxruntime_where_the_engines_cannot_run(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)
    bundle = bundle_with_engines(tmp_path)
    summarizer = Summarizer.from_pretrained(bundle)
    assert summarizer.backend.name == "onnxruntime"
    assert "instead of its TensorRT engines" in caplog.text
    assert summarizer.summarize(TEXT, max_length=8, min_length=0, num_beams=1).text


def test_an_input_over_the_profile_is_refused_by_name():
    from locsum_sdk.backends.tensorrt import check_profile
    from locsum_sdk.errors import InputTooLongError

    profile = [[1, 1], [4, 512], [8, 1024]]
    check_profile("encoder", "input_ids", (8, 1024), profile)
    with pytest.raises(InputTooLongError, match="axis 0 between 1 and 8; this input needs 9.*--max-units"):
        check_profile("encoder", "input_ids", (9, 100), profile)


def test_cuda_device_needs_onnxruntime_gpu():
    """This machine's onnxruntime has no CUDA execution provider: asking for the GPU is a typed error, "auto"
    runs on the CPU, and the backends that cannot run on a device refuse it."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed here")
    with pytest.raises(BackendUnavailableError, match="onnxruntime-gpu"):
        Summarizer.from_pretrained(ENGINES / "pagesum", device="cuda")
    assert Summarizer.from_pretrained(ENGINES / "pagesum").backend.device == "cpu"
    with pytest.raises(OptionError, match="device"):
        Summarizer.from_pretrained(ENGINES / "pagesum", device="tpu")
    with pytest.raises(OptionError, match="TensorRT runs on the GPU"):
        Summarizer.from_pretrained(ENGINES / "pagesum", backend="tensorrt", device="cpu")


def encode_and_step(directory: Path, bundle: Bundle, batch, steps: int = 3) -> list[np.ndarray]:
    """The graphs in `directory` (named as the bundle's) run raw on ONNX Runtime: every unit encoded into the
    grid, then `steps` greedy steps of one beam; each step's log-probabilities. Buffers take each graph's own
    float types, so float16 state runs as it would on TensorRT."""
    import onnxruntime as ort

    from locsum_sdk import constants as C
    from locsum_sdk import kinds
    from locsum_sdk.backends.base import BeamSlots

    files = {graph: spec["file"] for graph, spec in bundle.manifest.graphs.items()}
    encoder, decoder = (ort.InferenceSession(str(directory / files[g]), providers=["CPUExecutionProvider"])
                        for g in ("encoder", "decoder"))
    types = {t.name: np.float16 if t.type == "tensor(float16)" else None
             for t in [*encoder.get_outputs(), *decoder.get_inputs()]}
    layout, config = kinds.get(bundle.manifest.kind).layout, bundle.manifest.model
    shape = step_shape(config)
    heads, dim, length, rows = shape.cache_heads, shape.head_dim, batch.input_ids.shape[1], batch.batch * batch.width
    cross = {}
    for i in range(shape.layers):
        cross[C.cross_key(i)] = np.zeros((rows, heads, dim, length), types[C.cross_key(i)] or np.float32)
        cross[C.cross_value(i)] = np.zeros((rows, heads, length, dim), types[C.cross_value(i)] or np.float32)
    for first, end, row in layout.encoder_runs(batch, 2):
        values = encoder.run(None, {k: np.ascontiguousarray(v) for k, v in
                                    layout.encoder_inputs(batch, first, end).items()})
        for output, value in zip(encoder.get_outputs(), values):
            if output.name in cross:
                cross[output.name][row : row + end - first] = value
    slots = BeamSlots(batch.batch, 1)
    caches = {}
    for i, groups in enumerate(layout.cache_groups(batch.batch, batch.width, shape)):
        for name in (C.past_key(i), C.past_value(i)):
            caches[name] = np.zeros((groups, heads, 1, slots.capacity, dim), types[name] or np.float32)
    tokens, out = np.full((batch.batch, 1), config["decoder_start_token_id"], np.int64), []
    declared = {i.name for i in decoder.get_inputs()}
    for _ in range(steps):
        slots.advance(None)
        feeds = {C.INPUT_IDS: tokens, C.POSITION: np.array([slots.position], np.int64), C.CACHE_SLOTS: slots.slots,
                 **{name: value for name, value in layout.decoder_inputs(batch).items() if name in declared},
                 **cross, **caches}
        values = dict(zip([o.name for o in decoder.get_outputs()], decoder.run(None, feeds)))
        for i in range(config["decoder_layers"]):
            caches[C.past_key(i)], caches[C.past_value(i)] = values[C.present_key(i)], values[C.present_value(i)]
        out.append(values[C.LOG_PROBS])
        tokens = values[C.LOG_PROBS][:, :, :].argmax(-1)
    return out


def steps_in_both_precisions(bundle: Bundle, batch, tmp_path: Path) -> dict[str, list[np.ndarray]]:
    """`encode_and_step` on the bundle's graphs prepared in float32 and with --fp16 (under tmp_path/fp32, /fp16)."""
    steps = {}
    for precision in ("fp32", "fp16"):
        directory = tmp_path / precision
        directory.mkdir()
        for spec in bundle.manifest.graphs.values():
            trt_export.prepare_graph(bundle.file(spec["file"]), directory / spec["file"], 8, fp16=precision == "fp16")
        steps[precision] = encode_and_step(directory, bundle, batch)
    return steps


def test_float16_graphs_follow_the_float32_ones(tiny_bundle, tmp_path):
    """--fp16 prepares float16 graphs (TensorRT's strongly typed networks take their types): cross keys/values and
    caches float16, log-probabilities float32; with padding units in the grid (fully masked rows), every step's
    log-probabilities stay finite and within 0.05 of the float32 graphs' (the same greedy tokens), every kind."""
    bundle = Bundle.load(tiny_bundle)
    rng = np.random.default_rng(0)
    vocab = bundle.manifest.model["vocab_size"]
    from test_export import random_units

    from locsum_sdk.unit_batch import UnitBatch

    batch = UnitBatch.from_units([random_units(rng, 4, 40, vocab), random_units(rng, 1, 40, vocab)], pad=1)
    steps = steps_in_both_precisions(bundle, batch, tmp_path)
    model = onnx.load(str(tmp_path / "fp16" / bundle.manifest.graphs["decoder"]["file"]))
    types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}
    assert types["cross_key.0"] == types["past_key.0"] == types["present_key.0"] == onnx.TensorProto.FLOAT16
    assert types["log_probs"] == types["unit_weights"] == types["top_log_probs"] == onnx.TensorProto.FLOAT
    for full, half in zip(steps["fp32"], steps["fp16"]):
        assert np.isfinite(half).all()
        assert np.abs(full - half).max() <= 0.05  # log-probabilities near -12; measured at most 0.016
        assert (full.argmax(-1) == half.argmax(-1)).all()
    import onnxruntime as ort

    for spec in bundle.manifest.graphs.values():  # selection graphs too: ONNX Runtime types every node on load
        ort.InferenceSession(str(tmp_path / "fp16" / spec["file"]), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", ["pagesum", "hierencdec", "dyle", "hiersumm"])
def test_float16_graphs_of_the_shipped_bundles(name, tmp_path):
    """The shipped bundles (trained weights; int8 ones through float32 dequantization, then float16) prepared with
    --fp16: on a real two-item grid with padding units, three greedy steps within 0.1 of the float32 graphs'
    log-probabilities (measured: at most 0.004 float32, 0.037 int8), the same tokens."""
    from locsum_sdk.unit_batch import UnitBatch
    from locsum_sdk.units import Unit

    source = Bundle.load(ENGINES / name)
    summarizer = Summarizer.from_pretrained(ENGINES / name)
    special = summarizer.special

    def unit(text: str) -> Unit:
        ids = summarizer.tokenizer.encode_batch([" " + text], add_special_tokens=False)[0].ids
        return Unit(0, 0, 0, text, (special.bos, *ids, special.eos))

    sentences = [s + "." for s in TEXT.split(". ")[:4]]  # a unit each
    items = [[unit(s) for s in sentences], [unit(sentences[0])]]
    batch = UnitBatch.from_units(items, summarizer.special.pad)
    steps = steps_in_both_precisions(source, batch, tmp_path)
    for full, half in zip(steps["fp32"], steps["fp16"]):
        assert np.isfinite(half).all() and np.abs(full - half).max() <= 0.1
        assert (full.argmax(-1) == half.argmax(-1)).all()


@pytest.mark.parametrize("name", ["dyle", "hiersumm"])
def test_float16_selection_graphs_score_as_float32(name, tmp_path, monkeypatch):
    """A selection stage prepared with --fp16 (float32 inputs and scores behind casts, float16 inside), run by
    the ONNX Runtime backend in place of the bundle's, against the same stage prepared in float32: scores within
    1% (+ 1e-3) (measured: DYLE's extractor 0.003 of scores up to 1.9, the ranker 0.0002 of 0.02) and the same
    units chosen, the same summary. Both prepared graphs hold the bundle's int8 weights dequantized, so neither
    runs ONNX Runtime's int8 kernels, whose rounding differs by instruction set (AVX2, AVX-512, VNNI): the bound
    measures float16 alone, on any x86-64 CPU."""
    from locsum_sdk.backends import onnxruntime as ort_backend

    source = Bundle.load(ENGINES / name)
    for precision, fp16 in (("full", False), ("half", True)):
        unpacked_copy(ENGINES / name, tmp_path / precision)
        for graph, spec in source.manifest.graphs.items():
            if graph not in ("encoder", "decoder"):
                trt_export.prepare_graph(source.file(spec["file"]), tmp_path / precision / spec["file"], fp16=fp16)
        write_manifest(tmp_path / precision, source.manifest, packed={})
    scores = []
    run = ort_backend.OnnxRuntimeBackend.run
    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "run",
                        lambda self, graph, inputs: scores.append(run(self, graph, inputs)) or scores[-1])
    query = "What did they decide about the roof?"
    want = Summarizer.from_pretrained(tmp_path / "full").summarize(TEXT, query=query, max_length=24)
    got = Summarizer.from_pretrained(tmp_path / "half").summarize(TEXT, query=query, max_length=24)
    full, halved = scores[: len(scores) // 2], scores[len(scores) // 2 :]
    assert full and len(full) == len(halved)
    for a, b in zip(full, halved):
        for key in a:
            assert np.abs(a[key] - b[key]).max() <= 0.01 * np.abs(a[key]).max() + 1e-3
    assert got.token_ids == want.token_ids and [u.start for u in got.units] == [u.start for u in want.units]


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider' is not in available provider names")
def test_onnxruntime_checks_that_its_session_has_cuda(monkeypatch, caplog):
    """onnxruntime-gpu lists the CUDA provider even where the CUDA or cuDNN libraries are missing, and a session
    then runs on the CPU alone (as the CPU build does here when asked for CUDA): device="cuda" is refused with the
    fix, device="auto" goes on on the CPU with a warning."""
    import onnxruntime as ort

    from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    bundle = Bundle.load(ENGINES / "pagesum")
    with pytest.raises(BackendUnavailableError, match="CUDA provider did not load.*locsum doctor"):
        OnnxRuntimeBackend(bundle, device="cuda")
    backend = OnnxRuntimeBackend(bundle, device="auto")
    assert backend.device == "cpu" and backend.sessions["decoder"].get_providers() == ["CPUExecutionProvider"]
    assert "running on the CPU" in caplog.text


def test_engine_addresses_are_checked():
    """TensorRT takes only 256-byte aligned addresses and says so by returning False: both become a BackendError
    naming the tensor, never a silent wrong binding."""
    from locsum_sdk.backends.tensorrt import ALIGNMENT, Engine
    from locsum_sdk.errors import BackendError

    class Context:
        def __init__(self, accepts):
            self.accepts, self.bound = accepts, {}

        def set_tensor_address(self, name, pointer):
            self.bound[name] = pointer
            return self.accepts

    engine = object.__new__(Engine)
    engine.graph, engine.context = "encoder", Context(True)
    engine.bind("cross_key.0", 7 * ALIGNMENT)
    assert engine.context.bound == {"cross_key.0": 7 * ALIGNMENT}
    with pytest.raises(BackendError, match="cross_key.0.*aligned to 256"):
        engine.bind("cross_key.0", 7 * ALIGNMENT + 64)
    engine.context = Context(False)
    with pytest.raises(BackendError, match="refused the address of the encoder's cross_key.0"):
        engine.bind("cross_key.0", ALIGNMENT)


def test_dry_run_without_onnx_names_the_extra(tmp_path, capsys, monkeypatch):
    """A `.[cpu]` install has no onnx: the dry run says in one line which extra brings it, and writes nothing."""
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)
    code = main(["export", "--trt", "--dry-run", "--bundle", str(ENGINES / "pagesum"), "--output",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'locsum[gpu]'" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_new_defaults_keep_engines_only_where_their_profiles_hold(tmp_path):
    from locsum_sdk.exporters.defaults import set_defaults

    source = bundle_with_engines(tmp_path)
    copy = set_defaults(source, tmp_path / "copy", {"known_words": True})
    assert copy.manifest.tensorrt == Bundle.load(source).manifest.tensorrt
    assert (copy.path / "decoder.plan").read_bytes() == b"decoder plan"
    with pytest.raises(OptionError, match="build the engines again"):
        set_defaults(source, tmp_path / "paged", {"page_tokens": 256})
    assert not (tmp_path / "paged").exists()
