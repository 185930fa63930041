"""`word_repeat_penalty`: the words a beam has written read from its pieces, the penalty on the piece that would
write a content word again (once per time written, content words alone), a confident loop broken, partial reads
deciding as full ones, and the option refused out of range or where no pieces are known."""

from pathlib import Path

import numpy as np
import pytest
from test_words import step_by_step

from locsum_sdk.errors import OptionError
from locsum_sdk.generation import GenerationOptions, generate
from locsum_sdk.repeats import WordRepeats
from locsum_sdk.words import Pieces

ROOT = Path(__file__).resolve().parents[1]
#         0 start, 1 eos, 2 "Ġmeeting", 3 "Ġthe", 4 "ing", 5 "Ġmeet", 6 ".", 7 "s.The", 8 "Ġprofessor", 9 ","
LETTERS = [None, None, "meeting", "the", "ing", "meet", None, None, "professor", None]
OPENS = np.array([False, False, True, True, False, True, False, False, True, False])


def pieces() -> Pieces:
    continues = np.array([text is not None for text in LETTERS]) & ~OPENS
    return Pieces(LETTERS, OPENS, continues, ends={7: "s"}, starts={7: "the"}, special=frozenset({0, 1}))


def test_the_words_of_a_sequence_are_read_from_its_pieces():
    def words(sequence):
        return [(word.text, word.tokens) for word in pieces().spell(sequence)]

    assert words([5, 4, 6, 3, 2, 9, 2]) == [("meeting", (5, 4)), ("the", (3,)), ("meeting", (2,)), ("meeting", (2,))]
    # "s.The" ends one word and starts the next
    assert words([5, 7, 4, 8]) == [("meets", (5, 7)), ("theing", (7, 4)), ("professor", (8,))]
    assert words([]) == []


def test_a_written_content_word_is_penalized_once_per_time_written_and_nothing_else():
    log_probs = np.zeros((1, 2, 10), dtype=np.float32)
    sequences = np.array([[[0, 5, 4, 3, 2, 9, 2], [0, 3, 3, 8, 6, 3, 3]]])  # start token, then what each beam wrote
    counts = WordRepeats(pieces()).follow(1, 2, 1.5)
    counts.apply(log_probs, step_by_step(pieces(), sequences, counts))
    assert log_probs[0, 0, 2] == -4.5  # "meeting" three times ("meet" + "ing" once)
    assert log_probs[0, 1, 8] == -1.5  # "professor" once
    untouched = np.ones((2, 10), dtype=bool)
    untouched[0, 2] = untouched[1, 8] = False
    assert (log_probs[0][untouched] == 0).all()  # "the" (3 letters), "meet" (not written), punctuation


class LoopSession:
    """A model that writes "Ġprofessor" with probability 0.9 at every step (a confident loop), ",", "Ġthe" or
    "Ġmeeting" otherwise; a partial session gives each beam's best 4 tokens only."""

    def __init__(self, partial: bool, beams: int):
        self.partial_log_probs, self.beams = partial, beams
        probs = np.full(10, 1e-4, dtype=np.float32)
        probs[[8, 9, 3, 2]] = [0.9, 0.05, 0.03, 0.0196]
        self.table = np.log(probs / probs.sum())

    def step(self, tokens, beam_index):
        self.full = np.repeat(self.table[None, None], self.beams, axis=1)
        if not self.partial_log_probs:
            return self.full.copy(), np.ones((1, 1, self.beams), np.float32)
        shown = np.full_like(self.full, -np.inf)
        best = np.argsort(-self.full, axis=-1)[..., :4]
        np.put_along_axis(shown, best, np.take_along_axis(self.full, best, -1), -1)
        return shown, np.ones((1, 1, self.beams), np.float32)

    def full_log_probs(self):
        return self.full.copy()


@pytest.mark.parametrize("beams", [1, 2])
def test_a_confident_loop_is_broken_and_partial_reads_decide_as_full_ones(beams):
    plain = GenerationOptions(num_beams=beams, max_length=12, min_length=11, repetition_penalty=1.3)
    looping = generate(LoopSession(False, beams), 1, plain, start=0, eos=1, pad=1)[0].token_ids
    assert looping.count(8) >= 10  # the multiplicative penalty leaves a 0.9 token at 0.87
    options = GenerationOptions(num_beams=beams, max_length=12, min_length=11, word_repeat_penalty=2.0)
    repeats = WordRepeats(pieces())
    full = generate(LoopSession(False, beams), 1, options, 0, 1, 1, repeats=repeats)[0].token_ids
    partial = generate(LoopSession(True, beams), 1, options, 0, 1, 1, repeats=repeats)[0].token_ids
    assert full == partial
    assert full.count(8) <= 2 and full.count(2) <= 2  # each content word gives way to the others


def test_the_option_is_refused_out_of_range_or_without_the_pieces():
    for bad in (-0.5, 21.0, float("nan"), "2", True):
        with pytest.raises(OptionError, match="word_repeat_penalty"):
            GenerationOptions(word_repeat_penalty=bad)
    with pytest.raises(OptionError, match="word_repeat_penalty needs the tokenizer's pieces"):
        generate(LoopSession(False, 1), 1, GenerationOptions(word_repeat_penalty=1.0), 0, 1, 1)


def test_a_summarizer_and_the_command_line_take_the_option(capsys, tmp_path):
    from locsum_sdk import Summarizer
    from locsum_sdk.cli import main

    summarizer = Summarizer.from_pretrained(ROOT / "engines" / "pagesum", threads=1)
    text = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8")[:3000]
    plain = summarizer.summarize(text, num_beams=1, max_length=40, min_length=39, repetition_penalty=1.0)
    penalized = summarizer.summarize(text, num_beams=1, max_length=40, min_length=39, repetition_penalty=1.0,
                                     word_repeat_penalty=20.0)

    def repeated(summary):
        words = [w.text for w in summarizer.pieces.spell(summary.token_ids) if len(w.text) >= 4]
        return len(words) - len(set(words))

    assert repeated(penalized) <= repeated(plain)
    (tmp_path / "note.txt").write_text(text, encoding="utf-8")
    assert main(["summarize", str(tmp_path / "note.txt"), "--bundle", "pagesum", "--max-length", "12",
                 "--word-repeat-penalty", "2", "--json"]) == 0
