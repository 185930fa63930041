"""DYLE end to end: a random DYLE checkpoint exported with its extractor, run by ONNX Runtime through `Summarizer`
(extractor selection, per-snippet encoding, marginalized decoding), token-exact with the torch reference; snippets
from sentences and speaker turns; a PageSum checkpoint converted to DYLE."""

import dataclasses
import json
import random

import numpy as np
import pytest
from conftest import (
    check_selection_memory,
    check_whole_input_features,
    document,
    random_checkpoint,
    random_model,
    tiny_config,
)

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.errors import OptionError
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.kinds.dyle import SnippetOptions, extractor_inputs, extractor_runs
from locsum_sdk.units import is_dialogue

UNITS = {"policy": "auto", "snippet_tokens": 40, "top_k": 4, "chunk_tokens": 96}


@pytest.fixture(scope="module")
def dyle_checkpoint(tmp_path_factory, tokenizer, tokenizer_file):
    from locsum_sdk.modeling.dyle import Dyle

    model = random_model(lambda: Dyle(tiny_config(tokenizer.get_vocab_size())))
    return random_checkpoint(model, tmp_path_factory.mktemp("dyle_ckpt"), tokenizer_file, UNITS)


@pytest.fixture(scope="module")
def dyle_bundle(dyle_checkpoint, tmp_path_factory):
    return export_onnx(dyle_checkpoint, tmp_path_factory.mktemp("bundles") / "dyle").path


def meeting(rng: random.Random, turns: int) -> str:
    return "\n".join(f"{rng.choice(['Anna', 'PhD B', 'Grad C'])}: {document(rng, rng.randint(1, 3))}"
                     for _ in range(turns))


def test_the_bundle_has_an_extractor_and_declares_dyle(dyle_bundle):
    manifest = json.loads((dyle_bundle / C.MANIFEST_FILE).read_text())
    assert manifest["kind"] == "dyle" and set(manifest["graphs"]) == {"extractor", "encoder", "decoder"}
    assert manifest["model"]["extractor"]["architecture"] == "bart"
    assert all(graph["max_abs_diff"] <= 1e-4 for graph in manifest["graphs"].values())


@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_matches_torch_token_for_token(dyle_bundle, dyle_checkpoint, num_beams):
    rng = random.Random(num_beams)
    inputs = [meeting(rng, 12), document(rng, 14), meeting(rng, 3)]
    queries = ["What did Anna say?", None, "budget"]
    options = dict(num_beams=num_beams, max_length=12)
    ort = Summarizer.from_pretrained(dyle_bundle, threads=1).summarize_batch(inputs, queries, **options)
    ref = Summarizer.from_pretrained(dyle_checkpoint, backend="torch").summarize_batch(inputs, queries, **options)
    for a, b in zip(ort, ref):
        assert a.token_ids == b.token_ids and a.kind == "dyle"
        assert [(u.start, u.end) for u in a.units] == [(u.start, u.end) for u in b.units]
        np.testing.assert_allclose([u.score for u in a.units], [u.score for u in b.units], atol=1e-4)
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)
        assert len(a.units) <= UNITS["top_k"] and all(u.score is not None for u in a.units)
        assert [u.start for u in a.units] == sorted(u.start for u in a.units)  # kept in input order
        np.testing.assert_allclose(a.unit_weights.sum(axis=1), 1.0, atol=1e-4)


def test_the_kept_snippets_are_the_best_scored(dyle_bundle):
    summarizer = Summarizer.from_pretrained(dyle_bundle, threads=1, unit_batch_size=1)
    text = meeting(random.Random(5), 20)
    options = summarizer.options(top_k=3)
    every = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options.units)([text])
    scores = np.concatenate([summarizer.backend.run("extractor", extractor_inputs(every[a:b], [], options.units))
                             ["scores"] for a, b in extractor_runs(every, [], options.units, 2)])
    summary = summarizer.summarize(text, options=options, max_length=6)
    best = sorted(np.argsort(-scores, kind="stable")[:3])
    assert [u.start for u in summary.units] == [every[i].start for i in best]
    assert [u.score for u in summary.units] == pytest.approx([float(scores[i]) for i in best], abs=1e-6)


