"""Keywords: decoding that favours the words saying what this input is about.

A small summarizer learns the words of its training summaries and writes them for any input ("the team discussed
the data"). With the `keywords` option each input's keywords, its most frequent words of four or more letters that
its bundle's `common_words.txt` does not list (the words most of the training inputs hold), are favoured while they
are unwritten: the first piece of each keyword gets `keyword_bonus` added to its log-probability until the summary
holds that word. The bonus counts in a beam's score like any log-probability.

An input's keywords come from one pass over its text (its distinct words counted), so they grow with the input's
vocabulary, never faster than the input; a step reads each beam's words once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .words import CONTENT_LETTERS, RARE_SHARE, WORD, Pieces, WordList, words_of

FORMS = 4  # spellings of one keyword whose first pieces are favoured ("icsi", "ICSI", "Icsi")


@dataclass(frozen=True)
class Keyword:
    word: str  # lowercased
    count: int  # times the input holds it
    forms: tuple[str, ...]  # how the input spells it, most frequent first


def common_words(inputs: Iterable[str]) -> WordList:
    """The words (of `CONTENT_LETTERS` or more letters) that at least `RARE_SHARE` of the distinct `inputs` hold:
    a bundle's `common_words.txt`, from its training inputs."""
    distinct = list(dict.fromkeys(inputs))
    held: Counter[str] = Counter()
    for text in distinct:
        held.update(word for word in words_of([text]) if len(word) >= CONTENT_LETTERS)
    return WordList(word for word, n in held.items() if n >= RARE_SHARE * len(distinct))


def keywords(texts: Iterable[str], common: WordList, count: int) -> list[Keyword]:
    """The `count` most frequent words (of `CONTENT_LETTERS` or more letters) of `texts` that `common` does not
    list, most frequent first (ties alphabetical)."""
    counts: Counter[str] = Counter()
    spellings: dict[str, Counter[str]] = {}
    for text in texts:
        for match in WORD.findall(text):
            if len(match) >= CONTENT_LETTERS:
                word = match.lower()
                counts[word] += 1
                spellings.setdefault(word, Counter())[match] += 1
    rare = [(word, n) for word, n in counts.items() if not common.has_word(word)]
    rare.sort(key=lambda item: (-item[1], item[0]))
    return [Keyword(word, n, tuple(form for form, _ in spellings[word].most_common(FORMS)))
            for word, n in rare[:count]]


class KeywordBonus:
    """The `keywords` option of one decoding batch: for each batch item, its keywords' first pieces."""

    def __init__(self, pieces: Pieces, first_pieces: Sequence[dict[int, frozenset[str]]], bonus: float):
        self.pieces, self.first_pieces, self.bonus = pieces, first_pieces, bonus

    @classmethod
    def build(cls, tokenizer, pieces: Pieces, items: Sequence[Sequence[Keyword]], bonus: float) -> KeywordBonus:
        """`items`: each batch item's keywords; `tokenizer`, a `tokenizers.Tokenizer`, gives each spelling's first
        piece as it follows a space."""
        first_pieces = []
        for found in items:
            spelled = [(keyword.word, form) for keyword in found for form in keyword.forms]
            encoded = tokenizer.encode_batch([" " + form for _, form in spelled], add_special_tokens=False)
            firsts: dict[int, set[str]] = {}
            for (word, _), encoding in zip(spelled, encoded):
                if encoding.ids and 0 <= encoding.ids[0] < len(pieces.letters):
                    firsts.setdefault(encoding.ids[0], set()).add(word)
            first_pieces.append({token: frozenset(words) for token, words in firsts.items()})
        return cls(pieces, first_pieces, bonus)

    def written(self, sequence: Iterable[int]) -> set[str]:
        """The words (lowercased runs of letters, as the pieces spell them) a sequence of token ids holds."""
        letters, opens = self.pieces.letters, self.pieces.opens
        found, parts = set(), []
        for token in sequence:
            text = letters[token] if 0 <= token < len(letters) else None
            if text is None or opens[token]:
                if parts:
                    found.add("".join(parts))
                parts = [] if text is None else [text]
            else:
                parts.append(text)
        if parts:
            found.add("".join(parts))
        return found

    def apply(self, log_probs: np.ndarray, sequences: np.ndarray) -> None:
        """Add the bonus, in place, to the first piece of every keyword a beam has not written. log_probs (B, K, V)
        holding every token's log-probability, sequences (B, K, T)."""
        for b, k in np.ndindex(*sequences.shape[:2]):
            if not self.first_pieces[b]:
                continue
            written = self.written(sequences[b, k].tolist())
            tokens = [token for token, words in self.first_pieces[b].items() if not words <= written]
            log_probs[b, k, tokens] += self.bonus
