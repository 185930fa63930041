"""Keywords: decoding that favours the words saying what this input is about.

A small summarizer learns the words of its training summaries and writes them for any input ("the team discussed
the data"). With the `keywords` option each input's keywords, its most frequent words of four or more letters that
its bundle's `common_words.txt` does not list (the words most of the training inputs hold), are favoured while they
are unwritten: the next piece of each keyword's spelling gets `keyword_bonus` added to its log-probability until the
summary holds that word. The bonus counts in a beam's score like any log-probability.

An input's keywords come from one pass over its text (its distinct words counted), so they grow with the input's
vocabulary, never faster than the input; a step reads each beam's words once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .words import CONTENT_LETTERS, RARE_SHARE, WORD, BeamWords, Pieces, Spelled, WordList, words_of

FORMS = 4  # spellings of one keyword whose first pieces are favoured ("icsi", "ICSI", "Icsi")
MAX_PIECES = 24  # a spelling of more pieces is not favoured: no summary writes such a word, and a spelling's steps
# hold each of its prefixes (an input of one 100,000-letter "word" spelled it in 25,000 pieces)


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


Spellings = dict[tuple[int, ...], dict[int, frozenset[str]]]  # pieces so far in a word -> next piece -> keywords


class KeywordBonus:
    """The `keywords` option of one decoding batch: for each batch item, its keywords' spellings as pieces.

    A beam's unwritten keywords get the bonus on their next piece: on the first piece until the beam has opened a
    word with it (once tried and left, a first piece such as "A" is not favoured again), then on each following
    piece while the beam's current word is a keyword's beginning, until the beam holds the keyword."""

    def __init__(self, pieces: Pieces, spellings: Sequence[Spellings], bonus: float):
        self.pieces, self.spellings, self.bonus = pieces, spellings, bonus

    @classmethod
    def build(cls, tokenizer, pieces: Pieces, items: Sequence[Sequence[Keyword]], bonus: float) -> KeywordBonus:
        """`items`: each batch item's keywords; `tokenizer`, a `tokenizers.Tokenizer`, spells each form as it
        follows a space (forms whose pieces are not all letters, or are more than `MAX_PIECES`, are left out)."""
        spellings = []
        for found in items:
            spelled = [(keyword.word, form) for keyword in found for form in keyword.forms]
            encoded = tokenizer.encode_batch([" " + form for _, form in spelled], add_special_tokens=False)
            steps: dict[tuple[int, ...], dict[int, set[str]]] = {}
            for (word, _), encoding in zip(spelled, encoded):
                ids = tuple(encoding.ids)
                if not ids or len(ids) > MAX_PIECES or not all(0 <= i < len(pieces.letters) and pieces.letters[i]
                                                               for i in ids):
                    continue
                for n, token in enumerate(ids):
                    steps.setdefault(ids[:n], {}).setdefault(token, set()).add(word)
            spellings.append({prefix: {token: frozenset(words) for token, words in nexts.items()}
                              for prefix, nexts in steps.items()})
        return cls(pieces, spellings, bonus)

    def read(self, sequence: Sequence[int]) -> tuple[set[str], set[int], tuple[int, ...]]:
        """What a sequence of token ids holds: its words (as `Pieces.spell` reads them), the pieces that opened a
        word, and the pieces of its last word while it has only letters and may go on (else ())."""
        letters, opens = self.pieces.letters, self.pieces.opens
        spelled = self.pieces.spell(sequence)
        opened = {word.tokens[0] for word in spelled if letters[word.tokens[0]] is not None and opens[word.tokens[0]]}
        last = sequence[-1] if len(sequence) else None
        current = spelled[-1] if spelled and spelled[-1].tokens[-1] == last else None
        return {word.text for word in spelled}, opened, going_on(self.pieces, current)

    def follow(self, batch: int, beams: int) -> KeywordBeams:
        """Where each beam of a decoding loop stands with its item's keywords, from its first step."""
        return KeywordBeams(self, batch, beams)


class KeywordBeams:
    """What the bonus reads of each beam, kept one finished word a step (`words.BeamWords`) and reordered with the
    beams: the keywords it has finished writing and, of the keywords' first pieces, those it has opened a word
    with. With the word the beam is writing, that is what `KeywordBonus.read` reads of the whole summary as far as
    the bonus asks (its keywords and their first pieces), so a step's work does not grow with the summary."""

    def __init__(self, bonus: KeywordBonus, batch: int, beams: int):
        self.bonus = bonus
        self.words = [frozenset(word for nexts in spellings.values() for found in nexts.values() for word in found)
                      for spellings in bonus.spellings]
        self.firsts = [frozenset(spellings.get((), {})) for spellings in bonus.spellings]
        self.written: list[list[frozenset[str]]] = [[frozenset()] * beams for _ in range(batch)]
        self.opened: list[list[frozenset[int]]] = [[frozenset()] * beams for _ in range(batch)]

    def advance(self, words: BeamWords, beam_index: np.ndarray | None) -> None:
        """Take in each beam's word finished by its last step (`words` advanced by the same step)."""
        if beam_index is not None:
            order = beam_index.tolist()
            self.written = [[row[k] for k in ks] for row, ks in zip(self.written, order)]
            self.opened = [[row[k] for k in ks] for row, ks in zip(self.opened, order)]
        for b, row in enumerate(words.finished):
            for k, word in enumerate(row):
                if word is not None:
                    self.written[b][k], self.opened[b][k] = self._held(b, word, self.written[b][k],
                                                                       self.opened[b][k])

    def _held(self, b: int, word: Spelled, written: frozenset[str],
              opened: frozenset[int]) -> tuple[frozenset[str], frozenset[int]]:
        """`written` and `opened` with `word` in them, where it is a keyword or opens with a keyword's first piece."""
        first = word.tokens[0]
        if word.text in self.words[b]:
            written = written | {word.text}
        if first in self.firsts[b] and self.bonus.pieces.letters[first] is not None and self.bonus.pieces.opens[first]:
            opened = opened | {first}
        return written, opened

    def apply(self, log_probs: np.ndarray, words: BeamWords) -> None:
        """Add the bonus, in place, to the next piece of every keyword a beam has not written. log_probs (B, K, V)
        holding every token's log-probability."""
        for b, k in np.ndindex(*log_probs.shape[:2]):
            spellings = self.bonus.spellings[b]
            if not spellings:
                continue
            written, opened, current = self.written[b][k], self.opened[b][k], words.current[b][k]
            if current is not None:
                written, opened = self._held(b, current, written, opened)
            tokens = [token for token, found in spellings.get((), {}).items()
                      if token not in opened and not found <= written]
            word = going_on(self.bonus.pieces, current)
            if word:
                tokens += [token for token, found in spellings.get(word, {}).items() if not found <= written]
            log_probs[b, k, tokens] += self.bonus.bonus


def going_on(pieces: Pieces, current: Spelled | None) -> tuple[int, ...]:
    """The pieces of the word a sequence ends in (`current`, None: none) while it has only letters and may go on,
    else ()."""
    if current is None or not all(pieces.letters[token] is not None for token in current.tokens):
        return ()
    return current.tokens
