"""A bundle's graphs store every weight once: shared initializers in weights.bin, int8 LM heads tied to their
embedding tables; what the graphs compute is unchanged (packing) or within the int8 rounding (the tie)."""

import hashlib
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import unpacked_copy
from onnx import TensorProto, helper, numpy_helper

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleError, ExportError
from locsum_sdk.exporters import onnx as exporter
from locsum_sdk.exporters import packing

ENGINES = Path(__file__).resolve().parent.parent / "engines"


def held_bytes(directory: Path, files: list[str]) -> dict[str, int]:
    """sha256 of every initializer of `files` of at least SHARED_MIN_BYTES -> how many graphs hold it."""
    count: dict[str, int] = {}
    for file in files:
        for init in onnx.load(str(directory / file)).graph.initializer:  # external data read back in
            if len(init.raw_data) >= packing.SHARED_MIN_BYTES:
                digest = hashlib.sha256(init.raw_data).hexdigest()
                count[digest] = count.get(digest, 0) + 1
    return count


def stored_inline(directory: Path, file: str) -> set[str]:
    model = onnx.load(str(directory / file), load_external_data=False)
    return {hashlib.sha256(i.raw_data).hexdigest() for i in model.graph.initializer if i.raw_data}


def test_a_weight_two_graphs_hold_is_stored_once(bundle_dir):
    files = [C.ENCODER_FILE, C.DECODER_FILE]
    shared = {digest for digest, holders in held_bytes(bundle_dir, files).items() if holders > 1}
    assert shared  # the embedding table
    for file in files:
        assert not shared & stored_inline(bundle_dir, file)
    weights = (bundle_dir / C.WEIGHTS_FILE).read_bytes()
    for file in files:
        for init in onnx.load(str(bundle_dir / file), load_external_data=False).graph.initializer:
            if init.data_location == TensorProto.EXTERNAL:
                entry = {e.key: e.value for e in init.external_data}
                assert entry["location"] == C.WEIGHTS_FILE and int(entry["offset"]) % packing.ALIGNMENT == 0
                assert int(entry["offset"]) + int(entry["length"]) <= len(weights)


def test_packing_computes_what_the_graphs_computed(tmp_path):
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.normal(size=(64, 32)).astype(np.float32), "table")
    own = numpy_helper.from_array(rng.normal(size=(32, 32)).astype(np.float32), "own")
    for name, extra in (("a.onnx", False), ("b.onnx", True)):
        nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"])]
        nodes.append(helper.make_node("MatMul", ["rows", "own"], ["out"]) if extra
                     else helper.make_node("Identity", ["rows"], ["out"]))
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 32])],
                                  [table, own] if extra else [table])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / name))
    ids = {"ids": np.array([3, 0, 63])}
    before = {f: ort.InferenceSession(str(tmp_path / f)).run(None, ids)[0] for f in ("a.onnx", "b.onnx")}
    assert sorted(packing.pack(tmp_path, ["a.onnx", "b.onnx"])) == ["a.onnx", "b.onnx"]
    assert (tmp_path / C.WEIGHTS_FILE).stat().st_size == 64 * 32 * 4  # the table once; `own` stays in b.onnx
    for file, expected in before.items():
        np.testing.assert_array_equal(ort.InferenceSession(str(tmp_path / file)).run(None, ids)[0], expected)
    assert packing.pack(tmp_path, ["a.onnx"]) == []  # nothing two graphs share: nothing written


