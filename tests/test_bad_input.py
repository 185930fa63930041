"""Every kind of bad input gets a typed error that says what was wrong and what to do."""

import json
import shutil

import pytest

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.bundle import Bundle
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


def test_document_over_the_limit(summarizer):
    text = "The committee discussed the budget of the project. " * 400
    with pytest.raises(InputTooLongError, match="max_pages"):
        summarizer.summarize(text)


def test_truncation_is_announced(summarizer, caplog):
    text = "The committee discussed the budget of the project. " * 400
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        summary = summarizer.summarize(text, truncate=True, max_length=4)
    assert "truncated" in caplog.text and len(summary.units) == 64


@pytest.mark.parametrize("options", [dict(beams=4), dict(temperature=0.7), dict(num_beams=0), dict(page_tokens=4096)])
def test_unknown_or_bad_options(summarizer, options):
    with pytest.raises(OptionError) as err:
        summarizer.summarize("Short text to summarize.", **options)
    if "beams" in options:
        assert "num_beams" in str(err.value)  # lists the accepted names


def test_empty_query_and_bad_batches(summarizer):
    with pytest.raises(EmptyInputError, match="query"):
        summarizer.summarize("Some text.", query="  ")
    with pytest.raises(InputError, match="summarize_batch"):
        summarizer.summarize_batch("one string")
    with pytest.raises(InputError, match="queries"):
        summarizer.summarize_batch(["a text.", "another."], queries=["only one"])


def test_default_bundle_comes_from_the_environment(bundle_dir, tmp_path, monkeypatch):
    from locsum_sdk import summarizer as module

    monkeypatch.setattr(module, "DEFAULT_BUNDLE", bundle_dir)
    assert Summarizer.from_pretrained().summarize("The board met on Monday.", max_length=4).token_ids
    monkeypatch.setattr(module, "DEFAULT_BUNDLE", tmp_path / "absent")
    with pytest.raises(BundleNotFoundError, match="no default bundle"):
        Summarizer.from_pretrained()


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
    ({"format_version": 99}, BundleVersionError, "format version 99"),
    ({"kind": "dyle"}, BundleVersionError, "'dyle' bundle"),
    ({"extra": 1}, BundleIntegrityError, "unknown keys"),
])
def test_manifest_for_another_version_or_kind(bundle_copy, change, error, message):
    path = bundle_copy / C.MANIFEST_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(error, match=message):
        Bundle.load(bundle_copy)


def test_tokenizer_of_another_model(bundle_copy):
    from tokenizers import Tokenizer, models

    vocab = {f"w{i}": i for i in range(5000)}
    Tokenizer(models.WordLevel(vocab, unk_token="w3")).save(str(bundle_copy / C.TOKENIZER_FILE))
    with pytest.raises(BundleError, match="another model"):
        Summarizer.from_pretrained(bundle_copy, verify=False)


def test_manifest_that_is_not_json(bundle_copy):
    (bundle_copy / C.MANIFEST_FILE).write_text("{not json")
    with pytest.raises(BundleIntegrityError, match="not valid JSON"):
        Bundle.load(bundle_copy)
