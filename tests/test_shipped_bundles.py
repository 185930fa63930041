"""Every trained bundle shipped under engines/ besides the default: intact, within the size a shipped bundle may
have, with its model card and measured figures, and summarizing the shipped example as its kind does; every bundle,
the default too: decoding as its card was measured, and quoted in README and docs/bundles.md by its card's figures."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from locsum_sdk import Summarizer
from locsum_sdk.bundle import Bundle
from locsum_sdk.evaluation import MADE_UP

ROOT = Path(__file__).resolve().parents[1]
MEETING = ROOT / "examples" / "meeting.txt"
SHIPPED = sorted(p.parent for p in (ROOT / "engines").glob("*/manifest.json") if p.parent.name != "default")
MAX_MB = 30


@pytest.mark.parametrize("bundle", SHIPPED, ids=[p.name for p in SHIPPED])
def test_a_shipped_bundle_is_intact_small_and_documented(bundle):
    loaded = Bundle.load(bundle, verify=True)
    assert loaded.manifest.kind == bundle.name  # engines/<kind>
    assert sum(p.stat().st_size for p in bundle.iterdir()) <= MAX_MB * 2**20
    card = (bundle / "README.md").read_text()
    evaluation = json.loads((bundle / "evaluation.json").read_text())
    assert f"of kind `{bundle.name}`" in card and "### qmsum" in card and "qmsum" in evaluation["rouge"]
    assert evaluation["parity"]["examples"] > 0


@pytest.mark.parametrize("bundle", SHIPPED, ids=[p.name for p in SHIPPED])
def test_a_shipped_bundle_summarizes_documents_and_a_meeting(bundle):
    summarizer = Summarizer.from_pretrained(bundle, threads=2)
    meeting = MEETING.read_text(encoding="utf-8")
    turns = meeting.splitlines()
    documents = ["\n".join(turns[k::3]) for k in range(3)]
    for text in (meeting, documents):
        summary = summarizer.summarize(text, query="What was decided?", max_length=24)
        assert summary.text.strip() and summary.kind == bundle.name and summary.units
        assert summary.unit_weights.shape[1] == len(summary.units)
        assert np.allclose(summary.unit_weights.sum(axis=1), 1.0, atol=1e-4)


EVERY = sorted(p.parent for p in (ROOT / "engines").glob("*/manifest.json"))


@pytest.mark.parametrize("bundle", EVERY, ids=[p.name for p in EVERY])
def test_a_copying_bundle_decodes_with_known_words_and_its_card_says_what_it_measured(bundle):
    loaded = Bundle.load(bundle, verify=False)
    manifest = loaded.manifest
    evaluation = json.loads((bundle / "evaluation.json").read_text())
    assert "words.txt" in loaded.names()  # the training text's words, for known_words
    if manifest.model.get("copy"):
        assert manifest.generation["known_words"] is True  # else copied pieces run on into words no text holds
        assert evaluation["defaults"]["known_words"] is True  # the card was measured with it
        made_up = [report["locsum (this bundle)"][MADE_UP]["mean"] for report in evaluation["rouge"].values()]
        # a word of one piece the tokenizer has stays possible ("Ġsandw" ending a word); the worst card: DYLE on
        # L-Eval, outside its training domains, 0.10 a summary
        assert max(made_up) < 0.15


def quoted_row(page: Path, marker: str) -> str:
    rows = [line for line in page.read_text().splitlines() if line.startswith("|") and marker in line]
    assert len(rows) == 1, (page.name, marker, rows)
    return rows[0]


def pairs(text: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in re.findall(r"(\d+\.\d+) / (\d+\.\d+)", text)]


@pytest.mark.parametrize("bundle", EVERY, ids=[p.name for p in EVERY])
def test_a_card_is_titled_by_the_name_its_bundle_is_loaded_by(bundle):
    """`train.release` titles a card by its output directory: a bundle released elsewhere and copied under engines/
    must not carry that other name."""
    title = (bundle / "README.md").read_text(encoding="utf-8").splitlines()[0]
    assert title.startswith(f"# {bundle.name}: "), title


@pytest.mark.parametrize("bundle", EVERY, ids=[p.name for p in EVERY])
def test_the_figures_readme_and_the_bundle_guide_quote_are_the_cards(bundle):
    """README's table and docs/bundles.md quote each bundle's QMSum test ROUGE-1 / ROUGE-2 and, in their header, lead's
    and random's on the same examples: all of them the figures in the bundle's evaluation.json."""
    qmsum = json.loads((bundle / "evaluation.json").read_text())["rouge"]["qmsum"]

    def card(row: str, places: int) -> tuple[float, float]:
        return tuple(round(qmsum[row][metric]["mean"], places) for metric in ("rouge1", "rouge2"))

    for page, marker in ((ROOT / "README.md", f"`engines/{bundle.name}`"),
                         (ROOT / "docs" / "bundles.md", f"(cards/{bundle.name}.md)")):
        assert pairs(quoted_row(page, marker))[0] == card("locsum (this bundle)", 2), page.name
        header = quoted_row(page, "(lead ")
        assert pairs(header) == [card("lead", 1), card("random", 1)], page.name
