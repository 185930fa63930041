"""A HierEncDec bundle on a pretrained GGUF rebuilt as its torch module (`exporters.rebuild`) and exported again in
another weight form, and `train.release --bundle ... --quantize blocks`, which releases it so.

Tolerance: an adapter rebuilt from the int8 graph is its int8 codes times their scale, so it is within half a step
(the largest magnitude / 127, per tensor) of the float32 adapter the bundle was exported from; one rebuilt from a
fused step is the float32 values that step holds, exactly."""

import dataclasses
import json

import numpy as np
import onnx
import pytest
import torch
from conftest import SHARED_DATA
from gguf_files import adapted_llm, write_gguf
from onnx import numpy_helper

from locsum_sdk import Summarizer, blockwise
from locsum_sdk import constants as C
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleError
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.exporters.rebuild import PROJECTIONS, bundle_module, export_again, fused_adapters
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.fused_llama import ADAPTERS, adapter_record

TEXT = "The roof leaks. The budget is short. The board meets on Monday. " * 12
OPTIONS = {"page_tokens": 200, "max_tokens": 800, "truncate": True, "max_length": 10, "min_length": 10,
           "whole_sentences": False}


@pytest.fixture(scope="module")
def tuned(tokenizer_file, tmp_path_factory):
    """A HierEncDec fine-tuned from a tiny GGUF (random adapters) and its int8 bundle, whose base is assembled from
    the file: (the module, the bundle). Built once for the module; the tests read it and write elsewhere."""
    work = tmp_path_factory.mktemp("tuned")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(work / "cache"))
        path, _, _ = write_gguf(work / "base.gguf", tokenizer_file, d_model=256, ffn_dim=512, max_positions=512)
        loaded, net = adapted_llm(path, std=0.05)
        saved = save_checkpoint(net, work / "tuned", loaded.tokenizer_file)
        bundle = export_onnx(saved, work / "int8", quantize="int8", model_files=[path], options=OPTIONS)
        yield net.eval(), bundle


def test_an_int8_bundle_is_rebuilt_with_its_base_and_its_adapters(tuned):
    net, bundle = tuned
    rebuilt = bundle_module(bundle)
    original, again = net.state_dict(), rebuilt.state_dict()
    assert set(original) == set(again)
    for name, value in original.items():
        if "lora_" not in name:
            assert torch.equal(value, again[name]), name  # the base, from the same file
    for layer, other in zip(net.model.layers, rebuilt.model.layers):
        for name in PROJECTIONS:
            first, second = layer.get_submodule(name), other.get_submodule(name)
            for product in (lambda lin: lin.lora_a, lambda lin: lin.lora_b * lin.scaling):
                want, got = product(first).detach(), product(second).detach()
                assert (got - want).abs().max() <= want.abs().max() / 127 / 2 * 1.001, name


def test_a_bundle_exported_again_with_the_fused_step_keeps_its_files_and_options(tuned, tmp_path):
    _, bundle = tuned
    again = export_again(bundle, tmp_path / "blocks", "blocks", {"max_length": 12})
    manifest = again.manifest
    assert manifest.dtype == "blocks" and manifest.kind == "hierencdec"
    assert manifest.generation == {**bundle.manifest.generation, "max_length": 12}
    assert manifest.units == bundle.manifest.units and manifest.limits == bundle.manifest.limits
    assert [s["file"] for s in manifest.base["sources"]] == [s["file"] for s in bundle.manifest.base["sources"]]
    assert any(t.get("block") == "codes" for t in manifest.base["tensors"])  # the file's blocks, by recipe
    assert again.file(C.TOKENIZER_FILE).read_bytes() == bundle.file(C.TOKENIZER_FILE).read_bytes()
    summary = Summarizer.from_pretrained(again.path, threads=1).summarize(TEXT)
    assert 10 <= len(summary.token_ids) <= 12


