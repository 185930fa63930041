"""The exported bundle: files, manifest, graph structure, per-step parity with torch, atomic writes."""

import json

import numpy as np
import onnx
import pytest
from conftest import hf_bart_directory

from locsum_sdk import constants as C
from locsum_sdk import kinds
from locsum_sdk.backends import base
from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend
from locsum_sdk.backends.torch import TorchBackend
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import ExportError
from locsum_sdk.exporters import onnx as exporter
from locsum_sdk.modeling.checkpoint import load_checkpoint
from locsum_sdk.unit_batch import UnitBatch
from locsum_sdk.units import Unit

STEP_ATOL = 1e-4


def test_bundle_files_and_manifest(bundle_dir):
    bundle = Bundle.load(bundle_dir)
    m = bundle.manifest
    # weights.bin: the embedding table the encoder and the decoder share, stored once (`exporters.packing`)
    assert sorted(m.files) == sorted([C.ENCODER_FILE, C.DECODER_FILE, C.TOKENIZER_FILE, C.WEIGHTS_FILE])
    assert m.kind == "pagesum" and m.format_version == C.FORMAT_VERSION
    assert m.special_tokens == {"bos": 0, "pad": 1, "eos": 2, "decoder_start": 2}
    assert m.units["page_tokens"] == 64 and m.generation["max_length"] == 24
    assert m.graphs["decoder"]["inputs"] == kinds.get("pagesum").graphs(m.model)["decoder"].input_names
    assert all(len(digest) == 64 for digest in m.files.values())


def test_decoder_keeps_page_combine_as_one_function_node(bundle_dir):
    model = onnx.load(str(bundle_dir / C.DECODER_FILE))
    onnx.checker.check_model(model, full_check=True)
    assert [f.name for f in model.functions] == ["PageCombine"]
    nodes = [n for n in model.graph.node if n.domain == "locsum"]
    assert [n.op_type for n in nodes] == ["PageCombine"]
    assert {(o.domain, o.version) for o in model.opset_import} >= {("", 17), ("locsum", 1)}
    onnx.checker.check_model(onnx.load(str(bundle_dir / C.ENCODER_FILE)), full_check=True)


def test_cross_attention_keys_are_not_copied_per_beam(bundle_dir):
    """The decoder must not expand, tile or gather the cross keys/values (beams ride on the query axis)."""
    graph = onnx.load(str(bundle_dir / C.DECODER_FILE)).graph
    cross = {C.cross_key(i) for i in range(2)} | {C.cross_value(i) for i in range(2)}
    consumers = [n.op_type for n in graph.node for name in n.input if name in cross]
    assert consumers and set(consumers) == {"MatMul"}


