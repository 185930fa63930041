"""Whether an input is like a bundle's training text (`locsum_sdk.familiar`): one mostly in scripts the bundle's words
do not hold, with few of the bundle's common words, or with few words at all, is announced, at a cost that does not
grow with the input."""

import lzma
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from locsum_sdk import Summarizer
from locsum_sdk.familiar import (
    COMMON_FLOOR,
    DOCUMENT_FLOOR,
    SAMPLE_CHARACTERS,
    WORDLESS_CHARACTERS,
    WORDLESS_SAMPLE,
    known_scripts,
    letter_scripts,
    sample,
    script_of,
    uncommon,
    unfamiliar,
    wordless,
)
from locsum_sdk.words import WordList

ROOT = Path(__file__).resolve().parents[1]
ARABIC = "ناقش الاجتماع ميزانية المشروع والجدول الزمني. "
ENGLISH = "The committee discussed the budget of the project. "
GERMAN = ("Die Sitzung begann am Montag mit einer Diskussion über das Budget für das neue Dach der Bibliothek. Der "
          "Vorsitzende erklärte, dass die Kosten deutlich gestiegen seien und dass die Gemeinde zusätzliche Mittel "
          "beantragen müsse. Mehrere Mitglieder äußerten Bedenken wegen des Zeitplans, weil die Arbeiten im Winter "
          "nur langsam vorankommen würden. ")
SPANISH = ("La reunión comenzó el lunes con una discusión sobre el presupuesto para el nuevo techo de la biblioteca. "
           "El presidente explicó que los costos habían aumentado considerablemente y que el municipio tendría que "
           "solicitar fondos adicionales. ")
MEETING = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8")


def default_common_words() -> WordList:
    with lzma.open(ROOT / "engines" / "default" / "common_words.txt.xz", "rt", encoding="utf-8") as listed:
        return WordList(listed.read().split())


COMMON = default_common_words()


@pytest.mark.parametrize("text, flagged", [
    (MEETING, False), (MEETING[:3000], False), (GERMAN * 4, True), (SPANISH * 6, True),
    (", ".join(["Alice Johnson", "Robert Smith", "Maria Garcia", "Thomas Brown"] * 30), True),  # not prose
    (GERMAN, False),  # too few words to say
])
def test_an_input_with_few_of_the_bundles_common_words_is_found(text, flagged):
    result = uncommon([text], COMMON)
    assert (result is not None) == flagged
    if flagged:
        assert result.share < COMMON_FLOOR and result.words >= 100
        assert "language the bundle was not trained on" in result.message()
    assert uncommon([text], WordList([])) is None  # no common words: nothing to judge by


@pytest.mark.parametrize("texts, words", [
    (["😀🚀 " * 300], 0), (["12,345.67 -8.9% " * 100], 0), (["a" * 200_000], 1),
    (["x" * 10_000_000], 1),  # read through its sample
    (["Q3 " + "1 2 3 4 5 6 7 8 9 10 " * 40], 1), (["12 34 " * 20, "56 78 " * 20, "😀 " * 100], 0),
    ([MEETING], None), ([ENGLISH], None), (["12345 " * 10], None),  # prose; too few characters to say
    (["Revenue 2023: 12,345.67 USD; costs 2,345.00 USD; " * 20], None),  # a table with its words
    ([ARABIC * 20], None), (["会议讨论了预算。" * 60], None),  # letters of any script are words
])
def test_an_input_of_few_words_for_its_length_is_found(texts, words):
    result = wordless(texts)
    if words is None:
        assert result is None
    else:
        assert result is not None and result.words == words
        sampled = max(WORDLESS_SAMPLE, DOCUMENT_FLOOR * len(texts))  # at most, every text read at its floor
        assert result.words * WORDLESS_CHARACTERS < result.characters <= sampled
        assert "little to draw on" in result.message() and ("no words" in result.message()) == (words == 0)


@pytest.mark.parametrize("character, script", [
    ("a", "LATIN"), ("ß", "LATIN"), ("Ａ", "LATIN"), ("α", "GREEK"), ("Ж", "CYRILLIC"), ("א", "HEBREW"),
    ("ب", "ARABIC"), ("क", "DEVANAGARI"), ("一", "CJK"), ("あ", "HIRAGANA"), ("ｱ", "KATAKANA"), ("한", "HANGUL"),
    ("7", None), (" ", None), (".", None), ("😀", None), ("\u0301", None), ("ʰ", None), ("\ue000", None),
])
def test_a_letter_has_its_script_and_nothing_else_has_one(character, script):
    assert script_of(character) == script


