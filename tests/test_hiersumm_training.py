"""Hierarchical Transformer training: ROUGE-2 recall targets for the ranker, the ranker and summarizer stages
through the shared trainer, exact resume, export of the trained checkpoint."""

import json
import random
from collections import Counter

import pytest
from conftest import document, write_jsonl
from test_training import run_config

UNITS = {"policy": "auto", "paragraph_tokens": 40, "top_paragraphs": 3, "max_pages": 12}
MODEL = {"d_model": 32, "encoder_heads": 4, "decoder_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
         "encoder_layers": ["local", "global"], "decoder_layers": 2, "max_positions": 128, "ranker_hidden": 16}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = []
    for i in range(8):
        docs = [document(rng, rng.randint(2, 8)) for _ in range(rng.randint(2, 4))]
        rows.append({"id": f"c-{i}", "documents": docs, "query": "What changed?" if i % 2 else None,
                     "summary": docs[0].split("\n\n")[0], "source": "test"})
    return write_jsonl(path, rows)


def config(tmp_path, clusters, tokenizer_file, name, **changes):
    return run_config(tmp_path, clusters, tokenizer_file, "summarize", name,
                      **{"kind": "hiersumm", "units": UNITS, "model": MODEL, "max_steps": 4,
                         "objective_options": {"stage": "both"}, **changes})


def test_rouge2_recall_counts_the_references_bigrams():
    from train.kinds.hiersumm import rouge2_recall
    from train.oracle import rouge_tokens

    words = rouge_tokens("The cat sat on the mat.")
    reference = Counter(zip(words, words[1:]))
    assert rouge2_recall("the cat sat", reference) == pytest.approx(2 / 5)
    assert rouge2_recall("a dog barked", reference) == 0.0 and rouge2_recall("x", Counter()) == 0.0


def test_both_stages_train_resume_exactly_and_export(tmp_path, clusters, tokenizer_file):
    from locsum_sdk import Summarizer
    from locsum_sdk.exporters.onnx import export_onnx
    from train.__main__ import build

    straight = build(config(tmp_path, clusters, tokenizer_file, "straight"), progress=False)
    sample = straight.train_set.get(1)
    assert len(sample.recall) == len(sample.paragraphs) and any(r > 0 for r in sample.recall)
    log = straight.train()
    assert all({"loss_ranker", "loss_summarizer"} <= set(r) for r in log) and "val_rouge1" in log[2]
    build(config(tmp_path, clusters, tokenizer_file, "resumed"), progress=False).train(max_steps=2)
    resumed = build(config(tmp_path, clusters, tokenizer_file, "resumed"), progress=False).train()
    assert [r["loss"] for r in log[2:]] == [r["loss"] for r in resumed]
    bundle = export_onnx(straight.latest(), tmp_path / "bundle")
    summary = Summarizer.from_pretrained(bundle.path).summarize(
        json.loads(clusters.read_text().splitlines()[0])["documents"], max_length=6)
    assert summary.kind == "hiersumm" and 1 <= len(summary.units) <= UNITS["top_paragraphs"]


def test_the_ranker_stage_trains_the_ranker_alone(tmp_path, clusters, tokenizer_file):
    from locsum_sdk.modeling.hiersumm import objective
    from train.__main__ import build

    trainer = build(config(tmp_path, clusters, tokenizer_file, "ranker", objective_options={"stage": "ranker"}),
                    progress=False)
    batch = trainer.train_set.collate([trainer.train_set.get(i) for i in range(2)], trainer.pad, trainer.start)
    loss, nll, terms = objective(trainer.model, batch, trainer.config)
    assert set(terms) == {"ranker"} and float(nll) == 0.0
    loss.backward()
    assert all(p.grad is None for n, p in trainer.model.named_parameters() if not n.startswith("ranker."))
    with pytest.raises(ValueError, match="stage"):
        objective(trainer.model, batch, type("C", (), {"objective_options": {"stage": "all"}, "label_smoothing": 0})())


