"""Every kind of bad input gets a typed error that says what was wrong and what to do."""

import json
import os
import shutil

import pytest

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.bundle import Bundle
from locsum_sdk.cli import main
from locsum_sdk.errors import (
    BundleError,
    BundleIntegrityError,
    BundleNotFoundError,
    BundleVersionError,
    EmptyInputError,
    EncodingError,
    InputError,
    InputTooLongError,
    OptionError,
)


@pytest.fixture(scope="module")
def summarizer(bundle_dir):
    return Summarizer.from_pretrained(bundle_dir, threads=1)


@pytest.fixture
def bundle_copy(bundle_dir, tmp_path):
    return shutil.copytree(bundle_dir, tmp_path / "bundle")


@pytest.mark.parametrize("text", ["", "  \n ", [], ["Some text here.", ""]])
def test_empty_text(summarizer, text):
    with pytest.raises(EmptyInputError, match="empty"):
        summarizer.summarize(text)


def test_bytes_that_are_not_utf8(summarizer):
    with pytest.raises(EncodingError, match="not valid UTF-8"):
        summarizer.summarize("déjà vu. ".encode("latin-1") * 5)


def test_document_over_the_token_limit(summarizer):
    text = "The committee discussed the budget of the project. " * 400
    with pytest.raises(InputTooLongError, match="max_tokens=500"):
        summarizer.summarize(text, max_tokens=500)


def test_truncation_is_announced(summarizer, caplog):
    text = "The committee discussed the budget of the project. " * 400
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        summary = summarizer.summarize(text, truncate=True, max_tokens=500, max_length=4)
    assert "truncated" in caplog.text and 0 < sum(len(u.text_ids) for u in summary.units) <= 500
    pages = len(summary.units)
    assert summary.warnings == [f"truncated to fit max_tokens=500: kept {pages} of {pages_of(summarizer, text)} pages "
                                f"({sum(len(u.text_ids) for u in summary.units)} of {tokens_of(summarizer, text)} "
                                "tokens, select=first); raise max_tokens to read all of it"]
    assert summarizer.summarize(text[:400], max_length=4).warnings == []


def pages_of(summarizer, text):
    return len(summarizer.summarize(text, max_length=2, max_tokens=10**6).units)


def tokens_of(summarizer, text):
    return sum(len(u.text_ids) for u in summarizer.summarize(text, max_length=2, max_tokens=10**6).units)


@pytest.mark.parametrize("options", [
    dict(beams=4), dict(temperature=0.7), dict(num_beams=0), dict(page_tokens=4096), dict(num_beams="4"),
    dict(num_beams=2.5), dict(max_length=2.5), dict(page_tokens="64"), dict(truncate="no"), dict(truncate=1),
    dict(length_penalty=float("nan")), dict(length_penalty=float("inf")), dict(max_tokens=1.5), dict(max_tokens=0),
    dict(select="best"), dict(memory_limit="lots"), dict(memory_limit=-1), dict(max_length=10**6),
    dict(min_length=30, max_length=8), dict(early_stopping="yes"), dict(no_repeat_ngram_size=-1),
])
def test_unknown_or_bad_options(summarizer, options):
    with pytest.raises(OptionError) as err:
        summarizer.summarize("Short text to summarize.", **options)
    assert next(iter(options)).split("_")[0] in str(err.value)  # names the option (and lists accepted values)


def test_a_bundle_default_yields_to_the_option_it_contradicts(summarizer):
    summarizer = Summarizer(summarizer.backend, summarizer.tokenizer, summarizer.special,
                            summarizer.defaults.replace(min_length=20), summarizer.model)
    assert len(summarizer.summarize("Short text to summarize.", max_length=8).token_ids) <= 7


@pytest.mark.parametrize("query,error,message", [
    ("  ", EmptyInputError, "query"), ("\u200b", EmptyInputError, "query"), (5, InputError, "query is a int"),
    ("\u0310\u0301", EmptyInputError, "query"),
    ("\udc80", EncodingError, "surrogate"),
])
def test_bad_queries(summarizer, query, error, message):
    with pytest.raises(error, match=message):
        summarizer.summarize("Some text.", query=query)


def test_bad_batches(summarizer):
    with pytest.raises(InputError, match="summarize_batch"):
        summarizer.summarize_batch("one string")
    with pytest.raises(InputError, match="queries"):
        summarizer.summarize_batch(["a text.", "another."], queries=["only one"])
    with pytest.raises(InputError, match="queries is a str"):
        summarizer.summarize_batch(["a text.", "another."], queries="ab")
    with pytest.raises(InputError, match="dict"):
        summarizer.summarize({"a": "text.", "b": "more text."})