def test_snippets_are_turns_of_a_dialogue_and_sentences_of_prose(dyle_bundle):
    summarizer = Summarizer.from_pretrained(dyle_bundle, threads=1)
    dialogue = "Anna: We need a budget. It is late.\nBob: Agreed.\nAnna: Fine then."
    assert is_dialogue(dialogue) and not is_dialogue("The board met. It agreed.\nNothing else.")
    pager = lambda policy: summarizer.kind.pager(  # noqa: E731
        summarizer.tokenizer, summarizer.special, SnippetOptions(policy=policy, snippet_tokens=40))([dialogue])
    turns = ["Anna: We need a budget. It is late.", "Bob: Agreed.", "Anna: Fine then."]
    assert [u.text for u in pager("auto")] == turns
    assert [u.text for u in pager("sentence")][:2] == ["Anna: We need a budget.", "It is late."]
    summary = summarizer.summarize(dialogue, top_k=2, max_length=6)
    assert len(summary.units) == 2 and summary.units[0].to_dict()["score"] == summary.units[0].score


def test_chunks_hold_consecutive_snippets_within_the_budget(dyle_bundle):
    summarizer = Summarizer.from_pretrained(dyle_bundle, threads=1)
    options = summarizer.options(chunk_tokens=50).units
    ids = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options).query_ids("the budget")
    units = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options).pages(
        [document(random.Random(2), 12)], ids)
    runs = extractor_runs(units, ids, options, 2)
    assert runs[0][0] == 0 and runs[-1][1] == len(units) and all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
    inputs = extractor_inputs(units, ids, options)
    assert inputs[C.INPUT_IDS].shape[1] <= 50 and len(inputs["separators"]) == len(units)
    flat = inputs[C.INPUT_IDS].reshape(-1)
    assert np.all(flat[inputs["separators"]] == summarizer.special.eos)
    assert list(inputs[C.INPUT_IDS][0, : len(ids) + 2]) == [summarizer.special.bos, *ids, summarizer.special.eos]


def test_the_extractor_pass_is_held_to_the_memory_limit(dyle_bundle):
    check_selection_memory(dyle_bundle, meeting(random.Random(7), 60), extractor_runs, extractor_inputs, "extractor")


def test_options_that_do_not_fit_the_extractor_are_refused(dyle_bundle):
    summarizer = Summarizer.from_pretrained(dyle_bundle, threads=1)
    with pytest.raises(OptionError, match="chunk_tokens=200 is over the extractor's 128 positions"):
        summarizer.summarize("The board met.", chunk_tokens=200)
    with pytest.raises(OptionError, match="chunk_tokens"):
        summarizer.summarize("The board met.", chunk_tokens=20)  # below snippet_tokens
    with pytest.raises(OptionError, match=r"page_tokens \(taken by hierencdec, pagesum\) belong to other kinds"):
        summarizer.summarize("The board met.", page_tokens=64)


def test_an_extractor_reading_tfidf_scores_the_same_run_by_run_and_in_onnxruntime(tmp_path_factory, tokenizer,
                                                                                 tokenizer_file):
    from locsum_sdk.configs.dyle import DyleConfig, ExtractorConfig
    from locsum_sdk.modeling.dyle import Dyle

    bart = tiny_config(tokenizer.get_vocab_size())
    config = DyleConfig.from_bart(bart, dataclasses.replace(ExtractorConfig.from_bart(bart), tfidf=True))
    model = random_model(lambda: Dyle(config))
    checkpoint = random_checkpoint(model, tmp_path_factory.mktemp("dyle_tfidf_ckpt"), tokenizer_file, UNITS)
    bundle = export_onnx(checkpoint, tmp_path_factory.mktemp("bundles") / "dyle-tfidf").path
    check_whole_input_features(bundle, checkpoint, meeting(random.Random(5), 30), "What did Anna say?")


def test_a_pagesum_checkpoint_converts_to_dyle(checkpoint_dir, tmp_path):
    bundle = export_onnx(checkpoint_dir, tmp_path / "converted", kind="dyle", options={"snippet_tokens": 48})
    summary = Summarizer.from_pretrained(bundle.path).summarize(document(random.Random(1), 30), max_length=6)
    assert summary.kind == "dyle" and len(summary.units) == 25  # equal scores: the first top_k snippets
    assert [u.score for u in summary.units] == [0.0] * 25
    np.testing.assert_allclose(summary.unit_weights, 1 / 25, atol=1e-6)  # equal dynamic weights