def test_a_fused_step_gives_back_the_adapters_it_was_written_with(tuned, tmp_path):
    """int8 -> blocks -> the module again: the base and each adapter's B s the blocks bundle was exported from,
    exactly, and its A as the step runs it (8-bit blocks: within half a step of each block's largest value, and
    the same again through a second blocks bundle); and from it float32 graphs (what TensorRT's engines are built
    from), which summarize."""
    _, bundle = tuned
    first = bundle_module(bundle)
    blocks = export_again(bundle, tmp_path / "blocks", "blocks")
    again = bundle_module(blocks)
    for name, value in first.state_dict().items():
        got = again.state_dict()[name]
        if not name.endswith("lora_a"):
            assert torch.equal(value, got), name
            continue
        step = value.reshape(value.shape[0], -1, 32).abs().amax(-1, keepdim=True) / 127
        assert ((got - value).reshape(step.shape[0], -1, 32).abs() <= step / 2 * 1.001).all(), name
    twice = bundle_module(export_again(blocks, tmp_path / "blocks-again", "blocks"))
    for name, value in again.state_dict().items():
        assert torch.equal(value, twice.state_dict()[name]), name
    plain = export_again(blocks, tmp_path / "float32", None)
    assert plain.manifest.dtype == "float32" and plain.manifest.generation == blocks.manifest.generation
    summary = Summarizer.from_pretrained(plain.path, threads=1).summarize(TEXT)
    assert 0 < len(summary.token_ids) <= 10


def test_a_fused_step_written_before_a_was_held_in_8_bits_gives_back_the_same_adapters(tuned, tmp_path):
    """A step written before A was held in 8-bit blocks names only `lora_a`, its A^T in float32: read back as those
    values, the same adapters as the 8-bit record they were written from."""
    net, bundle = tuned
    graph = onnx.load(str(export_again(bundle, tmp_path / "blocks", "blocks").file(C.DECODER_FILE)))
    modules = [f"layers.{i}.{name}" for i in range(len(net.model.layers)) for name in PROJECTIONS]
    shapes = {module: (linear.out_features, linear.in_features)
              for module in modules for linear in [net.model.get_submodule(module)]}
    rank = net.model.get_submodule(modules[0]).lora_a.shape[0]
    written = fused_adapters(graph, rank, shapes)
    values = {tensor.name: tensor for tensor in graph.graph.initializer}
    earlier = []
    for record in adapter_record(graph):
        columns = shapes[record["modules"][0]][1]
        a = blockwise.from_forms(numpy_helper.to_array(values[record["lora_a"]]),
                                 numpy_helper.to_array(values[record["lora_a_scales"]]), columns, 8).values()
        name = f"{record['lora_a']}_float"
        graph.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(a.T), name))
        earlier.append({"modules": record["modules"], "lora_a": name, "lora_b": record["lora_b"]})
    props = {prop.key: prop for prop in graph.metadata_props}
    props[ADAPTERS].value = json.dumps(earlier)
    read = fused_adapters(graph, rank, shapes)
    assert read.keys() == written.keys() == set(modules)
    for module, (down, up) in written.items():
        np.testing.assert_array_equal(read[module][0], down)
        np.testing.assert_array_equal(read[module][1], up)


