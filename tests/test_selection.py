"""The kind seam's selection stage: a kind with a scoring graph (a ranker, an extractor) chooses the units the
encoder sees, on every backend, without the decoding loop or the other kinds knowing. Shown with a stand-in kind:
PageSum's graphs plus a ranker graph that scores a page by its token count."""

import dataclasses
import json
import random
import shutil

import numpy as np
import onnx
import pytest
from conftest import document, random_pagesum
from onnx import TensorProto, helper

from locsum_sdk import Summarizer, kinds
from locsum_sdk import constants as C
from locsum_sdk.backends.torch import TorchBackend
from locsum_sdk.bundle import Manifest, write_manifest
from locsum_sdk.errors import BackendError, InputError
from locsum_sdk.kinds import GraphIO, Selection, TensorIO, keep_top
from locsum_sdk.units import Unit

KEEP = 2


def ranker_inputs(units, query_ids, options=None):
    length = max(len(u.token_ids) for u in units)
    ids = np.zeros((len(units), length), np.int64)
    mask = np.zeros((len(units), length), np.int64)
    for row, unit in enumerate(units):
        ids[row, : len(unit.token_ids)], mask[row, : len(unit.token_ids)] = unit.token_ids, 1
    return {C.INPUT_IDS: ids, C.ATTENTION_MASK: mask}


RANKER = GraphIO("ranker.onnx",
                 inputs=(TensorIO(C.INPUT_IDS, "int64", {0: "units", 1: "length"}),
                         TensorIO(C.ATTENTION_MASK, "int64", {0: "units", 1: "length"})),
                 outputs=(TensorIO("scores", "float32", {0: "units"}),))


def ranked_kind(ranked: bool = True) -> kinds.Kind:
    pagesum = kinds.get("pagesum")
    return dataclasses.replace(
        pagesum, name="ranked", graphs=lambda model: {**pagesum.graphs(model), "ranker": RANKER},
        selection=Selection("ranker", ranker_inputs, "scores",
                            lambda units, scores, options: keep_top(units, scores, KEEP, ranked)),
    )


