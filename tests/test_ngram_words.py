"""ngram_word_starts: n-gram blocking forbids the pieces that open a word and spares those that continue one (or a
number), on the filter, a decoding loop, the default bundle's byte-level BPE and a Summarizer with its command line."""

import lzma
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from locsum_sdk import Summarizer
from locsum_sdk.errors import OptionError
from locsum_sdk.generation import GenerationOptions, SeenNgrams, generate
from locsum_sdk.words import Pieces

ROOT = Path(__file__).resolve().parents[1]
EOS = 1
# tokens: 3 ".", 4 " Ret", 5 "ief", 6 "iring", 7 " was"
CONTINUES = np.array([0, 0, 0, 0, 0, 1, 1, 0], bool)


class Preferring:
    """A session that writes `script` and, at each step, puts its second choice `second` just below it."""

    partial_log_probs = False

    def __init__(self, script: list[int], second: list[int], vocab: int = 8):
        self.script, self.second, self.vocab, self.step_index = script, second, vocab, 0

    def step(self, tokens, beam_index):
        index = min(self.step_index, len(self.script) - 1)
        self.step_index += 1
        self.full = np.full((1, 1, self.vocab), -20.0, np.float32)
        self.full[0, 0, self.second[index]] = -2.0
        self.full[0, 0, self.script[index]] = -0.1
        return self.full.copy(), np.ones((1, 2, 1), np.float32)

    def full_log_probs(self):
        return self.full.copy()


def test_the_filter_spares_a_piece_that_continues_a_word():
    sequence = np.array([[[0, 3, 4, 5, 7, 3, 4]]])  # ". Ret ief was . Ret": "ief" would repeat ". Ret ief"
    plain = np.zeros((1, 1, 8), np.float32)
    SeenNgrams(3).apply(plain, sequence)
    assert np.isneginf(plain[0, 0, 5]) and np.isfinite(plain[0, 0, [3, 4, 6, 7]]).all()
    spared = np.zeros((1, 1, 8), np.float32)
    SeenNgrams(3, CONTINUES).apply(spared, sequence)
    assert np.isfinite(spared).all()
    opener = np.zeros((1, 1, 8), np.float32)  # "Ret ief" then " was" again: " was" opens a word and stays forbidden
    SeenNgrams(3, CONTINUES).apply(opener, np.array([[[0, 3, 4, 5, 7, 3, 4, 5]]]))
    assert np.isneginf(opener[0, 0, 7])


def test_the_decoding_loop_finishes_a_name_and_still_blocks_what_follows():
    script = [3, 4, 5, 7, 3, 4, 5, 7, 3]  # ". Retief was. Retief was."
    second = [7, 7, 6, 3, 7, 7, 6, 3, 7]  # where it cannot: "Retiring", then "." for " was"
    tokens = {}
    for on in (False, True):
        options = GenerationOptions(num_beams=1, max_length=10, no_repeat_ngram_size=3, ngram_word_starts=on)
        tokens[on] = generate(Preferring(script, second), 1, options, start=0, eos=EOS, pad=2,
                              word_pieces=CONTINUES)[0].token_ids
    assert tokens[False][:7] == [3, 4, 5, 7, 3, 4, 6]  # ". Retief was. Retiring"
    assert tokens[True][:8] == [3, 4, 5, 7, 3, 4, 5, 3]  # ". Retief was. Retief." (" was" again is blocked)
    with pytest.raises(OptionError, match="ngram_word_starts needs"):
        generate(Preferring(script, second), 1, GenerationOptions(num_beams=1, max_length=4, ngram_word_starts=True),
                 start=0, eos=EOS, pad=2)
    with pytest.raises(OptionError, match="ngram_word_starts"):
        GenerationOptions(ngram_word_starts="yes")


def test_the_default_bundles_pieces_continue_a_name_and_open_a_word():
    tokenizer = Tokenizer.from_str(lzma.decompress((ROOT / "engines/default/tokenizer.json.xz").read_bytes()).decode())
    continues = Pieces.from_tokenizer(tokenizer).continues
    first, second = tokenizer.encode(" Retief", add_special_tokens=False).ids
    assert not continues[first] and continues[second]
    assert not continues[tokenizer.token_to_id(".")] and not continues[tokenizer.encode(" was").ids[0]]


def test_a_second_year_is_not_turned_into_another_number():
    """The default bundle's tokenizer writes a number digit by digit after a lone " ": once " 2014" is written,
    token trigrams forbid the "0" of " 2022" (" ", "2", "0" again), and the model wrote "2014 through 2516"; digits
    that go on with a number are spared like letters that go on with a word, and what opens a word is not."""
    tokenizer = Tokenizer.from_str(lzma.decompress((ROOT / "engines/default/tokenizer.json.xz").read_bytes()).decode())
    pieces = Pieces.from_tokenizer(tokenizer)
    written = tokenizer.encode("from 2014 through 2", add_special_tokens=False).ids
    zero, space = tokenizer.token_to_id("0"), tokenizer.token_to_id("Ġ")
    assert pieces.inner[zero] and not pieces.continues[zero] and not pieces.inner[space]
    for spared, forbidden in ((None, True), (pieces.inner, False)):
        log_probs = np.zeros((1, 1, len(pieces.letters)), np.float32)
        SeenNgrams(3, spared).apply(log_probs, np.array([[written]]))
        assert np.isneginf(log_probs[0, 0, zero]) == forbidden
    again = tokenizer.encode("so up through 2014 and up through", add_special_tokens=False).ids
    log_probs = np.zeros((1, 1, len(pieces.letters)), np.float32)
    SeenNgrams(3, pieces.inner).apply(log_probs, np.array([[again]]))
    assert np.isneginf(log_probs[0, 0, space])  # " up through 2" again: the " " before a number opens it: forbidden


def repeated_ngram_ends(token_ids: list[int], size: int) -> set[int]:
    """The last tokens of the n-grams of `size` that `token_ids` holds more than once."""
    seen, ends = set(), set()
    for i in range(len(token_ids) - size + 1):
        gram = tuple(token_ids[i:i + size])
        if gram in seen:
            ends.add(gram[-1])
        seen.add(gram)
    return ends


def test_a_summarizer_and_the_command_line_take_ngram_word_starts(tmp_path):
    from locsum_sdk.cli import main

    summarizer = Summarizer.from_pretrained(ROOT / "engines" / "pagesum", threads=1)
    text = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8")[:3000]
    inner = summarizer.pieces.inner
    for size in (1, 2):  # 1: no token written twice, but for pieces that continue a word
        options = dict(num_beams=2, max_length=64, min_length=60, no_repeat_ngram_size=size, known_words=False)
        plain = summarizer.summarize(text, **options)
        words = summarizer.summarize(text, **options, ngram_word_starts=True)
        assert not repeated_ngram_ends(plain.token_ids, size)
        assert all(inner[token] for token in repeated_ngram_ends(words.token_ids, size))
    (tmp_path / "note.txt").write_text(text, encoding="utf-8")
    assert main(["summarize", str(tmp_path / "note.txt"), "--bundle", "pagesum", "--max-length", "40",
                 "--ngram-word-starts", "--json"]) == 0