@pytest.mark.parametrize(("kind", "bits"), [("F32", 4), ("Q6_K", 8)])
def test_a_fused_step_gives_back_the_weights_its_merged_adapters_run_on(kind, bits, tokenizer_file, tmp_path,
                                                                         monkeypatch):
    """A file whose down projections have no block form (float32: 4-bit blocks quantized at export; Q6_K: 8-bit
    ones, nearer its codes): their adapters are merged into those blocks (no product beside them), the file's Q4_1
    projections keep theirs beside; rebuilt, each down projection is the merged blocks' values with a zero adapter
    (what the step runs), every other module as exported."""
    from locsum_sdk.modeling.fused_llama import merged_weight

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path, _, _ = write_gguf(tmp_path / "base.gguf", tokenizer_file, d_model=256, ffn_dim=512, max_positions=512,
                            projections={"ffn_down": kind})
    loaded, net = adapted_llm(path, std=0.05)
    saved = save_checkpoint(net, tmp_path / "tuned", loaded.tokenizer_file)
    bundle = export_onnx(saved, tmp_path / "blocks", quantize="blocks", model_files=[path], options=OPTIONS)
    graph = onnx.load(str(bundle.file(C.DECODER_FILE)))
    layers = len(net.model.layers)
    merged = [record for record in adapter_record(graph) if "merged" in record]
    assert [record["modules"] for record in merged] == [[f"layers.{i}.mlp.down_proj"] for i in range(layers)]
    assert {part["bits"] for record in merged for part in record["merged"]} == {bits}
    assert sum(node.op_type == "Gemm" for node in graph.graph.node) == 3 * layers  # q/k/v, o and gate/up beside
    rebuilt = bundle_module(bundle)
    for name, module in net.model.named_modules():
        if not name.endswith("_proj"):
            continue
        again = rebuilt.model.get_submodule(name)
        if name.endswith("down_proj"):
            want = torch.from_numpy(merged_weight(module))
            step = (want.reshape(want.shape[0], -1, 32).amax(-1) - want.reshape(want.shape[0], -1, 32).amin(-1)) / 15
            assert ((again.weight - want).reshape(step.shape[0], -1, 32).abs() <= 2.5 * step[..., None]).all()
            assert not again.lora_b.any(), name
        else:
            assert torch.equal(again.weight, module.weight) and torch.equal(again.lora_b, module.lora_b), name
    twice = bundle_module(export_again(bundle, tmp_path / "again", "blocks"))  # its merged blocks found again
    for name, value in rebuilt.state_dict().items():
        assert torch.allclose(twice.state_dict()[name], value, rtol=0, atol=1e-6), name
    summary = Summarizer.from_pretrained(bundle.path, threads=1).summarize(TEXT)
    assert 0 < len(summary.token_ids) <= 10


def test_tensorrt_engines_of_a_fused_bundle_come_from_float32_graphs_of_its_weights(tuned, tmp_path):
    """TensorRT's parser takes no contrib operator: a blocks bundle's engines are planned (a dry run, any machine)
    from float32 graphs exported again from its weights, and `locsum doctor`'s reference bundle likewise; the plan
    names the bundle the user gave."""
    import onnx

    from locsum_sdk.exporters import tensorrt

    _, bundle = tuned
    blocks = export_again(bundle, tmp_path / "blocks", "blocks")
    plan = tensorrt.build_engines(blocks.path, tmp_path / "trt", dry_run=True)
    assert plan.bundle == str(blocks.path) and {graph.name for graph in plan.graphs} == {"encoder", "decoder"}
    for graph in plan.graphs:
        prepared = onnx.load(str(tmp_path / "trt" / graph.prepared), load_external_data=False)
        assert not {node.domain for node in prepared.graph.node} & {"com.microsoft"}, graph.name
    reference = tensorrt.prepared_bundle(blocks.path, tmp_path / "reference")
    summary = Summarizer.from_pretrained(reference, threads=1).summarize(TEXT)
    assert 0 < len(summary.token_ids) <= 10


def test_the_doctor_builds_a_fused_bundles_engines_and_their_tokens_are_onnx_runtimes(tuned, tmp_path,
                                                                                       monkeypatch):
    """`locsum doctor` on a blocks bundle (the default's form), over the stand-ins for TensorRT and cuda-python
    (tests/gpu_standin.py): its engines are built with the doctor's profiles and decode the tokens ONNX Runtime
    decodes on the same float32 graphs."""
    import gpu_standin

    _, bundle = tuned
    blocks = export_again(bundle, tmp_path / "blocks", "blocks")
    report = gpu_standin.doctor_report(monkeypatch, [blocks.path])
    status = {c.stage: c.status for c in report.checks}
    assert status["engines:blocks"] == status["tokens:blocks"] == "pass", report.checks


def test_only_an_int8_or_blocks_hierencdec_bundle_is_rebuilt(tuned):
    _, bundle = tuned
    plain = dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest, dtype="float32"))
    with pytest.raises(BundleError, match="only an int8 or blocks HierEncDec bundle"):
        bundle_module(plain)
    carried = dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest, base={}))
    with pytest.raises(BundleError, match="assembled from one pretrained file"):
        bundle_module(carried)


