"""Word repeats: decoding that makes a summary less likely to write a content word again each time it does.

`repetition_penalty` scales a written token's log-probability, which leaves a confident token almost as likely as
before (-0.05 becomes -0.065 at 1.3): a small model that loops on a speaker's label ("Professor F: Professor F,
Professor F.") or on one noun ("The meeting was a discussion about the meeting") loops on. With
`word_repeat_penalty` a piece that opens a word of four or more letters (`CONTENT_LETTERS`) that is the whole of
that word ("Ġmeeting") loses the penalty from its log-probability once for every time the beam has already written
the word: additive, so it reaches a confident loop, and on content words alone, so "the", "of" and punctuation are
left as they are. Words are read from the beam's pieces as it writes them (`words.BeamWords`: runs of letters,
lowercased, as `Pieces.spell` reads them).
"""

from __future__ import annotations

import numpy as np

from .words import CONTENT_LETTERS, BeamWords, Pieces, Spelled


class WordRepeats:
    """The `word_repeat_penalty` filter of one tokenizer (see the module docstring): built once from its pieces, the
    penalty given at each step."""

    def __init__(self, pieces: Pieces):
        self.pieces = pieces
        self.openers: dict[str, list[int]] = {}  # a content word -> the pieces that open it and are the whole of it
        for token, (text, opens) in enumerate(zip(pieces.letters, pieces.opens.tolist())):
            if opens and text is not None and len(text) >= CONTENT_LETTERS:
                self.openers.setdefault(text, []).append(token)

    def follow(self, batch: int, beams: int, penalty: float) -> RepeatCounts:
        """The counts of each beam of a decoding loop, from its first step, and the penalty they take."""
        return RepeatCounts(self, batch, beams, penalty)

    def openers_of(self, word: Spelled) -> list[int] | None:
        """The pieces that would write `word` again where it is a content word (None: it is not, or none would)."""
        return self.openers.get(word.text) if len(word.text) >= CONTENT_LETTERS else None


class RepeatCounts:
    """Each beam's content words written so far, as counts on the pieces that would write them again (B, K, V) and
    the penalty each count takes (float32, rounded once, as it is subtracted), kept one finished word a step
    (`words.BeamWords`) and reordered with the beams: a step's work does not grow with the summary."""

    def __init__(self, repeats: WordRepeats, batch: int, beams: int, penalty: float):
        self.repeats, self.penalty = repeats, penalty
        self.counts = np.zeros((batch, beams, len(repeats.pieces.letters)), np.int32)
        self.taken = np.zeros(self.counts.shape, np.float32)  # penalty * counts

    def advance(self, words: BeamWords, beam_index: np.ndarray | None) -> None:
        """Take in each beam's word finished by its last step (`words` advanced by the same step)."""
        if beam_index is not None and (beam_index != np.arange(beam_index.shape[1])).any():
            rows = np.arange(len(beam_index))[:, None]
            self.counts, self.taken = self.counts[rows, beam_index], self.taken[rows, beam_index]
        for b, row in enumerate(words.finished):
            for k, word in enumerate(row):
                if word is not None:
                    self._count(b, k, word, 1)

    def apply(self, log_probs: np.ndarray, words: BeamWords) -> None:
        """Subtract, in place, the penalty times the count of every content word a beam has written (its finished
        words and the word it ends in) from the pieces that would write it again. log_probs (B, K, V) holding every
        token's log-probability (V: the pieces' vocabulary)."""
        current = [(b, k, word) for b, row in enumerate(words.current) for k, word in enumerate(row) if word]
        for b, k, word in current:
            self._count(b, k, word, 1)
        log_probs -= self.taken
        for b, k, word in current:
            self._count(b, k, word, -1)

    def _count(self, b: int, k: int, word: Spelled, times: int) -> None:
        tokens = self.repeats.openers_of(word)
        if tokens is not None:
            self.counts[b, k, tokens] += times
            self.taken[b, k, tokens] = (self.penalty * self.counts[b, k, tokens]).astype(np.float32)