def test_a_graph_with_onnx_runtimes_own_norm_is_packed_and_its_moved_weights_checked(tmp_path):
    """The fused step's SimplifiedLayerNormalization (default domain, no onnx schema): packed beside a graph sharing
    its weight, it computes as before; a moved weight pointing past the end of weights.bin is refused."""
    import onnxruntime as ort

    weight = numpy_helper.from_array(np.linspace(0.5, 1.5, 2048, dtype=np.float32), "weight")
    norm = helper.make_node("SimplifiedLayerNormalization", ["x", "weight"], ["out"], axis=-1, epsilon=1e-5)
    scale = helper.make_node("Mul", ["x", "weight"], ["out"])
    for name, node in (("norm.onnx", norm), ("scale.onnx", scale)):
        graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2048])],
                                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 2048])], [weight])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / name))
    x = {"x": np.random.default_rng(0).normal(size=(2, 2048)).astype(np.float32)}
    before = ort.InferenceSession(str(tmp_path / "norm.onnx")).run(None, x)[0]
    assert packing.pack(tmp_path, ["norm.onnx", "scale.onnx"]) == ["norm.onnx", "scale.onnx"]
    np.testing.assert_array_equal(ort.InferenceSession(str(tmp_path / "norm.onnx")).run(None, x)[0], before)
    with open(tmp_path / C.WEIGHTS_FILE, "r+b") as stored:
        stored.truncate(1024)
    with pytest.raises(ExportError, match="points outside"):
        packing.check_packed(tmp_path / "norm.onnx")


def test_the_int8_lm_head_reads_the_embedding_table(tmp_path, checkpoint_dir, monkeypatch):
    tied = exporter.export_onnx(checkpoint_dir, tmp_path / "tied", quantize="int8")
    decoder = onnx.load(str(tied.path / C.DECODER_FILE))
    initializers = {i.name: i for i in decoder.graph.initializer}
    table_shape = [list(i.dims) for i in initializers.values() if i.name.endswith("shared.weight_quantized")][0]
    assert not any(list(i.dims) == table_shape[::-1] for i in initializers.values())  # no transposed copy left
    producer = {out: n for n in decoder.graph.node for out in n.output}
    heads = [n for n in decoder.graph.node if n.op_type == "MatMulInteger" and n.input[1] not in initializers]
    assert len(heads) == 1 and producer[heads[0].input[1]].op_type == "Transpose"
    monkeypatch.setattr(exporter, "tie_lm_head", lambda model: 0)
    untied = exporter.export_onnx(checkpoint_dir, tmp_path / "untied", quantize="int8")
    size = lambda b: sum(p.stat().st_size for p in b.path.iterdir())  # noqa: E731
    assert size(untied) - size(tied) >= np.prod(table_shape)  # one int8 table fewer
    # both round the same float matrix, the tie onto a grid as fine or finer: as close to torch as the copy was
    worst_tied = tied.manifest.graphs["decoder"]["int8_max_abs_diff"]
    worst_untied = untied.manifest.graphs["decoder"]["int8_max_abs_diff"]
    assert worst_tied <= 2 * worst_untied + 1e-3


def test_compact_ties_and_packs_a_bundle_and_keeps_its_card(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source, unpacked = tmp_path / "source", tmp_path / "unpacked"
    shutil.copytree(ENGINES / "pagesum", source)
    unpacked_copy(source, unpacked)  # the shipped bundle as a plain export writes it
    assert packing.compact(unpacked, source, force=True) == []  # already tied: nothing more to tie
    bundle = Bundle.load(source)
    assert (source / "README.md").is_file() and (source / "evaluation.json").is_file()
    assert set(bundle.manifest.packed) == set(Bundle.load(unpacked).manifest.files)
    assert all(name.endswith(".xz") for name in bundle.manifest.files)  # every file it reads, packed
    assert not {"README.md", "evaluation.json"} & set(bundle.manifest.files)  # a card is written after its bundle
    assert sum(p.stat().st_size for p in source.glob("*.xz")) < 0.8 * sum(p.stat().st_size for p in unpacked.iterdir())
    text = "The board met on Monday. It approved the budget for the new library roof and the ramp."
    a, b = (Summarizer.from_pretrained(path).summarize(text, max_length=24) for path in (unpacked, source))
    assert a.token_ids == b.token_ids
    with pytest.raises(ExportError, match="exists"):
        packing.compact(source, source)


def test_a_cache_that_cannot_be_written_is_a_bundle_error_naming_the_fix(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    with pytest.raises(BundleError, match="XDG_CACHE_HOME"):
        Bundle.load(ENGINES / "pagesum")