def test_default_bundle_comes_from_the_environment_at_call_time(bundle_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCSUM_BUNDLE", str(bundle_dir))
    assert Summarizer.from_pretrained().summarize("The board met on Monday.", max_length=4).token_ids
    monkeypatch.setenv("LOCSUM_BUNDLE", str(tmp_path / "absent"))
    with pytest.raises(BundleNotFoundError, match="LOCSUM_BUNDLE"):
        Summarizer.from_pretrained()


def test_threads_come_from_the_environment_when_none_are_given(bundle_dir, checkpoint_dir, monkeypatch):
    import torch

    monkeypatch.setenv("LOCSUM_THREADS", " 1 ")
    assert Summarizer.from_pretrained(bundle_dir).backend.threads == 1
    before = torch.get_num_threads()
    try:
        Summarizer.from_pretrained(checkpoint_dir)  # the torch backend
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert Summarizer.from_pretrained(bundle_dir, threads=2).backend.threads == 2  # the argument wins
    monkeypatch.delenv("LOCSUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)  # as under `taskset -c 3`
    assert Summarizer.from_pretrained(bundle_dir).backend.threads == 1


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "\uff12", "2 threads"])
def test_bad_threads_in_the_environment(bundle_dir, tmp_path, monkeypatch, capsys, value):
    monkeypatch.setenv("LOCSUM_THREADS", value)
    with pytest.raises(OptionError, match="LOCSUM_THREADS=.*whole number of threads"):
        Summarizer.from_pretrained(bundle_dir)
    (tmp_path / "report.txt").write_text("The board met on Monday.", encoding="utf-8")
    assert main(["summarize", str(tmp_path / "report.txt"), "--bundle", str(bundle_dir)]) == 2
    err = capsys.readouterr().err
    assert "LOCSUM_THREADS" in err and len(err.splitlines()) == 1
    assert main(["summarize", str(tmp_path / "report.txt"), "--bundle", str(bundle_dir), "--threads", "1"]) == 0


@pytest.mark.parametrize("arguments", [
    dict(threads=-1), dict(threads="2"), dict(threads=1.5), dict(unit_batch_size=2.5), dict(unit_batch_size=0),
    dict(verify="no"), dict(backend=None),
])
def test_bad_loading_arguments(bundle_dir, arguments):
    with pytest.raises(OptionError, match=next(iter(arguments))):
        Summarizer.from_pretrained(bundle_dir, **arguments)


def test_a_directory_that_is_neither_bundle_nor_checkpoint(tmp_path):
    with pytest.raises(BundleNotFoundError, match="neither manifest.json"):
        Summarizer.from_pretrained(tmp_path)
    with pytest.raises(OptionError, match="path"):
        Summarizer.from_pretrained(5)


def test_missing_bundle_and_unknown_backend(tmp_path, bundle_dir):
    with pytest.raises(BundleNotFoundError):
        Summarizer.from_pretrained(tmp_path / "nothing")
    with pytest.raises(OptionError, match="backend"):
        Summarizer.from_pretrained(bundle_dir, backend="tensorflow")
    with pytest.raises(OptionError, match="checkpoint"):
        Summarizer.from_pretrained(bundle_dir, backend="torch")


