"""The Hierarchical Transformer end to end: a random checkpoint exported with its ranker, run by ONNX Runtime
through `Summarizer` (ranker selection, best first; the hierarchical encoder with the paragraphs' graph; one
decoder over all kept paragraphs), token-exact with the torch reference; a BART checkpoint converted."""

import json
import random

import numpy as np
import pytest
from conftest import check_selection_memory, check_whole_input_features, document, random_checkpoint, random_model

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.configs.hiersumm import HierSummConfig
from locsum_sdk.errors import OptionError
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.kinds import fixed_runs
from locsum_sdk.kinds.hiersumm import ranker_inputs

UNITS = {"policy": "auto", "paragraph_tokens": 40, "top_paragraphs": 3}


def tiny_checkpoint(tmp_path_factory, tokenizer, tokenizer_file, **config):
    from locsum_sdk.modeling.hiersumm import HierSumm

    config = HierSummConfig(vocab_size=tokenizer.get_vocab_size(), d_model=32, encoder_heads=4, decoder_heads=4,
                            encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=("local", "global", "local"),
                            decoder_layers=2, max_positions=128, ranker_hidden=16, **config)
    model = random_model(lambda: HierSumm(config))
    return random_checkpoint(model, tmp_path_factory.mktemp("hiersumm_ckpt"), tokenizer_file, UNITS)


@pytest.fixture(scope="module")
def hiersumm_checkpoint(tmp_path_factory, tokenizer, tokenizer_file):
    return tiny_checkpoint(tmp_path_factory, tokenizer, tokenizer_file)


@pytest.fixture(scope="module")
def hiersumm_bundle(hiersumm_checkpoint, tmp_path_factory):
    return export_onnx(hiersumm_checkpoint, tmp_path_factory.mktemp("bundles") / "hiersumm").path


def test_the_bundle_has_a_ranker_and_declares_hiersumm(hiersumm_bundle):
    manifest = json.loads((hiersumm_bundle / C.MANIFEST_FILE).read_text())
    assert manifest["kind"] == "hiersumm" and set(manifest["graphs"]) == {"ranker", "encoder", "decoder"}
    assert all(graph["max_abs_diff"] <= 1e-4 for graph in manifest["graphs"].values())


@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_matches_torch_token_for_token(hiersumm_bundle, hiersumm_checkpoint, num_beams):
    rng = random.Random(num_beams)
    inputs = [document(rng, 14), [document(rng, 5), document(rng, 7)], document(rng, 3)]
    queries = ["What was decided?", None, "budget"]
    options = dict(num_beams=num_beams, max_length=12, length_normalization="gnmt", length_penalty=0.4)
    ort = Summarizer.from_pretrained(hiersumm_bundle, threads=1).summarize_batch(inputs, queries, **options)
    ref = Summarizer.from_pretrained(hiersumm_checkpoint, backend="torch").summarize_batch(inputs, queries, **options)
    for a, b in zip(ort, ref):
        assert a.token_ids == b.token_ids and a.kind == "hiersumm"
        assert [(u.document, u.start) for u in a.units] == [(u.document, u.start) for u in b.units]
        np.testing.assert_allclose([u.score for u in a.units], [u.score for u in b.units], atol=1e-5)
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)
        assert len(a.units) <= UNITS["top_paragraphs"]
        assert [u.score for u in a.units] == sorted((u.score for u in a.units), reverse=True)  # best first
        np.testing.assert_allclose(a.unit_weights.sum(axis=1), 1.0, atol=1e-4)


def test_a_ranker_reading_tfidf_scores_the_same_run_by_run_and_in_onnxruntime(tmp_path_factory, tokenizer,
                                                                              tokenizer_file):
    checkpoint = tiny_checkpoint(tmp_path_factory, tokenizer, tokenizer_file, ranker_tfidf=True)
    bundle = export_onnx(checkpoint, tmp_path_factory.mktemp("bundles") / "hiersumm-tfidf").path
    assert "tfidf" in json.loads((bundle / C.MANIFEST_FILE).read_text())["graphs"]["ranker"]["inputs"]
    check_whole_input_features(bundle, checkpoint, "\n\n".join(document(random.Random(i), 3) for i in range(9)),
                               "the budget")


def test_more_top_paragraphs_than_paragraph_ranks_is_refused(hiersumm_bundle):
    summarizer = Summarizer.from_pretrained(hiersumm_bundle)
    with pytest.raises(OptionError, match="top_paragraphs=129 is over the model's 128 paragraph ranks"):
        summarizer.summarize("The board met.", top_paragraphs=129)
    assert summarizer.options(top_paragraphs=128).units.top_paragraphs == 128


def test_the_ranker_pass_is_held_to_the_memory_limit(hiersumm_bundle):
    text = "\n\n".join(document(random.Random(i), 3) for i in range(24))
    check_selection_memory(hiersumm_bundle, text, fixed_runs, ranker_inputs, "ranker")


def test_a_bart_checkpoint_converts_with_its_token_embeddings(checkpoint_dir, tmp_path):
    bundle = export_onnx(checkpoint_dir, tmp_path / "converted", kind="hiersumm", options={"paragraph_tokens": 48})
    summary = Summarizer.from_pretrained(bundle.path).summarize(document(random.Random(1), 20), max_length=6)
    assert summary.kind == "hiersumm" and 1 <= len(summary.units) <= 24