@pytest.mark.skipif(not (SHARED_DATA / "qmsum").is_dir(), reason=f"{SHARED_DATA} (the shared data) is not here")
def test_release_exports_a_bundle_again_with_the_fused_step(tuned, tmp_path, short_qmsum):
    """An earlier release's record (as train.release writes it) beside the int8 bundle; released again with
    --quantize blocks: the fused step ships, set side by side with the int8 graphs on QMSum test, and the int8
    graphs' rows are carried beside its own; that blocks bundle released again so: its step as this version writes
    it, set beside its earlier step ("earlier blocks"), every earlier row carried; and once more over int8 unit rows
    (`--unit-rows 8`, calibrated on the train splits' inputs)."""
    from train.release import EARLIER_MARK
    from train.release import main as release

    _, bundle = tuned
    row = {metric: {"mean": 20.0, "low": 18.0, "high": 22.0} for metric in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    record = {"rouge": {"qmsum": {"locsum (this bundle)": row, "lead": row}},
              "int8": {"rouge1_float32": 20.5, "rouge1_int8": 20.0, "speedup": 1.5, "size_mb": 1.0},
              "parity": {"identical": 2, "examples": 2, "differing": {}},
              "training": {}, "defaults": {}, "about": "fine-tuned briefly."}
    (bundle.path / "evaluation.json").write_text(json.dumps(record))
    args = ["--bundle", str(bundle.path), "--output", str(tmp_path / "released"), "--sets", "qmsum", "--limit", "2",
            "--work", str(tmp_path / "work"), "--min-distinct", "0", "--quantize", "blocks"]
    release(args)
    released = Bundle.load(tmp_path / "released")
    assert released.manifest.dtype == "blocks"
    card = (tmp_path / "released" / "README.md").read_text()
    assert "Released again from the earlier release's int8 bundle" in card and "fused step" in card
    assert f"| locsum (int8 graphs) {EARLIER_MARK} | 20.00 [18.00, 22.00] |" in card
    assert "vs the int8 graphs it was exported again from, on QMSum test" in card and "blocks summarized " in card
    evaluation = json.loads((tmp_path / "released" / "evaluation.json").read_text())
    weights = evaluation["weights"]
    assert weights["before"] == "int8" and weights["after"] == "blocks" and weights["speedup"] > 0
    assert np.isfinite(weights["rouge1_blocks"]) and evaluation["released_from"]["dtype"] == "int8"
    release([*args, "--output", str(tmp_path / "again")])  # stopped and run again: the export and summaries kept
    assert Bundle.load(tmp_path / "again").manifest.files == released.manifest.files
    release(["--bundle", str(tmp_path / "released"), "--output", str(tmp_path / "reformed"), *args[4:]])
    card = (tmp_path / "reformed" / "README.md").read_text()  # a blocks bundle's step, as this version writes it
    assert "Released again from the earlier release's blocks bundle" in card and "A held in 8-bit blocks" in card
    assert "int8 encoder's adapters' up-projections kept in float32" in card
    assert f"| locsum (earlier blocks graphs) {EARLIER_MARK} |" in card
    assert f"| locsum (int8 graphs) {EARLIER_MARK} | 20.00 [18.00, 22.00] |" in card
    assert "vs the earlier blocks graphs it was exported again from, on QMSum test" in card
    weights = json.loads((tmp_path / "reformed" / "evaluation.json").read_text())["weights"]
    assert weights["before"] == "earlier blocks" and weights["after"] == "blocks"
    train = short_qmsum / "qmsum" / "train.jsonl"  # calibration text: the training mix's inputs found in the data
    train.write_text((short_qmsum / "qmsum" / "test.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    release(["--bundle", str(tmp_path / "released"), "--output", str(tmp_path / "rows"), *args[4:], "--unit-rows", "8"])
    assert Bundle.load(tmp_path / "rows").manifest.model["unit_rows"] == 8  # its step over int8 unit rows
    card = (tmp_path / "rows" / "README.md").read_text()
    assert "reading int8 unit rows" in card and "4-bit block over int8 unit rows" in card
    weights = json.loads((tmp_path / "rows" / "evaluation.json").read_text())["weights"]
    assert weights["before"] == "earlier blocks" and weights["after"] == "blocks over int8 unit rows"
    with pytest.raises(SystemExit):
        release(["--checkpoint", str(tmp_path), "--output", str(tmp_path / "x"), "--quantize", "blocks"])
