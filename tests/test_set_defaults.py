"""A bundle copied with other default options: the same graphs, new defaults that the runtime then uses; bad
options, an altered source and an existing output are refused with nothing written."""

import shutil
from pathlib import Path

import pytest

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.bundle import Bundle
from locsum_sdk.cli import main
from locsum_sdk.errors import BundleIntegrityError, ExportError, OptionError
from locsum_sdk.exporters.defaults import set_defaults

ENGINES = Path(__file__).resolve().parents[1] / "engines"


def test_the_copy_has_the_new_defaults_and_the_same_files(bundle_dir, tmp_path):
    carded = tmp_path / "carded"
    shutil.copytree(bundle_dir, carded)
    (carded / "README.md").write_text("a card measured at the old defaults")  # not listed in the manifest
    copy = set_defaults(carded, tmp_path / "copy", {"min_length": 5, "num_beams": 2, "page_tokens": 32})
    source = Bundle.load(bundle_dir).manifest
    assert copy.manifest.files == source.files  # graphs and tokenizer byte for byte
    assert copy.manifest.graphs == source.graphs and copy.manifest.model == source.model
    assert copy.manifest.generation == {**source.generation, "min_length": 5, "num_beams": 2}
    assert copy.manifest.units == {**source.units, "page_tokens": 32}
    assert sorted(p.name for p in copy.path.iterdir()) == sorted([*source.files, C.MANIFEST_FILE])
    summarizer = Summarizer.from_pretrained(copy.path)
    assert summarizer.defaults.generation.num_beams == 2 and summarizer.defaults.units.page_tokens == 32
    text = "The committee met on Tuesday to review the budget. " * 20
    again = Summarizer.from_pretrained(bundle_dir).summarize(text, num_beams=2, min_length=5, page_tokens=32)
    assert summarizer.summarize(text).token_ids == again.token_ids  # the defaults are what an override gives


def test_a_packed_bundle_is_copied_packed_and_a_new_common_words_list_replaces_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = Bundle.load(ENGINES / "pagesum")
    assert C.COMMON_WORDS_FILE in source.manifest.packed
    listed = tmp_path / "common.txt"
    listed.write_text("board\nmeeting\n", encoding="utf-8")
    copy = set_defaults(source.path, tmp_path / "copy", {"num_beams": 2}, common_words=listed)
    assert copy.manifest.packed == {k: v for k, v in source.manifest.packed.items() if k != C.COMMON_WORDS_FILE}
    assert copy.file(C.COMMON_WORDS_FILE).read_text(encoding="utf-8") == "board\nmeeting\n"
    assert copy.file(C.DECODER_FILE).read_bytes() == source.file(C.DECODER_FILE).read_bytes()
    assert not (copy.path / (C.COMMON_WORDS_FILE + ".xz")).exists()
    summary = Summarizer.from_pretrained(copy.path).summarize("The board met on Monday to approve the budget.")
    assert summary.text


@pytest.mark.parametrize("options, message", [
    ({"beam_size": 4}, "unknown option"),
    ({"num_beams": 0}, "num_beams"),
    ({"max_length": 100_000}, "positions"),
    ({"top_k": 3}, "other kinds"),
    (["min_length", 5], "dict"),
])
def test_bad_options_write_nothing(bundle_dir, tmp_path, options, message):
    with pytest.raises(OptionError, match=message):
        set_defaults(bundle_dir, tmp_path / "copy", options)
    assert list(tmp_path.iterdir()) == []


def test_the_output_is_checked(bundle_dir, tmp_path):
    with pytest.raises(ExportError, match="source bundle"):
        set_defaults(bundle_dir, bundle_dir, {"min_length": 5}, force=True)
    (tmp_path / "copy").mkdir()
    with pytest.raises(ExportError, match="force"):
        set_defaults(bundle_dir, tmp_path / "copy", {"min_length": 5})
    assert set_defaults(bundle_dir, tmp_path / "copy", {"min_length": 5}, force=True).manifest.generation[
        "min_length"] == 5


def test_an_altered_source_is_refused(bundle_dir, tmp_path):
    damaged = tmp_path / "damaged"
    set_defaults(bundle_dir, damaged, {"min_length": 5})
    with open(damaged / C.DECODER_FILE, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(BundleIntegrityError, match="checksum"):
        set_defaults(damaged, tmp_path / "copy", {"min_length": 6})
    assert not (tmp_path / "copy").exists()


def test_cli_copies_a_bundle_with_the_options_given(bundle_dir, tmp_path, capsys):
    output = tmp_path / "copy"
    assert main(["export", "--bundle", str(bundle_dir), "--output", str(output), "--min-length", "7",
                 "--no-known-words"]) == 0
    generation = Bundle.load(output).manifest.generation
    assert generation["min_length"] == 7 and generation["known_words"] is False
    assert main(["export", "--bundle", str(bundle_dir), "--output", str(tmp_path / "none")]) == 2
    assert "give some" in capsys.readouterr().err
    # --quantize exports a bundle again from its rebuilt module: a from-scratch bundle has none
    assert main(["export", "--bundle", str(bundle_dir), "--output", str(tmp_path / "q"), "--quantize", "int8",
                 "--min-length", "7"]) == 2
    assert "only an int8 or blocks HierEncDec bundle" in capsys.readouterr().err
    assert main(["export", "--bundle", str(bundle_dir), "--output", str(tmp_path / "q"), "--unit-rows", "8"]) == 2
    assert "add --quantize blocks" in capsys.readouterr().err
    assert main(["export", "--bundle", str(bundle_dir), "--min-length", "7"]) == 2
    assert "needs --output" in capsys.readouterr().err
    assert main(["export", "--bundle", str(bundle_dir), "--checkpoint", "c", "--output", str(tmp_path / "c")]) == 2
    assert "export needs" in capsys.readouterr().err
    assert not (tmp_path / "none").exists() and not (tmp_path / "q").exists()
