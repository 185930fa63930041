"""Whole sentences: a summary that max_length cuts ends at the end of its last full sentence.

Decoding stops at max_length wherever the model is, often mid-sentence ("The grandson was"). With the
`whole_sentences` option such a summary keeps what it wrote up to the end of its last full sentence: a piece ending
in ".", "!", "?" or "…" (closing quotes or brackets after it, in the piece or in pieces of their own) followed by a
piece that starts a word or a line. A period inside a word ("3.5") is no end, nor is that of a title or an initial
("Mr.", "J.") or of an abbreviation with periods inside ("e.g.", "U.S."). A summary that ended by itself, or
holds no full sentence, is left as it is; a shortened one may be shorter than min_length.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .words import piece_texts

TERMINALS = (".", "!", "?", "…")
CLOSERS = "\"'’”»)]}"
TITLES = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "gen", "col", "lt", "sgt", "capt", "rev",
                    "mt"})  # a word that a period after it does not end the sentence of
_LAST_WORD = re.compile(r"[^\W_][\w.]*$")


@dataclass(frozen=True)
class SentenceEnds:
    """Where a tokenizer's pieces may end a sentence (see the module docstring), built once per tokenizer."""

    texts: list[str]  # each token id's text without its word-start marker ("" for special tokens)
    ends: np.ndarray  # (V,) bool: the text ends in a terminal, closing quotes or brackets after it allowed
    breaks: np.ndarray  # (V,) bool: the piece starts a word (its marker) or a line (leading whitespace)

    @classmethod
    def from_tokenizer(cls, tokenizer, size: int | None = None) -> SentenceEnds:
        """The sentence ends of a `tokenizers.Tokenizer` for a model of `size` token ids (None: the tokenizer's)."""
        return cls.from_texts(*piece_texts(tokenizer, size, "whole_sentences"))

    @classmethod
    def from_texts(cls, texts: list[str], marked: list[bool], special: set[int]) -> SentenceEnds:
        """The sentence ends of a tokenizer read by `piece_texts`."""
        texts = ["" if i in special else text for i, text in enumerate(texts)]
        ends = np.array([text.rstrip(CLOSERS).endswith(TERMINALS) for text in texts], dtype=bool)
        breaks = np.array([m or text[:1].isspace() for text, m in zip(texts, marked)], dtype=bool)
        return cls(texts, ends, breaks)

    def kept(self, token_ids: Sequence[int], eos: int) -> int:
        """How many of a summary's tokens stay: all when it ended in `eos`, ends a sentence or holds no full
        sentence; else those up to the end of its last full sentence."""
        count = len(token_ids)
        if not count or token_ids[-1] == eos or self._ends_at(token_ids, count - 1):
            return count
        for i in range(count - 2, -1, -1):
            if self.breaks[token_ids[i + 1]] and self._ends_at(token_ids, i):
                return i + 1
        return count

    def _ends_at(self, token_ids: Sequence[int], i: int) -> bool:
        """Whether a sentence ends with piece `i`: closing pieces of their own ('"', ")") are skipped back over."""
        while i > 0 and not self.breaks[token_ids[i]] and self.texts[token_ids[i]] \
                and not self.texts[token_ids[i]].strip(CLOSERS):
            i -= 1
        if not self.ends[token_ids[i]]:
            return False
        stem = self.texts[token_ids[i]].rstrip(CLOSERS)
        if not stem.endswith("."):
            return True
        word = [stem[:-1]]  # the word the period follows: pieces back to the one that starts it
        while not self.breaks[token_ids[i]] and i > 0:
            i -= 1
            word.append(self.texts[token_ids[i]])
        last = _LAST_WORD.search("".join(reversed(word)))
        if last is None:
            return True
        text = last.group()
        return not ("." in text or (len(text) == 1 and text.isalpha()) or text.lower() in TITLES)
