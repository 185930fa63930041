"""DYLE on a Llama backbone: the generator continues each snippet's prompt and the snippets' token distributions are
marginalized; the extractor is an encoder of its own (a BERT, reading its own tokenizer). Cached steps equal
teacher forcing, the bundle runs on ONNX Runtime token for token with torch, and a Llama DYLE without its own
extractor is refused."""

import json
import random
import shutil

import numpy as np
import pytest
import torch
from conftest import LLAMA_FRAME, document, random_model, tiny_llama_config
from test_dyle_training import bert_directory

from locsum_sdk import Summarizer
from locsum_sdk.configs.dyle import ExtractorConfig, LlamaDyleConfig
from locsum_sdk.errors import BundleError
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.dyle import Dyle, complete

UNITS = {"policy": "auto", "snippet_tokens": 40, "top_k": 3, "chunk_tokens": 96}


@pytest.fixture(scope="module")
def extractor(tmp_path_factory):
    rng = random.Random(0)
    source = bert_directory(tmp_path_factory.mktemp("minilm") / "bert", [document(rng, 8) for _ in range(50)])
    vocab = json.loads((source / "tokenizer.json").read_text())["model"]["vocab"]
    hf = json.loads((source / "config.json").read_text())
    return source, ExtractorConfig.from_hf_bert(hf, vocab["[CLS]"], vocab["[SEP]"])


def llama_dyle(vocab: int, extractor: ExtractorConfig) -> Dyle:
    config = LlamaDyleConfig(**tiny_llama_config(vocab, **LLAMA_FRAME).__dict__, extractor=extractor)
    return random_model(lambda: Dyle(config))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer, tokenizer_file, extractor):
    source, config = extractor
    model = llama_dyle(tokenizer.get_vocab_size(), config)
    directory = save_checkpoint(model, tmp_path_factory.mktemp("llama_dyle"), tokenizer_file, units=UNITS,
                                generation={"num_beams": 1, "max_length": 16})
    shutil.copyfile(source / "tokenizer.json", directory / "extractor_tokenizer.json")
    return directory


def test_cached_steps_equal_teacher_forcing(extractor):
    from test_pagesum import check_cached_steps

    check_cached_steps(llama_dyle(400, extractor[1]))


@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_matches_torch_token_for_token(checkpoint, tmp_path_factory, num_beams):
    bundle = tmp_path_factory.getbasetemp() / "llama_dyle_bundle"
    if not bundle.exists():
        export_onnx(checkpoint, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["model"]["backbone"] == "llama" and "extractor_tokenizer.json" in manifest["files"]
    rng = random.Random(num_beams)
    inputs = [document(rng, 14), [document(rng, 5), document(rng, 7)], document(rng, 3)]
    queries = ["What was decided?", None, "budget"]
    options = dict(num_beams=num_beams, max_length=12, min_length=4)
    ort = Summarizer.from_pretrained(bundle, threads=1).summarize_batch(inputs, queries, **options)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch").summarize_batch(inputs, queries, **options)
    for a, b in zip(ort, ref):
        assert a.token_ids == b.token_ids and a.kind == "dyle" and len(a.units) <= UNITS["top_k"]
        np.testing.assert_allclose([u.score for u in a.units], [u.score for u in b.units], atol=1e-5)
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)


def test_a_llama_dyle_needs_an_extractor_of_its_own(extractor):
    config = tiny_llama_config(400).__dict__
    with pytest.raises(BundleError, match="needs its extractor's config"):
        LlamaDyleConfig(**config)
    shared = ExtractorConfig(**{**extractor[1].__dict__, "own_tokenizer": False})
    with pytest.raises(BundleError, match="own_tokenizer must be true"):
        LlamaDyleConfig(**config, extractor=shared)
    generator = {k: v for k, v in llama_dyle(400, extractor[1]).state_dict().items() if k.startswith("model.")}
    with pytest.raises(BundleError, match="needs its extractor's weights"):
        complete(LlamaDyleConfig(**config, extractor=extractor[1]), generator, "generator.safetensors")


def test_a_dyle_starts_from_the_base_model_and_a_bert(tmp_path, tokenizer_file, extractor, monkeypatch):
    """train.kinds.dyle.from_base: the generator is the base model's language model, the extractor the BERT with a
    zero scoring layer and its tf-idf feature at the given weight, the dynamic snippet weights equal."""
    from gguf_files import write_gguf

    from train.kinds.dyle import from_base

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, _, _ = write_gguf(tmp_path / "base.gguf", tokenizer_file)
    model, tokenizer_json = from_base(path, extractor[0], tfidf_weight=0.4)
    assert model.config.extractor.tfidf and model.extractor.tfidf_weight.item() == pytest.approx(0.4)
    assert torch.all(model.extractor.classifier.weight == 0) and torch.all(model.dynamic_mlp[4].weight == 0)
    assert model.config.extractor.own_tokenizer and tokenizer_json.name == "tokenizer.json"
    ids = torch.randint(5, model.config.vocab_size, (1, 2, 9))
    with torch.no_grad():
        scores, weights = model(ids, torch.ones_like(ids), torch.ones(1, 2, dtype=torch.bool), ids[:, 0, :3])
        alone = [torch.softmax(model.model(torch.cat([ids[:, u], ids[:, 0, :3]], 1)), -1)[:, 9:] for u in (0, 1)]
    assert torch.allclose(weights, torch.full_like(weights, 0.5))  # equal snippet weights
    assert torch.allclose(scores.exp(), 0.5 * (alone[0] + alone[1]), atol=1e-6)  # the snippets' mixture


def test_base_start_writes_checkpoints_that_load_as_their_kind(tmp_path, tokenizer_file, extractor, monkeypatch):
    from gguf_files import write_gguf

    from locsum_sdk.errors import OptionError
    from locsum_sdk.modeling.checkpoint import load_checkpoint
    from train.base_start import base_start, main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, _, _ = write_gguf(tmp_path / "base.gguf", tokenizer_file)
    dyle = base_start("dyle", tmp_path / "dyle", path, extractor[0])
    assert (dyle / "extractor_tokenizer.json").read_bytes() == (extractor[0] / "tokenizer.json").read_bytes()
    loaded = load_checkpoint(dyle)
    assert loaded.model.kind == "dyle" and loaded.model.config.extractor.own_tokenizer and loaded.tokenizer_file
    main(["--kind", "pagesum", "--base", str(path), "--output", str(tmp_path / "pagesum")])
    assert load_checkpoint(tmp_path / "pagesum").model.kind == "pagesum"
    main(["--kind", "hierencdec", "--base", str(path), "--output", str(tmp_path / "hierencdec")])
    hierencdec = load_checkpoint(tmp_path / "hierencdec").model
    assert hierencdec.kind == "hierencdec" and hierencdec.config.to_dict()["backbone"] == "llama"
    with pytest.raises(OptionError, match="needs --extractor"):
        base_start("dyle", tmp_path / "none", path)
