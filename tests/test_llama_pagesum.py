"""PageSum on a Llama backbone, exported and run: the manifest says which backbone, the decoder keeps PageCombine
as one function node, every step of ONNX Runtime equals torch's (beams reordered, caches grown), generation is
token-exact between them, int8 export runs, and a kind that does not run on a Llama refuses one."""

import json
import random

import numpy as np
import onnx
import pytest
from conftest import document
from test_export import compare_steps, random_units

from locsum_sdk import Summarizer, kinds
from locsum_sdk import constants as C
from locsum_sdk.backends import base
from locsum_sdk.backends import onnxruntime as ort_backend
from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend
from locsum_sdk.backends.torch import TorchBackend
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleError, OptionError
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.modeling.checkpoint import load_checkpoint
from locsum_sdk.unit_batch import UnitBatch


def test_the_manifest_names_the_backbone_and_the_decoder_keeps_page_combine(llama_bundle_dir):
    manifest = json.loads((llama_bundle_dir / C.MANIFEST_FILE).read_text())
    assert manifest["kind"] == "pagesum" and manifest["model"]["backbone"] == "llama"
    assert all(graph["max_abs_diff"] <= 1e-4 for graph in manifest["graphs"].values())
    decoder = onnx.load(str(llama_bundle_dir / C.DECODER_FILE), load_external_data=False)
    assert [f.name for f in decoder.functions] == ["PageCombine"]


@pytest.mark.parametrize("beams", [1, 3])
def test_every_step_matches_torch(llama_bundle_dir, llama_checkpoint_dir, tokenizer, beams, monkeypatch):
    monkeypatch.setattr(base, "CACHE_CHUNK", 5)
    rng = np.random.default_rng(beams)
    vocab = tokenizer.get_vocab_size()
    batch = UnitBatch.from_units([random_units(rng, 4, 40, vocab), random_units(rng, 2, 40, vocab)], pad=1)
    ort_session = OnnxRuntimeBackend(Bundle.load(llama_bundle_dir), threads=1).start(batch, beams, unit_batch_size=2)
    torch_session = TorchBackend(load_checkpoint(llama_checkpoint_dir).model).start(batch, beams, unit_batch_size=3)
    for weights in compare_steps(ort_session, torch_session, rng, vocab, beams, 12):
        assert np.all(weights[1, 2:] == 0)  # the second item's padding pages


@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_matches_torch_token_for_token(llama_bundle_dir, llama_checkpoint_dir, num_beams):
    rng = random.Random(num_beams)
    inputs = [document(rng, 14), [document(rng, 5), document(rng, 7)], document(rng, 3)]
    options = dict(num_beams=num_beams, max_length=12, min_length=4)
    ort = Summarizer.from_pretrained(llama_bundle_dir, threads=1).summarize_batch(inputs, **options)
    ref = Summarizer.from_pretrained(llama_checkpoint_dir, backend="torch").summarize_batch(inputs, **options)
    for a, b in zip(ort, ref):
        assert a.token_ids == b.token_ids and a.kind == "pagesum"
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)


def test_a_cpu_encoder_run_holds_at_most_cpu_run_rows(llama_bundle_dir, monkeypatch):
    """On the CPU the encoder takes its units in runs of like lengths, longest first, each padded to its own longest
    unit and as many units as fill CPU_RUN_ROWS token rows (at least one, at most unit_batch_size); the summary is
    the same whatever the runs."""
    assert [ort_backend.units_per_run(4, n) for n in (512, 400, 128, 2000)] == [2, 2, 4, 1]
    runs = []
    real_encoded = ort_backend.OnnxRuntimeBackend.encoded

    def encoded(backend, inputs):
        runs.append(inputs["input_ids"].shape)
        return real_encoded(backend, inputs)

    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "encoded", encoded)
    text = document(random.Random(5), 40)
    summarizer = Summarizer.from_pretrained(llama_bundle_dir, threads=1, unit_batch_size=8)

    def encoder_runs(rows: int) -> tuple[list[tuple[int, int]], list[int]]:
        monkeypatch.setattr(ort_backend, "CPU_RUN_ROWS", rows)
        runs.clear()
        summary = summarizer.summarize(text, max_length=6)
        return list(runs), summary.token_ids

    units = summarizer.summarize(text, max_length=2).units
    lengths = sorted((len(unit.token_ids) for unit in units), reverse=True)
    pages, length = len(units), lengths[0]
    assert pages >= 5 and lengths[-1] < length  # a shorter last page: its run is padded to it alone
    wide, one, two = encoder_runs(1 << 20), encoder_runs(1), encoder_runs(2 * length + 1)
    assert len(wide[0]) == -(-pages // 8) and len(one[0]) == pages and len(two[0]) <= -(-pages // 2)
    assert [shape[1] for shape in one[0]] == lengths  # longest first, each run as long as its unit
    assert all(units_in * tokens <= 2 * length + 1 for units_in, tokens in two[0])
    assert wide[1] == one[1] == two[1]


def test_int8_export_runs(llama_checkpoint_dir, tmp_path):
    bundle = export_onnx(llama_checkpoint_dir, tmp_path / "int8", quantize="int8")
    assert bundle.manifest.dtype == "int8"
    summary = Summarizer.from_pretrained(bundle.path).summarize("The committee approved the budget. " * 20,
                                                                max_length=8)
    assert summary.token_ids


def test_a_kind_that_does_not_run_on_a_llama_refuses_one(llama_checkpoint_dir):
    config = json.loads((llama_checkpoint_dir / "config.json").read_text())["model"]
    with pytest.raises(BundleError, match="hiersumm model runs on \\['bart'\\]"):
        kinds.get("hiersumm").model_config(config)
    assert kinds.get("pagesum").model_config(config).kv_heads == 2


def test_a_unit_and_its_summary_must_fit_the_positions_together(llama_bundle_dir):
    summarizer = Summarizer.from_pretrained(llama_bundle_dir)
    with pytest.raises(OptionError, match="page_tokens=100 and max_length=29 are over the model's 128 positions"):
        summarizer.options(page_tokens=100, max_length=29)
    assert summarizer.options(page_tokens=100, max_length=28).generation.max_length == 28


def test_units_are_framed_in_the_prompt_with_the_query_after_the_text(llama_bundle_dir):
    summarizer = Summarizer.from_pretrained(llama_bundle_dir)
    special = json.loads((llama_bundle_dir / C.MANIFEST_FILE).read_text())["special_tokens"]
    assert special["unit_tail"] == [7, 8, 9] and special["query_first"] is False
    text = "The board met on Monday. " * 30
    pager = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, summarizer.defaults.units)
    query = pager.query_ids("the budget")
    for unit in pager.pages([text], query):
        assert unit.token_ids[:2] == (5, 6) and unit.token_ids[-3 - len(query) - 2:] == (10, *query, 11, 7, 8, 9)
        assert unit.text_ids == unit.token_ids[2 : -3 - len(query) - 2] and len(unit.token_ids) <= 64
        assert summarizer.tokenizer.decode(list(unit.text_ids)).strip() in text
    assert summarizer.summarize(text, query="the budget", max_length=6).token_ids
