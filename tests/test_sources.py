"""Where each sentence of a summary came from (`locsum_sdk.sources`): the rule on units built by hand, and every
kind's summaries giving every sentence passages inside its units or marking it unsupported, in the API, the JSON,
the service and `locsum summarize --sources`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import document
from hypothesis import given, settings
from hypothesis import strategies as st

from locsum_sdk import Summarizer
from locsum_sdk.sources import SUPPORT_SHARE, sentence_sources, token_spans
from locsum_sdk.units import Unit
from locsum_sdk.words import content_words

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["The board approved the library roof budget. The contractor starts work in March.",
             "Marta reported the survey results. Children asked for a quiet reading room."]


def units_of(documents: list[str]) -> list[Unit]:
    return [Unit(i, 0, len(text), text, ()) for i, text in enumerate(documents)]


def summary_of(tokenizer, text: str, weights: list[float]):
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    decoded = tokenizer.decode(ids, skip_special_tokens=True).strip()
    return decoded, ids, np.tile(np.array(weights, dtype=np.float32), (len(ids), 1))


def test_a_copied_sentence_cites_its_passage_and_an_invented_one_is_unsupported(tokenizer):
    text, ids, weights = summary_of(tokenizer, "Marta reported the survey results. Penguins sang opera loudly.",
                                    [0.5, 0.5])
    copied, invented = sentence_sources(text, ids, weights, units_of(DOCUMENTS), tokenizer)
    assert text[copied.start:copied.end] == "Marta reported the survey results."
    (passage,) = copied.passages
    assert (passage.unit, passage.document, passage.shared, copied.supported) == (1, 1, 1.0, True)
    assert DOCUMENTS[1][passage.start:passage.end] == "Marta reported the survey results."
    assert invented.passages == () and not invented.supported
    assert copied.unit_weights == pytest.approx((0.5, 0.5))


def test_a_sentence_joined_from_two_passages_cites_both_and_weights_decide_where_to_look(tokenizer):
    text, ids, weights = summary_of(tokenizer, "The contractor reported the survey results.", [0.5, 0.5])
    (joined,) = sentence_sources(text, ids, weights, units_of(DOCUMENTS), tokenizer)
    assert sorted(p.unit for p in joined.passages) == [0, 1] and joined.supported
    assert len(content_words("The contractor reported the survey results.")) == 4
    text, ids, weights = summary_of(tokenizer, "Marta reported the survey results.", [0.9, 0.1])
    (elsewhere,) = sentence_sources(text, ids, weights, units_of(DOCUMENTS), tokenizer)
    assert elsewhere.passages == () and not elsewhere.supported  # unit 1 weighs under half of unit 0: not looked in


def test_token_spans_cover_the_summary(tokenizer):
    text = "The board met. It approved the budget for the roof, 12 May 2026."
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    decoded = tokenizer.decode(ids, skip_special_tokens=True).strip()
    spans = token_spans(tokenizer, ids, decoded)
    assert spans[0][0] == 0 and spans[-1][1] == len(decoded)
    assert all(a <= b for a, b in spans) and all(b == c for (_, b), (c, _) in zip(spans, spans[1:]))


def prefix_spans(tokenizer, ids: list[int], text: str) -> list[tuple[int, int]]:
    """What each token adds, read from the decoding of every prefix (quadratic: the definition `token_spans` keeps)."""
    full = tokenizer.decode(ids, skip_special_tokens=True)
    lead = len(full) - len(full.lstrip())
    ends = [len(tokenizer.decode(ids[: i + 1], skip_special_tokens=True)) - lead for i in range(len(ids))]
    return [(min(max(a, 0), len(text)), min(max(b, 0), len(text))) for a, b in zip([0, *ends[:-1]], ends)]


@pytest.fixture(scope="module")
def tokenizers_of_three_families(tokenizer):
    """The tests' byte-level BPE, the default bundle's (byte-level with digits apart and special tokens), a WordPiece
    (whose decoder joins "##" pieces and cleans spaces before punctuation) and a SentencePiece-style one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from locsum_sdk import constants as C
    from locsum_sdk.bundle import Bundle

    default = Tokenizer.from_file(str(Bundle.load(ROOT / "engines" / "default").file(C.TOKENIZER_FILE)))
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "[CLS]": 1, "gan": 2, "##y": 3, ".": 4, "the": 5, "##s": 6,
                                            ",": 7, "'": 8, "t": 9}, unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.decoder = decoders.WordPiece()
    wordpiece.add_special_tokens(["[CLS]"])
    metaspace = Tokenizer(models.BPE({"▁Gan": 0, "y": 1, "▁": 2, "ga": 3, ".": 4, "▁the": 5, "<0xC3>": 6},
                                     [], unk_token=None))
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace()
    metaspace.decoder = decoders.Metaspace()
    return [tokenizer, default, wordpiece, metaspace]


@settings(max_examples=120, deadline=None)
@given(which=st.integers(0, 3), draw=st.lists(st.integers(0, 2**31), max_size=60))
def test_token_spans_read_locally_are_the_prefix_decodings(tokenizers_of_three_families, which, draw):
    tokenizer = tokenizers_of_three_families[which]
    ids = [n % tokenizer.get_vocab_size() for n in draw]  # any ids: split characters, specials, lone "##" pieces
    text = tokenizer.decode(ids, skip_special_tokens=True).strip()
    assert token_spans(tokenizer, ids, text) == prefix_spans(tokenizer, ids, text)


@pytest.mark.parametrize("bundle", ["bundle_dir", "hierencdec_bundle_dir", "dyle_bundle_dir", "hiersumm_bundle_dir",
                                    "llama_bundle_dir"])
