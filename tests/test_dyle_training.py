"""DYLE training: the oracle cache (per split and data), hybrid selection, the three loss terms with the
consistency term reaching the extractor only, exact resume, and export of the trained checkpoint."""

import json
import random

import pytest
import torch
from conftest import document, write_jsonl
from test_training import run_config
from tokenizers import Tokenizer

from locsum_sdk.modeling.dyle import select_snippets

UNITS = {"policy": "auto", "snippet_tokens": 40, "top_k": 4, "chunk_tokens": 96, "max_pages": 40}


@pytest.fixture(scope="module")
def meetings(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = []
    for i in range(8):
        turns = [f"{rng.choice(['Anna', 'Bob'])}: {document(rng, rng.randint(1, 2))}"
                 for _ in range(rng.randint(8, 20))]
        summary = " ".join(t.split(": ", 1)[1] for t in rng.sample(turns, 2))  # two turns, so the oracle has a target
        rows.append({"id": f"m-{i}", "documents": ["\n".join(turns)],
                     "query": "What did they decide?" if i % 2 else None,
                     "summary": summary, "source": "test"})
    return write_jsonl(path, rows)


def config(tmp_path, meetings, tokenizer_file, name, **changes):
    return run_config(tmp_path, meetings, tokenizer_file, "summarize", name,
                      **{"kind": "dyle", "units": UNITS, "objective_options": {"hybrid": True}, "max_steps": 4,
                         **changes})


def test_hybrid_selection_puts_the_oracle_first():
    scores = torch.tensor([0.1, 0.9, 0.5, 0.8, 0.0])
    assert select_snippets(scores, [4, 0], 3, hybrid=True) == [0, 1, 4]
    assert select_snippets(scores, [4, 0], 3, hybrid=False) == [1, 2, 3]
    assert select_snippets(scores, [4, 0, 2, 3], 3, hybrid=True) == [0, 2, 4]  # the oracle alone fills K


def test_dyle_trains_resumes_exactly_and_exports(tmp_path, meetings, tokenizer_file):
    from locsum_sdk import Summarizer
    from locsum_sdk.exporters.onnx import export_onnx
    from train.__main__ import build

    straight = build(config(tmp_path, meetings, tokenizer_file, "straight"), progress=False)
    assert straight.model.kind == "dyle"
    oracles = sorted((tmp_path / ".oracle").glob("*.json"))
    assert [p.name.split("-")[0] for p in oracles] == ["train", "val"]  # one per split, never shared
    assert any(straight.train_set.oracles) and all(len(o) <= UNITS["top_k"] for o in straight.train_set.oracles)
    log = straight.train()
    for record in log:
        assert {"loss_generation", "loss_oracle", "loss_consistency"} <= set(record)
        assert all(record[k] == record[k] for k in record if k.startswith("loss"))  # no NaN
    assert "val_rouge1" in log[2]
    build(config(tmp_path, meetings, tokenizer_file, "resumed"), progress=False).train(max_steps=2)
    resumed = build(config(tmp_path, meetings, tokenizer_file, "resumed"), progress=False).train()
    assert [r["loss"] for r in log[2:]] == [r["loss"] for r in resumed]
    assert sorted((tmp_path / ".oracle").glob("*.json")) == oracles  # the cache was read, not rebuilt
    bundle = export_onnx(straight.latest(), tmp_path / "bundle")
    summary = Summarizer.from_pretrained(bundle.path).summarize(
        json.loads(meetings.read_text().splitlines()[0])["documents"], max_length=6)
    assert summary.kind == "dyle" and len(summary.units) == UNITS["top_k"]


def test_the_consistency_term_trains_the_extractor_only(tmp_path, meetings, tokenizer_file):
    from locsum_sdk.modeling.dyle import objective
    from train.__main__ import build

    trainer = build(config(tmp_path, meetings, tokenizer_file, "terms",
                           objective_options={"loss_weights": {"generation": 0.0, "oracle": 0.0}}), progress=False)
    batch = trainer.train_set.collate([trainer.train_set.get(i) for i in range(2)], trainer.pad, trainer.start)
    loss, nll, terms = objective(trainer.model, batch, trainer.config)
    assert loss.item() == pytest.approx(float(terms["consistency"])) and float(terms["consistency"]) >= 0
    loss.backward()
    extractor = [p.grad for p in trainer.model.extractor.parameters() if p.grad is not None]
    generator = [p.grad for n, p in trainer.model.named_parameters() if not n.startswith("extractor.")
                 and p.grad is not None and p.grad.abs().sum() > 0]
    assert extractor and any(g.abs().sum() > 0 for g in extractor) and not generator


def test_recall_of_oracle_snippets_counts_the_top_k():
    from train.recall import interval, recall_at

    assert recall_at([0.1, 0.9, 0.5, 0.8], [1, 2], 2) == 0.5  # top 2: snippets 1 and 3
    assert recall_at([0.0, 0.0, 0.0], [2], 2) == 0.0 and recall_at([0.0, 0.0, 0.0], [1], 2) == 1.0  # ties: earlier
    summary = interval([0.5, 1.0, 0.0, 0.5])
    assert summary["mean"] == 50.0 and summary["low"] <= 50.0 <= summary["high"]


def test_recall_is_reported_for_the_extractor_and_the_baselines(dyle_bundle_dir, meetings):
    from locsum_sdk import Summarizer
    from train.recall import bundle_items, recall_report

    items = bundle_items(Summarizer.from_pretrained(dyle_bundle_dir), meetings, None, 5, progress=False)
    report = recall_report(items, [2, 5])
    assert list(report) == ["extractor", "tf-idf", "lead", "random", "extractor minus tf-idf"]
    difference = report.pop("extractor minus tf-idf")
    for k in (2, 5):  # the paired difference's mean is the difference of the means
        assert difference[k]["mean"] == pytest.approx(report["extractor"][k]["mean"] - report["tf-idf"][k]["mean"])
        assert difference[k]["low"] <= difference[k]["mean"] <= difference[k]["high"]
    for by_k in report.values():
        assert by_k[2]["examples"] == by_k[5]["examples"] > 0
        assert 0 <= by_k[2]["mean"] <= by_k[5]["mean"] <= 100 and by_k[5]["low"] <= by_k[5]["mean"] <= by_k[5]["high"]
    # an untrained extractor scores every snippet alike: its ranking is the input order
    assert report["extractor"][5]["mean"] == report["lead"][5]["mean"]


def bert_directory(path, texts):
    """A tiny HF BERT directory with a WordPiece tokenizer.json, as the all-MiniLM-L6-v2 package lays it out."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    transformers = pytest.importorskip("transformers")
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    tokenizer.enable_padding(length=128, pad_id=0, pad_token="[PAD]")  # as sentence-transformers' files do
    tokenizer.enable_truncation(128)
    path.mkdir(parents=True)
    tokenizer.save(str(path / "tokenizer.json"))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=128)
    transformers.BertModel(config).save_pretrained(path)
    return path



def test_a_tokenizer_file_that_pads_and_truncates_is_read_without_either(tmp_path, meetings):
    from locsum_sdk.tokenizer_file import read_tokenizer

    texts = [json.loads(line)["documents"][0] for line in meetings.read_text().splitlines()]
    path = bert_directory(tmp_path / "minilm", texts) / "tokenizer.json"
    raw, read = Tokenizer.from_file(str(path)), read_tokenizer(path)
    long_text = " ".join(texts)
    assert len(raw.encode("a b").ids) == 128 and len(raw.encode(long_text).ids) == 128  # padded, and cut
    assert read.padding is None and read.truncation is None
    assert 3 < len(read.encode(long_text).ids) == len(read.encode(long_text).attention_mask) > 128
    assert 0 not in read.encode_batch(["a b", long_text], add_special_tokens=False)[0].ids


def test_an_extractor_from_a_pretrained_bert_reads_its_own_tokens(tmp_path, meetings, tokenizer_file):
    from locsum_sdk import Summarizer
    from locsum_sdk.errors import BundleNotFoundError
    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.bert import BertEncoder
    from train.__main__ import build

    texts = [json.loads(line)["documents"][0] for line in meetings.read_text().splitlines()]
    source = bert_directory(tmp_path / "minilm", texts)
    trainer = build(config(tmp_path, meetings, tokenizer_file, "bert", max_steps=2, units={**UNITS, "chunk_tokens": 96},
                           objective_options={"extractor_from": str(source)}), progress=False)
    extractor = trainer.model.config.extractor
    assert isinstance(trainer.model.extractor.encoder, BertEncoder) and extractor.own_tokenizer
    sample = trainer.train_set.get(1)
    chunks = trainer.train_set.chunks(sample.snippets, sample.query)
    ids = chunks["input_ids"]
    assert int(ids[0, 0]) == extractor.start_token_id and ids.shape[1] <= 96
    assert torch.all(ids.reshape(-1)[chunks["separators"]] == extractor.separator_token_id)
    assert len(chunks["separators"]) == len(sample.snippets)
    assert not torch.any((ids == 0) & (chunks["attention_mask"] == 1))  # no [PAD] read: the file's padding is off
    log = trainer.train()
    assert all(r["loss_oracle"] == r["loss_oracle"] for r in log)
    from train.recall import recall_report
    from train.recall.__main__ import checkpoint_items

    report = recall_report(checkpoint_items(trainer.latest(), trainer.config, meetings, 4, progress=False), [3])
    assert report["extractor"][3]["examples"] == report["tf-idf"][3]["examples"] > 0
    checkpoint = trainer.latest()
    assert (checkpoint / "extractor_tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    bundle = export_onnx(checkpoint, tmp_path / "bundle").path
    assert "extractor_tokenizer.json" in json.loads((bundle / "manifest.json").read_text())["files"]
    ort, ref = Summarizer.from_pretrained(bundle, threads=1), Summarizer.from_pretrained(checkpoint, backend="torch")
    assert ort.selection_tokenizer.to_str() == ref.selection_tokenizer.to_str()
    example = json.loads(meetings.read_text().splitlines()[1])
    options = ort.options(max_length=8, num_beams=2)
    units = ort.kind.pager(ort.tokenizer, ort.special, options.units)(example["documents"], example["query"])
    expected = trainer.train_set.extractor_scores(trainer.model.eval(), units, example["query"])  # training side
    for runtime in (ort, ref):
        assert runtime.unit_scores(units, example["query"], options.units) == pytest.approx(expected, abs=1e-4)
    a, b = (s.summarize(example["documents"], example["query"], options) for s in (ort, ref))
    assert a.token_ids == b.token_ids and [u.start for u in a.units] == [u.start for u in b.units]
    (checkpoint / "extractor_tokenizer.json").unlink()
    with pytest.raises(BundleNotFoundError, match="extractor_tokenizer.json"):
        export_onnx(checkpoint, tmp_path / "again")
    with pytest.raises(BundleNotFoundError, match="extractor_tokenizer.json"):
        Summarizer.from_pretrained(checkpoint, backend="torch")
    (bundle / "extractor_tokenizer.json").unlink()
    with pytest.raises(BundleNotFoundError, match="extractor_tokenizer.json"):
        Summarizer.from_pretrained(bundle)


def test_the_extractor_alone_trains_without_a_generator_pass(tmp_path, meetings, tokenizer_file):
    from locsum_sdk.modeling.dyle import objective
    from train.__main__ import build

    weights = {"generation": 0.0, "oracle": 1.0, "consistency": 0.0}
    trainer = build(config(tmp_path, meetings, tokenizer_file, "alone", val_files=[],
                           objective_options={"loss_weights": weights}), progress=False)
    batch = trainer.train_set.collate([trainer.train_set.get(i) for i in range(2)], trainer.pad, trainer.start)
    loss, nll, terms = objective(trainer.model, batch, trainer.config)
    assert set(terms) == {"oracle"} and float(nll) == 0.0 and loss.item() > 0
    loss.backward()
    assert all(p.grad is None for n, p in trainer.model.named_parameters() if not n.startswith("extractor."))


def test_an_extractor_grows_the_tfidf_feature_and_trains_on_it(tmp_path, meetings, tokenizer_file):
    from locsum_sdk.modeling.dyle import objective
    from train.__main__ import build

    weights = {"generation": 0.0, "oracle": 1.0, "consistency": 0.0}
    plain = build(config(tmp_path, meetings, tokenizer_file, "plain", val_files=[],
                         objective_options={"loss_weights": weights}), progress=False)
    grown = build(config(tmp_path, meetings, tokenizer_file, "grown", val_files=[],
                         objective_options={"loss_weights": weights, "extractor_tfidf": True}), progress=False)
    assert grown.model.config.extractor.tfidf and not plain.model.config.extractor.tfidf
    sample = plain.train_set.get(1)
    chunks = plain.train_set.chunks(sample.snippets, sample.query)
    assert chunks["tfidf"].shape == chunks["separators"].shape
    plain.model.eval(), grown.model.eval()
    with torch.no_grad():  # the same weights (same seed), plus the feature at weight 1
        assert torch.allclose(grown.model.extractor(**chunks), plain.model.extractor(**chunks) + chunks["tfidf"],
                              atol=1e-5)
    batch = grown.train_set.collate([grown.train_set.get(i) for i in range(2)], grown.pad, grown.start)
    loss, _, _ = objective(grown.model.train(), batch, grown.config)
    loss.backward()
    assert grown.model.extractor.tfidf_weight.grad is not None and grown.model.extractor.tfidf_weight.grad != 0
    started = build(config(tmp_path, meetings, tokenizer_file, "started", val_files=[],
                           objective_options={"loss_weights": weights, "extractor_tfidf": True,
                                              "extractor_tfidf_weight": 0.4}), progress=False)
    started.model.eval()
    with torch.no_grad():  # the feature's weight starts where the config says
        assert torch.allclose(started.model.extractor(**chunks),
                              plain.model.extractor(**chunks) + 0.4 * chunks["tfidf"], atol=1e-5)


@pytest.mark.parametrize("source", ["ours", "bert"])
def test_checkpointing_the_extractor_keeps_its_gradients(tmp_path, meetings, tokenizer_file, source):
    from locsum_sdk.modeling.dyle import objective
    from train.__main__ import build

    options = {"loss_weights": {"generation": 0.0, "oracle": 1.0, "consistency": 0.0}}
    if source == "bert":
        texts = [json.loads(line)["documents"][0] for line in meetings.read_text().splitlines()]
        options["extractor_from"] = str(bert_directory(tmp_path / "bert", texts))
    runs = []
    for checkpointed in (False, True):
        trainer = build(config(tmp_path, meetings, tokenizer_file, f"{source}-{checkpointed}", val_files=[],
                               objective_options={**options, "extractor_checkpointing": checkpointed}),
                        progress=False)
        assert trainer.model.extractor.encoder.checkpoint_layers is checkpointed
        torch.manual_seed(2)  # a scoring layer that passes gradients on (a BERT's starts at zero)
        torch.nn.init.normal_(trainer.model.extractor.classifier.weight)
        batch = trainer.train_set.collate([trainer.train_set.get(i) for i in range(2)], trainer.pad, trainer.start)
        torch.manual_seed(1)  # the same dropout masks
        loss, _, _ = objective(trainer.model.train(), batch, trainer.config)
        loss.backward()
        runs.append((loss.detach(), {n: p.grad for n, p in trainer.model.named_parameters() if p.grad is not None}))
    (loss, grads), (checkpointed_loss, checkpointed_grads) = runs
    assert torch.allclose(loss, checkpointed_loss, atol=1e-6)
    assert grads.keys() == checkpointed_grads.keys()
    assert any(n.startswith("extractor.encoder.layers.0.") and g.abs().sum() > 0 for n, g in grads.items())
    for name, grad in grads.items():
        assert torch.allclose(grad, checkpointed_grads[name], atol=1e-6), name


def test_the_model_card_reports_the_selection_stage(dyle_bundle_dir, meetings):
    from locsum_sdk import Summarizer
    from train.kinds import selection_report
    from train.release import selection_lines

    summarizer = Summarizer.from_pretrained(dyle_bundle_dir)
    selection = selection_report("dyle", summarizer, meetings, 4)
    assert list(selection["report"]) == ["extractor", "tf-idf", "lead", "random", "extractor minus tf-idf"]
    lines = selection_lines(selection, 4)
    assert lines[0].startswith("## Selection stage") and "| ranking | R@5 | R@10 | R@25 | examples |" in lines
    assert any(line.startswith("| extractor | ") and line.endswith(" |") for line in lines)
    assert selection_report("pagesum", summarizer, meetings, 4) is None and selection_lines(None, 4) == []


def synthetic_probe_examples(rng, count, signal):
    """Snippet states that mark the oracle snippets along one axis (signal > 0) or carry nothing (0); the tf-idf
    feature and ranking are noise."""
    from train.probe import ProbeExample

    examples = []
    for _ in range(count):
        states, oracle = torch.randn(30, 8, generator=rng), torch.randperm(30, generator=rng)[:3].tolist()
        states[oracle, 0] += signal
        examples.append(ProbeExample(states, torch.randn(30, generator=rng), torch.rand(30, generator=rng).numpy(),
                                     oracle))
    return examples


def test_the_probe_finds_what_the_states_say_about_the_oracle_and_nothing_where_they_say_nothing():
    from train.probe import probe_report

    rng = torch.Generator().manual_seed(0)
    marked = probe_report(synthetic_probe_examples(rng, 24, 3.0), synthetic_probe_examples(rng, 24, 3.0), [5])
    assert marked["penalty"] <= 0.1 and marked["test_loss"] < marked["test_loss_tfidf_alone"] - 0.5
    assert marked["recall"]["probe minus tf-idf"][5]["low"] > 30
    blank = probe_report(synthetic_probe_examples(rng, 24, 0.0), synthetic_probe_examples(rng, 24, 0.0), [5])
    assert blank["penalty"] >= 1.0 and blank["weight_norm"] < 0.2


def test_the_probe_reads_a_starting_extractors_snippet_states(tmp_path, meetings, tokenizer_file):
    from locsum_sdk import kinds
    from locsum_sdk.units import SpecialTokens
    from train.__main__ import prepare_tokenizer, starting_model
    from train.kinds.dyle import DyleSet
    from train.probe import probe_examples

    settings = config(tmp_path, meetings, tokenizer_file, "probe", objective_options={"extractor_tfidf": True})
    _, tokenizer = prepare_tokenizer(settings, [meetings])
    model = starting_model(settings, tokenizer).eval()
    kind = kinds.get("dyle")
    special = SpecialTokens(**model.config.special_tokens())
    pager = kind.pager(tokenizer, special, kind.unit_options(**settings.paging()))
    data = DyleSet([meetings], pager, tokenizer, settings, "train", False)
    examples = probe_examples(model, data, range(len(data)), "probe", False)
    assert examples and all(x.oracle for x in examples)
    first = next(sample for sample in map(data.get, range(len(data))) if sample.oracle)
    chunks = data.chunks(first.snippets, first.query)
    with torch.no_grad():  # the scoring layer reads exactly these states
        scores = model.extractor(**chunks)
        expected = (model.extractor.classifier(examples[0].states).squeeze(-1)
                    + model.extractor.tfidf_weight * chunks["tfidf"])
    assert examples[0].states.shape == (len(first.snippets), model.config.extractor.d_model)
    assert torch.allclose(scores, expected, atol=1e-5)
