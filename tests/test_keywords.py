"""Keywords: the common-word list, each input's keywords, the decoding bonus, and the option end to end."""

import json
import random

import numpy as np
import pytest
from conftest import WORDS, document
from hypothesis import given
from hypothesis import strategies as st
from test_generation import TableSession
from test_repeats import pieces as repeat_pieces
from test_words import random_pieces, step_by_step, toy_pieces

from locsum_sdk import Summarizer
from locsum_sdk.constants import COMMON_WORDS_FILE
from locsum_sdk.errors import BundleError, DataError, OptionError
from locsum_sdk.generation import GenerationOptions, generate
from locsum_sdk.keywords import Keyword, KeywordBonus, common_words, keywords
from locsum_sdk.words import WordList

COMMON = WORDS[:30]  # the test documents' words split: these count as common, the rest may be keywords


def test_common_words_are_those_enough_distinct_inputs_hold():
    inputs = ["The budget and the market."] * 5 + ["A budget review."] + [f"Note {i} on energy." for i in range(13)]
    common = common_words(inputs)  # 15 distinct inputs: a word needs 3 of them (15% is 2.25)
    assert common.words == ["energy", "note"]  # "budget": 2 distinct inputs (repeats count once); "the": short


def test_keywords_are_the_most_frequent_uncommon_words_with_their_spellings():
    texts = ["ICSI recorded the meeting. Icsi's Meeting room, ICSI again;",
             "the SmartKom demo, smartkom. Budget budget"]
    found = keywords(texts, WordList(["meeting", "again"]), 3)
    assert found == [Keyword("icsi", 3, ("ICSI", "Icsi")), Keyword("budget", 2, ("Budget", "budget")),
                     Keyword("smartkom", 2, ("SmartKom", "smartkom"))]
    assert keywords(texts, WordList([]), 0) == []
    assert [k.word for k in keywords(["room room the the the"], WordList([]), 5)] == ["room"]  # 3 letters: no


def test_what_a_sequence_holds():
    # 3 "Ġgan", 4 "y", 5 "med", 6 "e", 7 "Ġthe", 8 ".", 9 "rive", 10 "Ġsh", 11 "ip"
    bonus = KeywordBonus(toy_pieces(), [{}], 1.0)
    assert bonus.read([0, 3, 4, 5, 6, 7, 10, 11, 8, 9]) == ({"ganymede", "the", "ship", "rive"}, {3, 7, 10}, (9,))
    assert bonus.read([0, 7, 3, 4]) == ({"the", "gany"}, {7, 3}, (3, 4))
    assert bonus.read([3, 8]) == ({"gan"}, {3}, ())
    assert bonus.read([]) == (set(), set(), ()) and bonus.read([3]) == ({"gan"}, {3}, (3,))


def test_a_word_a_mixed_piece_finishes_counts_as_written():
    # 5 "Ġmeet", 7 "s.The" (ends "meets", starts "the"), 4 "ing": the word a mixed piece starts may not go on
    bonus = KeywordBonus(repeat_pieces(), [{}], 1.0)
    assert bonus.read([0, 5, 7]) == ({"meets", "the"}, {5}, ())
    assert bonus.read([0, 5, 7, 4]) == ({"meets", "theing"}, {5}, ())


GANYMEDE_SHIP = {(): {3: frozenset({"ganymede"}), 10: frozenset({"ship"})}, (3,): {4: frozenset({"ganymede"})},
                 (3, 4): {5: frozenset({"ganymede"})}, (3, 4, 5): {6: frozenset({"ganymede"})},
                 (10,): {11: frozenset({"ship"})}}


@pytest.mark.parametrize(("sequence", "favoured"), [
    ([0, 7, 7], [3, 10]),  # nothing written: both first pieces
    ([0, 3, 4], [5, 10]),  # "gany" begun: its next piece, and ship's first
    ([0, 3, 8, 7], [10]),  # "gan" tried and left: not favoured again
    ([0, 3, 4, 5, 6, 7, 10], [11]),  # ganymede written; "sh" begun
    ([0, 3, 4, 5, 6, 10, 11, 8], []),  # both written
])
def test_the_bonus_goes_to_the_next_piece_of_unwritten_keywords(sequence, favoured):
    bonus = KeywordBonus(toy_pieces(), [GANYMEDE_SHIP], 2.5)
    log_probs = np.zeros((1, 1, 12), dtype=np.float32)
    log_probs[0, 0, 8] = -np.inf
    written = bonus.follow(1, 1)
    written.apply(log_probs, step_by_step(bonus.pieces, np.array([[sequence]]), written))
    assert np.flatnonzero(log_probs[0, 0] == 2.5).tolist() == favoured
    assert log_probs[0, 0, 8] == -np.inf and np.count_nonzero(log_probs[0, 0] == 0) == 11 - len(favoured)