def test_every_sentence_of_every_kind_has_passages_in_its_units_or_is_unsupported(bundle, request):
    summarizer = Summarizer.from_pretrained(request.getfixturevalue(bundle), threads=1)
    rng = random.Random(4)
    documents = [document(rng, 10), document(rng, 8)]
    summary = summarizer.summarize(documents, query="What was decided?", max_length=24, num_beams=2, min_length=8)
    assert summary.sentences, summary.text  # random weights write little a passage holds: the contract is checked
    for sentence in summary.sentences:
        assert 0 <= sentence.start < sentence.end <= len(summary.text)
        assert len(sentence.unit_weights) == len(summary.units)
        assert sentence.passages or not sentence.supported
        for passage in sentence.passages:
            unit = summary.units[passage.unit]
            assert unit.document == passage.document and unit.start <= passage.start < passage.end <= unit.end
            assert 0 < passage.shared <= 1
        covered = set().union(*(content_words(documents[p.document][p.start:p.end]) for p in sentence.passages))
        words = content_words(summary.text[sentence.start:sentence.end])
        assert sentence.supported == (bool(words) and len(covered & words) >= SUPPORT_SHARE * len(words))
    body = summary.to_dict()
    assert [s["start"] for s in body["sentences"]] == [s.start for s in summary.sentences]


def test_the_command_line_marks_sentences_and_quotes_their_lines(tmp_path, capsys):
    """The default bundle on the example meeting's first lines: each cited passage is quoted from the line named."""
    from pathlib import Path

    from locsum_sdk.cli import main

    meeting = Path(__file__).resolve().parents[1] / "examples" / "meeting.txt"
    lines = meeting.read_text(encoding="utf-8").splitlines()[:30]
    notes = tmp_path / "notes.txt"
    notes.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["summarize", str(notes), "--sources", "--max-length", "60"]) == 0
    out = capsys.readouterr().out
    summary, _, cited = out.partition("\n\n")
    assert "[1]" in summary and cited.strip(), out
    for line in filter(None, cited.splitlines()):
        marker, place, quote = line.split(" ", 2)
        number = int(place.rsplit(":", 2)[-2])
        assert marker.startswith("[") and quote.strip('"') in " ".join(lines[number - 1].split()), line
    assert main(["summarize", str(notes), "--json", "--max-length", "12"]) == 0
    assert "sentences" in json.loads(capsys.readouterr().out)


def test_drop_unsupported_leaves_out_what_no_passage_supports(tokenizer):
    from locsum_sdk.sources import supported_only

    text, ids, weights = summary_of(tokenizer, "Marta reported the survey results. Penguins sang opera loudly. The "
                                    "board approved the library roof budget.", [0.5, 0.5])
    sentences = sentence_sources(text, ids, weights, units_of(DOCUMENTS), tokenizer)
    assert [s.supported for s in sentences] == [True, False, True]
    kept, spans = supported_only(text, sentences)
    assert kept == "Marta reported the survey results. The board approved the library roof budget."
    assert [kept[s.start:s.end] for s in spans] == ["Marta reported the survey results.",
                                                    "The board approved the library roof budget."]
    assert supported_only(text, [sentences[1]]) == ("", [])


@pytest.fixture(scope="module")
def default_summarizer():
    return Summarizer.from_pretrained(threads=2)


def meeting_lines(count: int) -> str:
    from pathlib import Path

    meeting = (Path(__file__).resolve().parents[1] / "examples" / "meeting.txt").read_text(encoding="utf-8")
    return "\n".join(meeting.splitlines()[:count])


def test_a_partial_summary_gives_its_complete_sentences_with_the_sources_the_summary_gives(default_summarizer):
    partials = []
    summary = default_summarizer.summarize(meeting_lines(30), max_length=60, num_beams=1,
                                           on_step=lambda step, reported: partials.append(reported[0]))
    assert len(summary.sentences) >= 2, summary.text
    seen = 0
    for partial in partials:
        assert len(partial.units) == len(summary.units) and partial.unit_weights.shape == (
            len(partial.token_ids), len(summary.units))
        sentences = default_summarizer.partial_sentences(partial)
        assert sentences == summary.sentences[: len(sentences)] and len(sentences) >= seen  # greedy: only grows
        seen = len(sentences)
    assert seen == len(summary.sentences)  # the last ones are complete once decoding ends
    text = default_summarizer.partial_text(partials[5])
    assert summary.text.startswith(text) and text


def test_the_option_drops_sentences_in_the_summary_and_on_the_command_line(default_summarizer, tmp_path, capsys,
                                                                          monkeypatch):
    """The option changes the text, never the tokens: on the command line the supported sentences of the summary
    are kept (the default bundle's summary here may support every one); with a support share no sentence reaches,
    all are dropped (some kept and some dropped: `test_drop_unsupported_leaves_out_what_no_passage_supports`)."""
    from locsum_sdk import sources
    from locsum_sdk.cli import main

    summarizer = default_summarizer
    text = meeting_lines(30)
    lengths = {"min_length": 50, "max_length": 80}  # long enough for two sentences whatever the bundle's step
    full = summarizer.summarize(text, **lengths)
    notes = tmp_path / "notes.txt"
    notes.write_text(text, encoding="utf-8")
    assert main(["summarize", str(notes), "--min-length", "50", "--max-length", "80", "--drop-unsupported"]) == 0
    assert capsys.readouterr().out.strip() == sources.supported_only(full.text, full.sentences)[0]
    monkeypatch.setattr(sources, "SUPPORT_SHARE", 1.01)
    dropped = summarizer.summarize(text, **lengths, drop_unsupported=True)
    assert dropped.token_ids == full.token_ids and len(full.sentences) >= 2
    assert (dropped.text, dropped.sentences) == ("", [])