def test_denoising_pretrains_the_encoder_and_decoder_on_paragraphs_in_order(tmp_path, clusters, tokenizer_file):
    import torch

    from locsum_sdk.modeling.hiersumm import objective
    from train.__main__ import build
    from train.noise import DenoisingSet

    trainer = build(run_config(tmp_path, clusters, tokenizer_file, "denoise", "denoise", kind="hiersumm", units=UNITS,
                               model=MODEL, max_steps=4, segment_tokens=90,
                               objective_options={"stage": "summarizer"}), progress=False)
    sample, whole = trainer.train_set.get(0), DenoisingSet.get(trainer.train_set, 0)
    assert len(sample.units) > 1 and sample.target == whole.target
    assert all(len(u) <= UNITS["paragraph_tokens"] and (u[0], u[-1]) == (0, 2) for u in sample.units)
    assert [t for u in sample.units for t in u[1:-1]] == whole.units[0][1:-1]  # the noised segment, in order
    batch = trainer.train_set.collate([trainer.train_set.get(i) for i in range(2)], trainer.pad, trainer.start)
    assert not batch.ranked and batch.top_paragraphs == max(len(p) for p in batch.paragraphs)
    loss, _, terms = objective(trainer.model, batch, trainer.config)
    assert set(terms) == {"summarizer"}
    loss.backward()
    grads = dict(trainer.model.named_parameters())
    assert all(p.grad is None for n, p in grads.items() if n.startswith("ranker."))
    assert all(grads[n].grad is not None and torch.any(grads[n].grad != 0)
               for n in ("encoder.layers.1.pooling.scores.weight", "layers.0.cross_attn.k_proj.weight"))
    log = trainer.train()
    assert [r["step"] for r in log] == [1, 2, 3, 4] and all(r["loss"] == r["loss"] for r in log)
    with pytest.raises(ValueError, match="'summarizer'"):
        objective(trainer.model, batch, type("C", (), {"objective_options": {"stage": "both"}, "label_smoothing": 0})())


def test_a_ranker_grows_the_tfidf_feature_and_trains_on_it(tmp_path, clusters, tokenizer_file):
    import torch

    from locsum_sdk.modeling.hiersumm import objective, ranker_tensors
    from train.__main__ import build
    from train.kinds.hiersumm import prepare_model

    plain = build(config(tmp_path, clusters, tokenizer_file, "plain"), progress=False)
    grown_config = config(tmp_path, clusters, tokenizer_file, "grown",
                          objective_options={"stage": "ranker", "ranker_tfidf": True})
    grown = prepare_model(plain.model, grown_config)
    assert grown.config.ranker_tfidf and not plain.model.config.ranker_tfidf
    sample = plain.train_set.get(1)
    tensors = ranker_tensors(plain.model, sample.units, sample.title)
    grown.eval(), plain.model.eval()
    with torch.no_grad():  # the feature's column starts at zero: the old logits plus the feature, weight 1
        feature = torch.linspace(-1, 1, len(sample.units))
        assert torch.allclose(grown.ranker.logits(**tensors, tfidf=feature),
                              plain.model.ranker.logits(**tensors) + feature, atol=1e-5)
    trainer = build(grown_config, progress=False)
    assert trainer.model.config.ranker_tfidf
    batch = trainer.train_set.collate([trainer.train_set.get(i) for i in range(2)], trainer.pad, trainer.start)
    loss, _, _ = objective(trainer.model, batch, trainer.config)
    loss.backward()
    assert trainer.model.ranker.tfidf_weight.grad is not None and trainer.model.ranker.tfidf_weight.grad != 0


def test_rouge_l_recall_is_the_lcs_share_of_the_reference():
    from train.ranker_recall import rouge_l_recall

    assert rouge_l_recall("the cat sat on a mat".split(), "the cat sat on the mat".split()) == pytest.approx(5 / 6)
    assert rouge_l_recall(["x"], []) == 0.0


def test_the_ranker_report_has_every_ranker_at_every_length(hiersumm_bundle_dir, clusters):
    from locsum_sdk import Summarizer
    from train.ranker_recall import ranker_report

    report = ranker_report(Summarizer.from_pretrained(hiersumm_bundle_dir), clusters, [1, 3], progress=False)
    difference = report.pop("ranker minus tf-idf")
    assert set(report) == {"ranker", "tf-idf", "lead", "random"}
    for by_n in report.values():
        assert by_n[1]["examples"] == 8 and 0 <= by_n[1]["mean"] <= by_n[3]["mean"] <= 100
    assert difference[3]["mean"] == pytest.approx(report["ranker"][3]["mean"] - report["tf-idf"][3]["mean"])


def test_the_model_card_reports_the_ranker(hiersumm_bundle_dir, clusters):
    from locsum_sdk import Summarizer
    from train.kinds import selection_report
    from train.release import selection_lines

    selection = selection_report("hiersumm", Summarizer.from_pretrained(hiersumm_bundle_dir), clusters, 3)
    assert list(selection["report"]) == ["ranker", "tf-idf", "lead", "random", "ranker minus tf-idf"]
    assert "| ranking | L'=5 | L'=10 | L'=20 | L'=40 | examples |" in selection_lines(selection, 3)