def test_spellings_come_from_the_tokenizer(tokenizer):
    from locsum_sdk.words import Pieces

    pieces = Pieces.from_tokenizer(tokenizer)
    found = [Keyword("budget", 2, ("Budget", "budget")), Keyword("smartkom", 1, ("SmartKom",)),
             Keyword("numbered", 1, ("numbered2",))]
    bonus = KeywordBonus.build(tokenizer, pieces, [found, []], 1.0)
    spellings, kept = bonus.spellings[0], 0
    for keyword in found:
        for form in keyword.forms:
            ids = tokenizer.encode(" " + form, add_special_tokens=False).ids
            if all(pieces.letters[token] for token in ids):  # else left out ("2", or a bare space piece)
                assert all(keyword.word in spellings[tuple(ids[:n])][token] for n, token in enumerate(ids))
                kept += 1
            else:
                assert ids[0] not in spellings.get((), {}) or keyword.word not in spellings[()][ids[0]]
    assert kept >= 1 and bonus.spellings[1] == {}


def test_a_spelling_of_more_than_max_pieces_is_not_favoured(tokenizer):
    from locsum_sdk.keywords import MAX_PIECES
    from locsum_sdk.words import Pieces

    pieces = Pieces.from_tokenizer(tokenizer)
    long_word = next(word * repeat for word in ("budget", "market") for repeat in range(2, 40)
                     if len(tokenizer.encode(" " + word * repeat, add_special_tokens=False).ids) > MAX_PIECES)
    huge = "budget" * 2_000  # thousands of pieces: their prefixes would hold millions of ids
    found = [Keyword("market", 3, ("market",)), Keyword(long_word, 2, (long_word,)), Keyword(huge, 1, (huge,))]
    spellings = KeywordBonus.build(tokenizer, pieces, [found], 1.0).spellings[0]
    written = {word for nexts in spellings.values() for found_words in nexts.values() for word in found_words}
    assert written == {"market"} and len(spellings) <= MAX_PIECES


def test_options_and_generate_refuse_bad_keywords():
    for bad in ({"keywords": -1}, {"keywords": 101}, {"keywords": 2.5}, {"keywords": True},
                {"keyword_bonus": -1.0}, {"keyword_bonus": float("nan")}, {"keyword_bonus": 11.0},
                {"keyword_bonus": "3"}):
        with pytest.raises(OptionError, match=next(iter(bad))):
            GenerationOptions(**bad)
    with pytest.raises(OptionError, match="keywords"):
        generate(TableSession(12), 1, GenerationOptions(num_beams=1, keywords=3), 0, 2, 1)


@given(vocab=st.integers(12, 40), beams=st.integers(1, 4), top=st.integers(1, 40), max_length=st.integers(2, 20),
       bonus=st.floats(0.0, 10.0), batch=st.integers(1, 3), seed=st.integers(0, 999))
def test_a_session_of_best_tokens_decides_as_a_full_one_with_keywords(vocab, beams, top, max_length, bonus, batch,
                                                                     seed):
    """With keywords every step reads the full distribution: the best-tokens session decides the same."""
    rng = random.Random(seed)
    pieces = random_pieces(vocab, rng)
    opening = [t for t in range(3, vocab) if pieces.opens[t] and pieces.letters[t]]
    following = [t for t in range(3, vocab) if pieces.continues[t]]
    spellings = []
    for _ in range(batch):
        steps: dict = {}
        for first in rng.sample(opening, min(len(opening), 3)):
            ids = (first, *rng.choices(following, k=rng.randint(0, 2)))
            for n, token in enumerate(ids):
                steps.setdefault(ids[:n], {})[token] = frozenset({f"w{first}"})
        spellings.append(steps)
    options = GenerationOptions(num_beams=beams, max_length=max_length, keywords=3, keyword_bonus=bonus)
    want = generate(TableSession(vocab, seed=seed), batch, options, 0, 2, 1,
                    bonus=KeywordBonus(pieces, spellings, bonus))
    session = TableSession(vocab, min(top, vocab), seed=seed)
    steps = []
    got = generate(session, batch, options, 0, 2, 1, lambda step, _: steps.append(step),
                   bonus=KeywordBonus(pieces, spellings, bonus))
    assert [h.token_ids for h in got] == [h.token_ids for h in want]
    assert session.full_reads == len(steps)


@pytest.fixture(scope="module")
def keyword_checkpoint(tmp_path_factory, tokenizer, tokenizer_file):
    from conftest import TINY_GENERATION, TINY_UNITS, random_pagesum

    from locsum_sdk.modeling.checkpoint import save_checkpoint

    directory = tmp_path_factory.mktemp("keywords-ckpt")
    common = WordList(COMMON).write(directory / "common.txt")
    return save_checkpoint(random_pagesum(tokenizer.get_vocab_size(), seed=5), directory / "checkpoint",
                           tokenizer_file, common_words_file=common, units=TINY_UNITS, generation=TINY_GENERATION)