def test_a_long_text_is_read_through_a_bounded_sample():
    text = ENGLISH * 100 + ARABIC * 100_000 + ENGLISH * 100
    kept = sample(text, SAMPLE_CHARACTERS)
    assert len(kept) <= SAMPLE_CHARACTERS and sample(ENGLISH, SAMPLE_CHARACTERS) == ENGLISH
    counts = letter_scripts([text])
    assert sum(counts.values()) <= SAMPLE_CHARACTERS and counts.most_common(1)[0][0] == "ARABIC"
    many = letter_scripts([ENGLISH * 200] * 1000)  # every document read, each through its share
    assert sum(many.values()) <= 1000 * DOCUMENT_FLOOR and set(many) == {"LATIN"}


def test_a_bundles_scripts_leave_out_its_few_foreign_words():
    words = [f"word{letter}" for letter in "abcdefghij" * 50] + ["αβγ", "café"]
    assert known_scripts(words) == {"LATIN"}
    assert known_scripts(["αλφα", "beta"]) == {"LATIN", "GREEK"}
    assert known_scripts([]) == frozenset()


@pytest.mark.parametrize("texts, found", [
    ([ARABIC * 20], ("ARABIC",)),
    ([ENGLISH * 20, ARABIC * 40], ("ARABIC",)),
    (["Встреча. " * 30, "会议讨论了预算。" * 30], ("CYRILLIC", "CJK")),
    ([ENGLISH * 20], None),
    ([ENGLISH * 20 + ARABIC * 5], None),  # a few Arabic names in an English report
    (["12345 !!! 😀 " * 50], None),  # no letters: nothing to say
])
def test_an_input_mostly_in_other_scripts_is_found(texts, found):
    result = unfamiliar(texts, frozenset({"LATIN"}))
    if found is None:
        assert result is None
    else:
        assert result is not None and set(result.scripts) == set(found) and result.share >= 0.5
        message = result.message()
        assert "input's letters" in message and "Latin" in message and "bundle trained on it" in message


def test_no_known_scripts_judge_nothing():
    assert unfamiliar([ARABIC * 5], frozenset()) is None


@given(st.lists(st.text(max_size=300) | st.sampled_from([GERMAN * 3, ENGLISH * 30]), max_size=5))
def test_any_text_is_checked_without_error(texts):
    result = unfamiliar(texts, frozenset({"LATIN"}))
    assert result is None or (0.5 <= result.share <= 1 and "LATIN" not in result.scripts)
    few = uncommon(texts, COMMON)
    assert few is None or (0 <= few.share < COMMON_FLOOR and few.words >= 100 and few.message())
    bare = wordless(texts)
    assert bare is None or (bare.words * WORDLESS_CHARACTERS < bare.characters and bare.message())


@pytest.fixture(scope="module")
def summarizer(bundle_dir):
    loaded = Summarizer.from_pretrained(bundle_dir, threads=1)
    return Summarizer(loaded.backend, loaded.tokenizer, loaded.special, loaded.defaults, loaded.model,
                      words=WordList(ENGLISH.lower().replace(".", "").split()), common_words=COMMON)


def test_a_summary_of_an_input_in_another_script_says_so(summarizer, caplog):
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        english = summarizer.summarize(ENGLISH * 5, max_length=4)
    assert "script" not in caplog.text and english.warnings == [] and english.to_dict()["warnings"] == []
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        summaries = summarizer.summarize_batch([ENGLISH * 5, ARABIC * 5], max_length=4)
    assert "input 1: 100% of the input's letters are Arabic script" in caplog.text and "input 0" not in caplog.text
    assert summaries[0].warnings == [] and len(summaries[1].warnings) == 1
    assert summaries[1].warnings[0].startswith("100% of the input's letters are Arabic script")
    assert summaries[1].to_dict()["warnings"] == summaries[1].warnings
    caplog.clear()
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        german, arabic = summarizer.summarize_batch([GERMAN * 4, ARABIC * 40], max_length=4)
    assert german.warnings[0].startswith("only ") and "input 0: only " in caplog.text
    assert len(arabic.warnings) == 1 and "Arabic script" in arabic.warnings[0]  # one warning: the scripts'
    caplog.clear()
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        emoji = summarizer.summarize("😀🚀 12.5% " * 100, max_length=4)
    assert emoji.warnings == [wordless(["😀🚀 12.5% " * 100]).message()] and "input 0: the input holds no words" \
        in caplog.text


def test_a_bundle_without_words_checks_nothing(bundle_dir, caplog):
    loaded = Summarizer.from_pretrained(bundle_dir, threads=1)
    assert loaded.words is None and loaded.scripts is None
    numbers = Summarizer(loaded.backend, loaded.tokenizer, loaded.special, loaded.defaults, loaded.model,
                         words=WordList(["2024", "100"]))
    assert numbers.scripts is None  # a list of no letters says nothing of the scripts a bundle knows
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        loaded.summarize(ARABIC * 5, max_length=4)
    assert "script" not in caplog.text