def test_altered_file(bundle_copy):
    data = bytearray((bundle_copy / C.DECODER_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bundle_copy / C.DECODER_FILE).write_bytes(bytes(data))
    with pytest.raises(BundleIntegrityError, match="decoder.onnx.*checksum"):
        Summarizer.from_pretrained(bundle_copy)


def test_missing_file(bundle_copy):
    (bundle_copy / C.TOKENIZER_FILE).unlink()
    with pytest.raises(BundleNotFoundError, match="tokenizer.json is missing"):
        Bundle.load(bundle_copy)
    (bundle_copy / C.MANIFEST_FILE).unlink()
    with pytest.raises(BundleNotFoundError, match="manifest.json"):
        Bundle.load(bundle_copy)


@pytest.mark.parametrize("change,error,message", [
    ({"format_version": 99}, BundleVersionError, "format_version 99"),
    ({"format_version": True}, BundleVersionError, "format_version True"),
    ({"kind": "summit"}, BundleVersionError, "kind 'summit' is not one"),
    ({"kind": "dyle"}, BundleIntegrityError, "lacks \\['model.extractor'\\]"),
    ({"kind": ["pagesum"]}, BundleVersionError, "is not one this locsum runs"),
    ({"extra": 1}, BundleIntegrityError, "unknown keys \\['extra'\\]"),
    ({"dtype": "float16"}, BundleIntegrityError, "dtype"),
    ({"units": {"page_tokens": 4096}}, BundleIntegrityError, "page_tokens=4096 is over"),
    ({"units": {"page_tokens": "64"}}, BundleIntegrityError, "page_tokens"),
    ({"units": {"max_pages": 8}}, BundleIntegrityError, "max_pages"),
    ({"generation": {"max_length": 1000}}, BundleIntegrityError, "max_length=1000 is over"),
    ({"generation": {"length_penalty": "nan"}}, BundleIntegrityError, "length_penalty"),
    ({"special_tokens": {"bos": 0, "pad": 1, "eos": 99999, "decoder_start": 2}}, BundleIntegrityError, "eos"),
    ({"special_tokens": {"bos": 0}}, BundleIntegrityError, "missing keys"),
    ({"files": {"../../etc/passwd": "0" * 64}}, BundleIntegrityError, "plain file name"),
    ({"graphs": {}}, BundleIntegrityError, "graphs lacks"),
    ({"model": []}, BundleIntegrityError, "model"),
    ({"model": {"d_model": -4}}, BundleIntegrityError, "unknown keys|d_model"),
    ({"limits": {"max_tokens": 0}}, BundleIntegrityError, "max_tokens"),
])
def test_manifest_that_breaks_its_schema(bundle_copy, change, error, message):
    path = bundle_copy / C.MANIFEST_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(error, match=message):
        Bundle.load(bundle_copy)


@pytest.mark.parametrize("content,message", [
    (b"[1, 2]", "not an object"), (b"\xff\xfe{}", "not UTF-8"), (b"{}", "format_version None"), (b"", "not valid JSON"),
])
def test_damaged_manifest(bundle_copy, content, message):
    (bundle_copy / C.MANIFEST_FILE).write_bytes(content)
    with pytest.raises(BundleError, match=message):
        Summarizer.from_pretrained(bundle_copy)


def test_manifest_missing_a_key(bundle_copy):
    path = bundle_copy / C.MANIFEST_FILE
    values = json.loads(path.read_text())
    del values["graphs"]
    path.write_text(json.dumps(values))
    with pytest.raises(BundleIntegrityError, match="missing keys \\['graphs'\\]"):
        Bundle.load(bundle_copy)


def test_format_3_manifest_is_read_with_limits_in_tokens(bundle_copy):
    path = bundle_copy / C.MANIFEST_FILE
    values = json.loads(path.read_text())
    values["units"] = {**values["units"], "max_pages": 16, "truncate": False}
    del values["limits"]
    path.write_text(json.dumps({**values, "format_version": 3}))
    manifest = Bundle.load(bundle_copy).manifest
    assert "max_pages" not in manifest.units and manifest.limits == {"truncate": False}


def test_tokenizer_of_another_model(bundle_copy):
    from tokenizers import Tokenizer, models

    vocab = {f"w{i}": i for i in range(5000)}
    Tokenizer(models.WordLevel(vocab, unk_token="w3")).save(str(bundle_copy / C.TOKENIZER_FILE))
    with pytest.raises(BundleError, match="another model"):
        Summarizer.from_pretrained(bundle_copy, verify=False)


def test_a_tokenizer_that_marks_no_word_starts_loads_and_its_summary_says_which_option_to_turn_off(bundle_copy):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab_size = json.loads((bundle_copy / C.MANIFEST_FILE).read_text())["model"]["vocab_size"]
    plain = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w3"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    plain.save(str(bundle_copy / C.TOKENIZER_FILE))
    summarizer = Summarizer.from_pretrained(bundle_copy, verify=False)  # the piece tables are not built at load
    with pytest.raises(OptionError, match="known_words needs a tokenizer that marks where words start"):
        summarizer.summarize("w5 w6 w7 w8", known_words=True, keywords=0, max_length=4)


def test_manifest_that_is_not_json(bundle_copy):
    (bundle_copy / C.MANIFEST_FILE).write_text("{not json")
    with pytest.raises(BundleIntegrityError, match="not valid JSON"):
        Bundle.load(bundle_copy)


def test_options_object_with_overrides(summarizer):
    chosen = summarizer.options(num_beams=2, max_length=6)
    summary = summarizer.summarize("The board met on Monday. It approved the budget.", options=chosen, max_length=4)
    assert 1 <= len(summary.token_ids) <= 3
    for bad in ({"num_beams": 2}, chosen.generation, "greedy"):
        with pytest.raises(OptionError, match="options is a"):
            summarizer.summarize("The board met on Monday.", options=bad)