@pytest.fixture(scope="module")
def keyword_bundle(tmp_path_factory, keyword_checkpoint):
    from locsum_sdk.exporters.onnx import export_onnx

    return export_onnx(keyword_checkpoint, tmp_path_factory.mktemp("kb") / "bundle").path


def written_keywords(summarizer: Summarizer, text: str, token_ids: list[int], count: int) -> int:
    found = {k.word for k in keywords([text], summarizer.common_words, count)}
    bonus = KeywordBonus(summarizer.pieces, [{}], 0.0)
    return len(bonus.read(token_ids)[0] & found)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_keywords_on_onnxruntime_and_torch_give_the_same_tokens(keyword_bundle, keyword_checkpoint, num_beams):
    """The bonus is added in the shared loop: token-exact on both backends, and a summary writes more of its
    input's keywords with it than without."""
    ort = Summarizer.from_pretrained(keyword_bundle, threads=1)
    ref = Summarizer.from_pretrained(keyword_checkpoint, backend="torch", threads=1)
    assert ort.common_words.words == ref.common_words.words == sorted(COMMON)
    rng = random.Random(num_beams)
    options = dict(num_beams=num_beams, max_length=24, min_length=6, keywords=4, keyword_bonus=6.0)
    gained = 0
    for case in range(5):
        text = document(rng, rng.randint(2, 20))
        a, b = ort.summarize(text, **options), ref.summarize(text, **options)
        assert a.token_ids == b.token_ids, f"case {case}"
        plain = ort.summarize(text, **{**options, "keywords": 0})
        gained += written_keywords(ort, text, a.token_ids, 4) - written_keywords(ort, text, plain.token_ids, 4)
    assert gained > 0


def test_a_bundle_carries_its_common_words_and_keywords_need_them(keyword_bundle, tmp_path, checkpoint_dir,
                                                                  bundle_dir):
    from locsum_sdk.exporters.defaults import set_defaults
    from locsum_sdk.exporters.onnx import export_onnx

    assert COMMON_WORDS_FILE in json.loads((keyword_bundle / "manifest.json").read_text())["files"]
    plain = Summarizer.from_pretrained(bundle_dir, threads=1)
    assert plain.common_words is None
    with pytest.raises(OptionError, match="common_words.txt"):
        plain.summarize("The budget meeting went well. " * 4, keywords=3)
    with pytest.raises(OptionError, match="common_words.txt"):
        set_defaults(bundle_dir, tmp_path / "copy", {"keywords": 3})
    with pytest.raises(OptionError, match="common_words.txt"):
        export_onnx(checkpoint_dir, tmp_path / "exported", options={"keywords": 3})
    bad = tmp_path / "bad.txt"
    bad.write_text("Not One\n")
    with pytest.raises(DataError, match="word list"):
        set_defaults(bundle_dir, tmp_path / "copy", {"keywords": 3}, common_words=bad)
    with pytest.raises(DataError, match="word list"):
        export_onnx(checkpoint_dir, tmp_path / "exported", common_words=bad)
    assert not (tmp_path / "copy").exists() and not (tmp_path / "exported").exists()
    common = WordList(COMMON).write(tmp_path / "common.txt")
    copy = set_defaults(bundle_dir, tmp_path / "copy", {"keywords": 3}, common_words=common)
    summarizer = Summarizer.from_pretrained(copy.path, threads=1)
    assert summarizer.defaults.generation.keywords == 3 and summarizer.common_words.words == sorted(COMMON)
    text = document(random.Random(0), 12)
    assert summarizer.summarize(text).token_ids == summarizer.summarize(text, keywords=3).token_ids
    assert summarizer.summarize(text, keywords=0).token_ids == plain.summarize(text).token_ids
    manifest = json.loads((copy.path / "manifest.json").read_text())
    manifest["files"].pop(COMMON_WORDS_FILE)
    (copy.path / "manifest.json").write_text(json.dumps(manifest))
    (copy.path / COMMON_WORDS_FILE).unlink()
    with pytest.raises(BundleError, match="common_words.txt"):
        Summarizer.from_pretrained(copy.path, threads=1)


def test_locsum_export_adds_common_words_to_a_bundle(bundle_dir, tmp_path, capsys):
    from locsum_sdk.cli import main

    common = WordList(COMMON).write(tmp_path / "common.txt")
    assert main(["export", "--bundle", str(bundle_dir), "--output", str(tmp_path / "kw"), "--common-words",
                 str(common), "--keywords", "5", "--keyword-bonus", "2.5"]) == 0
    generation = Summarizer.from_pretrained(tmp_path / "kw", threads=1).defaults.generation
    assert (generation.keywords, generation.keyword_bonus) == (5, 2.5)
    assert (tmp_path / "kw" / COMMON_WORDS_FILE).read_bytes() == common.read_bytes()
    assert main(["export", "--bundle", str(bundle_dir), "--output", str(tmp_path / "kw2"), "--keywords", "5"]) == 2
    assert not (tmp_path / "kw2").exists()
