"""Paging and summarizing real long inputs from ../shared/data (skipped where that folder does not exist)."""

import json
import random

import pytest
from conftest import SHARED_DATA

from locsum_sdk.units import Pager, PagingOptions, SpecialTokens, as_documents

pytestmark = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} (the shared data) is not here")


def examples(name: str, count: int, seed: int = 0) -> list[dict]:
    lines = (SHARED_DATA / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in random.Random(seed).sample(lines, count)]


def test_qmsum_transcripts_page_by_turns_within_budget(tokenizer):
    pager = Pager(tokenizer, SpecialTokens(), PagingOptions(page_tokens=512))
    for example in examples("qmsum/test.jsonl", 3):
        (transcript,) = example["documents"]
        units = pager(as_documents(example["documents"]), example["query"])
        assert all(len(u.token_ids) <= 512 for u in units)
        assert all(u.text == transcript[u.start : u.end] for u in units)
        assert " ".join(u.text for u in units).split() == transcript.split()


def test_multinews_clusters_page_by_document(tokenizer):
    pager = Pager(tokenizer, SpecialTokens(), PagingOptions(policy="document", page_tokens=1024))
    for example in examples("multinews/test.jsonl", 5):
        units = pager(as_documents(example["documents"]))
        assert sorted({u.document for u in units}) == list(range(len(example["documents"])))


def test_summarize_a_real_meeting_on_both_backends(bundle_dir, checkpoint_dir):
    from locsum_sdk import Summarizer

    (example,) = examples("qmsum/test.jsonl", 1, seed=3)
    options = dict(num_beams=2, max_length=12, page_tokens=128)
    ort = Summarizer.from_pretrained(bundle_dir, threads=1).summarize(example["documents"], example["query"], **options)
    ref = Summarizer.from_pretrained(checkpoint_dir, backend="torch").summarize(
        example["documents"], example["query"], **options
    )
    assert len(ort.units) > 50
    assert ort.token_ids == ref.token_ids


def test_no_real_english_input_is_taken_for_another_language():
    """Every input of the shared data (English) passes the checks of `locsum_sdk.familiar` against the default
    bundle's lists: its letters the default's scripts, its words enough of the default's common ones, and enough
    words for its length."""
    import lzma
    from pathlib import Path

    from locsum_sdk.familiar import known_scripts, uncommon, unfamiliar, wordless
    from locsum_sdk.words import WordList

    default = Path(__file__).resolve().parents[1] / "engines" / "default"
    common = WordList(lzma.open(default / "common_words.txt.xz", "rt", encoding="utf-8").read().split())
    scripts = known_scripts(lzma.open(default / "words.txt.xz", "rt", encoding="utf-8").read().split())
    flagged, count = [], 0
    for path in sorted(SHARED_DATA.glob("*/*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            documents = json.loads(line)["documents"]
            count += 1
            if unfamiliar(documents, scripts) or uncommon(documents, common) or wordless(documents):
                flagged.append(f"{path.relative_to(SHARED_DATA)}:{number + 1}")
    assert count > 1000 and flagged == []