def random_units(rng, count, length, vocab, high=None):
    """`count` units of length//2 to `length` tokens, ids drawn below `high` (default: the vocabulary)."""
    units = []
    for _ in range(count):
        n = int(rng.integers(length // 2, length + 1))
        ids = (0, *rng.integers(5, high or vocab, n - 2).tolist(), 2)
        units.append(Unit(0, 0, 0, "", ids))
    return units


def compare_steps(ort_session, torch_session, rng, vocab: int, beams: int, steps: int) -> list[np.ndarray]:
    """Both sessions decode the same random tokens with the same beam reorders; every step's log-probabilities and
    unit weights agree within STEP_ATOL. Returns ONNX Runtime's unit weights of every step."""
    tokens = np.full((ort_session.batch.batch, beams), 2, dtype=np.int64)
    beam_index, weights = None, []
    for _ in range(steps):
        a_lp, a_w = (x.copy() for x in ort_session.step(tokens, beam_index))
        b_lp, b_w = torch_session.step(tokens, beam_index)
        assert np.abs(a_lp - b_lp).max() <= STEP_ATOL
        assert np.abs(a_w - b_w).max() <= STEP_ATOL
        weights.append(a_w)
        tokens = rng.integers(5, vocab, tokens.shape)
        beam_index = rng.integers(0, beams, tokens.shape)
    return weights


def test_self_attention_cache_is_written_in_place(bundle_dir):
    """Each present cache is one ScatterND on its past input, and nothing else reads the past values: a runtime
    that binds past and present to one buffer writes the new position in place."""
    graph = onnx.load(str(bundle_dir / C.DECODER_FILE)).graph
    producers = {o: n for n in graph.node for o in n.output}
    for i in range(2):
        for past, present in ((C.past_key(i), C.present_key(i)), (C.past_value(i), C.present_value(i))):
            write = producers[present]
            assert write.op_type == "ScatterND" and write.input[0] == past
            assert {n.op_type for n in graph.node if past in n.input} <= {"ScatterND", "Shape"}


@pytest.mark.parametrize("beams", [1, 3])
def test_every_step_matches_torch(bundle_dir, checkpoint_dir, tokenizer, beams, monkeypatch):
    """Per-step log-probabilities and page weights of ORT and torch on the same weights, beams reordered, the
    caches grown twice (5 positions at a time)."""
    monkeypatch.setattr(base, "CACHE_CHUNK", 5)
    rng = np.random.default_rng(beams)
    vocab = tokenizer.get_vocab_size()
    batch = UnitBatch.from_units([random_units(rng, 5, 60, vocab), random_units(rng, 2, 60, vocab)], pad=1)
    ort_session = OnnxRuntimeBackend(Bundle.load(bundle_dir), threads=1).start(batch, beams, unit_batch_size=2)
    torch_session = TorchBackend(load_checkpoint(checkpoint_dir).model).start(batch, beams, unit_batch_size=3)
    for weights in compare_steps(ort_session, torch_session, rng, vocab, beams, 12):
        assert np.all(weights[1, 2:] == 0)  # the second item's padding pages
    assert ort_session.slots.capacity == 15
    for buffer in ort_session.cache.values():  # the bound buffers hold what ORT wrote, position by position
        written = np.abs(buffer).sum(axis=(0, 1, 2, 4))  # (C,)
        assert np.all(written[:12] > 0) and np.all(written[12:] == 0)


def test_export_refuses_to_overwrite_and_is_atomic(tmp_path, checkpoint_dir, monkeypatch):
    target = tmp_path / "bundle"
    target.mkdir()
    with pytest.raises(ExportError, match="already exists"):
        exporter.export_onnx(checkpoint_dir, target)

    def failing_validate(*args, **kwargs):
        raise ExportError("simulated mismatch")

    monkeypatch.setattr(exporter, "compare_with_torch", failing_validate)
    with pytest.raises(ExportError, match="simulated"):
        exporter.export_onnx(checkpoint_dir, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_export_from_hf_bart_directory_through_the_script(tmp_path, tokenizer_file):
    """export/to_onnx.py on a plain HF BART directory: page_conf starts at zero, so pages weigh equally."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("transformers")
    hf_bart_directory(tmp_path / "hf")
    script = Path(__file__).resolve().parents[1] / "export" / "to_onnx.py"
    result = subprocess.run(
        [sys.executable, str(script), "--kind", "pagesum", "--checkpoint", str(tmp_path / "hf"), "--output",
         str(tmp_path / "b"), "--tokenizer", str(tokenizer_file), "--page-tokens", "64"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "page_conf starts at zero" in result.stderr
    manifest = json.loads((tmp_path / "b" / C.MANIFEST_FILE).read_text())
    assert manifest["model"]["d_model"] == 16 and manifest["units"]["page_tokens"] == 64


def test_int8_export_quantizes_linear_layers_and_embedding_tables(tmp_path, checkpoint_dir):
    from locsum_sdk import Summarizer

    bundle = exporter.export_onnx(checkpoint_dir, tmp_path / "int8", quantize="int8")
    assert bundle.manifest.dtype == "int8"
    decoder = onnx.load(str(bundle.path / C.DECODER_FILE))
    ops = {n.op_type for n in decoder.graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops
    tables = [i for i in decoder.graph.initializer if i.name.endswith("shared.weight_quantized")]
    assert tables and all(t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8) for t in tables)
    assert not any(i.name.endswith("shared.weight") for i in decoder.graph.initializer)  # no float32 table left
    assert [f.name for f in decoder.functions] == ["PageCombine"]
    for graph in bundle.manifest.graphs.values():
        assert np.isfinite(graph["int8_max_abs_diff"])
    summary = Summarizer.from_pretrained(bundle.path).summarize("The committee approved the budget. " * 20,
                                                                 max_length=8)
    assert summary.token_ids
    with pytest.raises(ExportError, match="quantize"):
        exporter.export_onnx(checkpoint_dir, tmp_path / "fp8", quantize="fp8")


def test_flags_override_the_checkpoint_one_by_one_and_leftovers_are_removed(tmp_path, checkpoint_dir):
    import os
    import stat
    import subprocess
    import sys

    from locsum_sdk.cli import main

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".bundle.staging-{dead.stdout.strip()}-abc"  # a killed export's staging directory
    stale.mkdir()
    (stale / "encoder.onnx").write_bytes(b"partial")
    live = tmp_path / f".bundle.staging-{os.getpid()}-xyz"  # one of a running export: kept
    live.mkdir()
    assert main(["export", "--checkpoint", str(checkpoint_dir), "--output", str(tmp_path / "bundle"),
                 "--num-beams", "3", "--max-tokens", "5000"]) == 0
    assert not stale.exists() and live.exists()
    manifest = json.loads((tmp_path / "bundle" / C.MANIFEST_FILE).read_text())
    saved = json.loads((checkpoint_dir / "config.json").read_text())
    assert manifest["generation"]["num_beams"] == 3
    assert all(manifest["generation"][k] == v for k, v in saved["generation"].items() if k != "num_beams")
    assert manifest["units"]["page_tokens"] == saved["units"]["page_tokens"]  # kept, not reset to a library default
    assert manifest["limits"]["max_tokens"] == 5000
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "bundle").stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((tmp_path / "bundle" / C.MANIFEST_FILE).stat().st_mode) == 0o666 & ~umask


def test_export_refuses_bad_option_values(tmp_path, checkpoint_dir):
    from locsum_sdk.errors import OptionError

    for options in ({"max_pages": 0}, {"page_tokens": 4096}, {"num_beams": 0}, {"max_tokens": 0}):
        with pytest.raises(OptionError):
            exporter.export_onnx(checkpoint_dir, tmp_path / "b", options=options)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_checkpoint_with_a_weight_that_is_not_finite_is_refused_by_name(tmp_path, checkpoint_dir, value):
    import torch

    from locsum_sdk.modeling.checkpoint import save_checkpoint

    loaded = load_checkpoint(checkpoint_dir)
    name, parameter = next(iter(loaded.model.named_parameters()))
    with torch.no_grad():
        parameter.view(-1)[0] = value
    saved = save_checkpoint(loaded.model, tmp_path / "diverged", loaded.tokenizer_file)
    with pytest.raises(ExportError, match=f"the checkpoint's {name} holds NaN or infinite values"):
        exporter.export_onnx(saved, tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize(("content", "message"), [
    ("object", "class pathlib"),
    ("text", "not a torch file of tensors"),
    ("truncated", "PytorchStreamReader failed"),
])
def test_a_weights_file_that_is_damaged_or_holds_objects_is_refused_in_one_line(tmp_path, content, message):
    import pathlib

    import torch

    from locsum_sdk.errors import BundleError
    from locsum_sdk.modeling.weights import read_state_dict

    path = tmp_path / "pytorch_model.bin"
    if content == "text":
        path.write_text('{"not": "weights"}\n')
    else:
        torch.save({"w": torch.zeros(2), "extra": pathlib.PurePosixPath("x")} if content == "object"
                   else {"w": torch.zeros(64)}, path)
        if content == "truncated":
            path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(BundleError, match=f"{path} cannot be read as weights .*{message}") as refused:
        read_state_dict(path)
    assert "\n" not in str(refused.value) and "weights_only" not in str(refused.value)


def test_validation_scales_its_tolerance_with_the_outputs_magnitude(tmp_path):
    """A deep model's hidden states reach the hundreds, where float32 rounding alone passes 1e-4: the tolerance is
    `atol` times an output's largest magnitude over 1, and an error past that is still refused."""
    import types

    import torch
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "identity.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = torch.tensor([500.0, -20.0])
    spec = types.SimpleNamespace(inputs=["x"], outputs=["y"], example=(x,))
    worst = exporter.compare_with_torch(path, spec, [x.numpy() + np.float32(0.03)], 1e-4)
    assert worst == pytest.approx(0.03, rel=1e-3)
    with pytest.raises(ExportError, match="differs from torch by 6.0.e-02 .*largest magnitude 500"):
        exporter.compare_with_torch(path, spec, [x.numpy() + np.float32(0.06)], 1e-4)
    small = torch.tensor([0.5, -0.2])
    with pytest.raises(ExportError, match="largest magnitude 1"):  # under 1: the plain tolerance
        exporter.compare_with_torch(path, types.SimpleNamespace(inputs=["x"], outputs=["y"], example=(small,)),
                          [small.numpy() + np.float32(2e-4)], 1e-4)
