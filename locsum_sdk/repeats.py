"""Word repeats: decoding that makes a summary less likely to write a content word again each time it does.

`repetition_penalty` scales a written token's log-probability, which leaves a confident token almost as likely as
before (-0.05 becomes -0.065 at 1.3): a small model that loops on a speaker's label ("Professor F: Professor F,
Professor F.") or on one noun ("The meeting was a discussion about the meeting") loops on. With
`word_repeat_penalty` a piece that opens a word of four or more letters (`CONTENT_LETTERS`) that is the whole of
that word ("Ġmeeting") loses the penalty from its log-probability once for every time the beam has already written
the word: additive, so it reaches a confident loop, and on content words alone, so "the", "of" and punctuation are
left as they are. Words are read from the beam's pieces by `Pieces.spell` (runs of letters, lowercased).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .words import CONTENT_LETTERS, Pieces, Spelled


class WordRepeats:
    """The `word_repeat_penalty` filter of one tokenizer (see the module docstring): built once from its pieces, the
    penalty given at each step."""

    def __init__(self, pieces: Pieces):
        self.pieces = pieces
        openers: dict[str, list[int]] = {}
        for token, text in enumerate(pieces.letters):
            if text is not None and pieces.opens[token] and len(text) >= CONTENT_LETTERS:
                openers.setdefault(text, []).append(token)
        self.openers = {text: np.array(tokens, dtype=np.int64) for text, tokens in openers.items()}

    def apply(self, log_probs: np.ndarray, written: list[list[list[Spelled]]], penalty: float) -> None:
        """Subtract, in place, `penalty` times the count of every content word a beam has written from the pieces
        that would write it again. log_probs (B, K, V) holding every token's log-probability (V: the pieces'
        vocabulary), written each beam's words (`Pieces.spell_beams`)."""
        for b, k in np.ndindex(*log_probs.shape[:2]):
            counts = Counter(word.text for word in written[b][k] if len(word.text) >= CONTENT_LETTERS)
            for word, count in counts.items():
                tokens = self.openers.get(word)
                if tokens is not None:
                    log_probs[b, k, tokens] -= np.float32(penalty * count)
