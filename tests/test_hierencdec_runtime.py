"""HierEncDec end to end: exported from a PageSum checkpoint or a plain HF BART directory, run by ONNX Runtime
through `Summarizer`, token-exact with the torch reference on multi-document inputs of uneven lengths, batch > 1."""

import json
import random

import numpy as np
import pytest
from conftest import document, hf_bart_directory

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.exporters.onnx import export_onnx


@pytest.fixture(scope="module")
def hier_bundle(hierencdec_bundle_dir):
    return hierencdec_bundle_dir


@pytest.fixture(scope="module")
def hier_checkpoint(checkpoint_dir, tmp_path_factory):
    """The same weights as a hierencdec checkpoint, for the torch reference backend."""
    from locsum_sdk.modeling.checkpoint import load_checkpoint, save_checkpoint

    loaded = load_checkpoint(checkpoint_dir, kind="hierencdec")
    return save_checkpoint(loaded.model, tmp_path_factory.mktemp("hier_ckpt"), loaded.tokenizer_file,
                           **loaded.settings)


def clusters(seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[document(rng, rng.randint(1, 6)) for _ in range(rng.randint(2, 4))] for _ in range(count)]


def test_the_bundle_declares_hierencdec(hier_bundle):
    manifest = json.loads((hier_bundle / C.MANIFEST_FILE).read_text())
    assert manifest["kind"] == "hierencdec" and manifest["units"]["policy"] == "document"
    assert manifest["graphs"]["encoder"]["inputs"] == [C.INPUT_IDS, C.ATTENTION_MASK, C.UNIT_MASK]
    assert manifest["graphs"]["decoder"]["max_abs_diff"] <= 1e-4


@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_matches_torch_token_for_token(hier_bundle, hier_checkpoint, num_beams):
    inputs = clusters(num_beams, 3)
    options = dict(num_beams=num_beams, max_length=12, page_tokens=64)
    ort = Summarizer.from_pretrained(hier_bundle, threads=1).summarize_batch(inputs, **options)
    ref = Summarizer.from_pretrained(hier_checkpoint, backend="torch").summarize_batch(inputs, **options)
    for a, b, docs in zip(ort, ref, inputs):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)
        assert {u.document for u in a.units} == set(range(len(docs)))
        np.testing.assert_allclose(a.unit_weights.sum(axis=1), 1.0, atol=1e-4)


def test_unit_batch_size_does_not_change_the_summary(hier_bundle):
    inputs = clusters(7, 2)
    runs = [Summarizer.from_pretrained(hier_bundle, threads=1, unit_batch_size=size).summarize_batch(
        inputs, num_beams=2, max_length=10) for size in (1, 4, 64)]
    assert [s.token_ids for s in runs[0]] == [s.token_ids for s in runs[1]] == [s.token_ids for s in runs[2]]


def test_a_plain_hf_bart_exports_and_runs_as_hierencdec(tmp_path, tokenizer_file):
    pytest.importorskip("transformers")
    bundle = export_onnx(hf_bart_directory(tmp_path / "hf"), tmp_path / "b", tokenizer=tokenizer_file,
                         kind="hierencdec",
                         options={"page_tokens": 64})
    summary = Summarizer.from_pretrained(bundle.path).summarize(clusters(9, 1)[0], max_length=6)
    assert summary.token_ids and summary.unit_weights.shape == (len(summary.token_ids), len(summary.units))