def write_ranker(path, fault: str | None = None):
    """scores = tokens per unit (or NaN scores, or one score too many, as a broken graph would return)."""
    nodes = [helper.make_node("Cast", [C.ATTENTION_MASK], ["mask"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["mask", "axes"], ["length"], keepdims=0)]
    if fault == "nan":
        nodes.append(helper.make_node("Div", ["length", "zero"], ["ratio"]))
        nodes.append(helper.make_node("Sub", ["ratio", "ratio"], ["scores"]))
    elif fault == "extra":
        nodes.append(helper.make_node("Concat", ["length", "one"], ["scores"], axis=0))
    else:
        nodes.append(helper.make_node("Identity", ["length"], ["scores"]))
    graph = helper.make_graph(
        nodes, "ranker",
        [helper.make_tensor_value_info(C.INPUT_IDS, TensorProto.INT64, ["units", "length"]),
         helper.make_tensor_value_info(C.ATTENTION_MASK, TensorProto.INT64, ["units", "length"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None])],
        initializer=[helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
                     helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
                     helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture
def ranked_bundle(bundle_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(kinds.REGISTRY, "ranked", ranked_kind())
    path = shutil.copytree(bundle_dir, tmp_path / "ranked")
    write_ranker(path / "ranker.onnx")
    values = json.loads((path / C.MANIFEST_FILE).read_text())
    values["kind"] = "ranked"
    values["graphs"]["ranker"] = {"file": "ranker.onnx", "inputs": RANKER.input_names, "outputs": RANKER.output_names}
    write_manifest(path, Manifest(**values))
    return path


def text(pages: int) -> str:
    rng = random.Random(3)
    return "\n\n".join(document(rng, rng.randint(2, 9)) for _ in range(pages))


def test_the_selection_stage_keeps_the_best_scored_units_best_first(ranked_bundle):
    summarizer = Summarizer.from_pretrained(ranked_bundle, threads=1, unit_batch_size=2)
    options = summarizer.options(policy="discourse", page_tokens=64, max_length=12)
    every = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options.units, 10**6)([text(6)], None)
    summary = summarizer.summarize(text(6), options=options)
    assert len(every) > KEEP and len(summary.units) == KEEP and summary.kind == "ranked"
    lengths = sorted((len(u.token_ids) for u in every), reverse=True)[:KEEP]
    assert [u.score for u in summary.units] == [float(n) for n in lengths]  # the ranker's scores, best first
    assert [len(u.token_ids) for u in summary.units] == lengths and summary.unit_weights.shape[1] == KEEP
    assert summary.to_dict()["units"][0]["score"] == lengths[0]


@pytest.mark.parametrize("units", [[], "text", [("not", "a unit")], None])
def test_unit_scores_refuses_what_is_not_a_list_of_units(ranked_bundle, units):
    summarizer = Summarizer.from_pretrained(ranked_bundle, threads=1)
    with pytest.raises(InputError, match="non-empty list of units"):
        summarizer.unit_scores(units, None, summarizer.paging)


def test_a_kind_can_run_its_scoring_graph_over_chunks_of_its_own(ranked_bundle, monkeypatch):
    """An extractor reads consecutive units packed into chunks: runs of the kind's choosing, scored in order."""
    seen = []

    def chunks(units, query_ids, options, size):
        runs = [(first, min(first + 3, len(units))) for first in range(0, len(units), 3)]
        seen.append(runs)
        return runs

    monkeypatch.setitem(kinds.REGISTRY, "ranked", dataclasses.replace(
        ranked_kind(), selection=dataclasses.replace(ranked_kind().selection, runs=chunks)))
    summarizer = Summarizer.from_pretrained(ranked_bundle, threads=1, unit_batch_size=1)
    summary = summarizer.summarize(text(6), policy="discourse", page_tokens=64, max_length=8)
    assert seen and all(end - first <= 3 for first, end in seen[0]) and len(summary.units) == KEEP
    monkeypatch.setitem(kinds.REGISTRY, "ranked", dataclasses.replace(
        ranked_kind(), selection=dataclasses.replace(
            ranked_kind().selection, runs=lambda units, query_ids, options, size: [(0, 1)])))
    with pytest.raises(BackendError, match="scored 1 of"):
        Summarizer.from_pretrained(ranked_bundle, threads=1).summarize(text(6), policy="discourse", page_tokens=64)


def test_kept_units_can_stay_in_input_order():
    units = [Unit(0, i, i + 1, "x", (0, 5, 2), score=None) for i in range(5)]
    kept = keep_top(units, np.array([0.1, 0.9, 0.5, 0.9, 0.0]), 3, ranked=False)
    assert [u.start for u in kept] == [1, 2, 3] and [u.score for u in kept] == [0.9, 0.5, 0.9]
    ranked = keep_top(units, np.array([0.1, 0.9, 0.5, 0.9, 0.0]), 3, ranked=True)
    assert [u.start for u in ranked] == [1, 3, 2]  # ties go to the earlier unit
    assert "score" not in units[0].to_dict()


@pytest.mark.parametrize("fault", ["nan", "extra"])
def test_a_scoring_graph_that_misbehaves_is_a_clear_error(ranked_bundle, fault):
    write_ranker(ranked_bundle / "ranker.onnx", fault)
    write_manifest(ranked_bundle, Manifest(**json.loads((ranked_bundle / C.MANIFEST_FILE).read_text())))
    summarizer = Summarizer.from_pretrained(ranked_bundle, threads=1)
    with pytest.raises(BackendError, match="scores .* for .* units; export the bundle again"):
        summarizer.summarize(text(3), policy="discourse", page_tokens=64, max_length=8)


def test_the_torch_backend_runs_a_selection_graph_by_its_method_name(monkeypatch):
    monkeypatch.setitem(kinds.REGISTRY, "ranked", ranked_kind())
    model = random_pagesum(64)
    backend = TorchBackend(model)
    with pytest.raises(BackendError, match="no 'ranker' graph"):
        backend.run("ranker", {})
    model.kind = "ranked"
    model.ranker = lambda input_ids, attention_mask: (attention_mask.float().sum(1),)
    backend = TorchBackend(model)
    units = [Unit(0, 0, 1, "a", (0, 7, 2)), Unit(0, 1, 2, "b", (0, 7, 7, 7, 2))]
    assert backend.run("ranker", ranker_inputs(units, None))["scores"].tolist() == [3.0, 5.0]
    with pytest.raises(BackendError, match="no 'encoder' graph to run"):
        backend.run("encoder", {})
