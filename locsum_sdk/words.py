"""Known words: decoding that never joins subword pieces into a word no text holds.

A small model that copies pieces of its input can string them into words that are in no input and no
dictionary ("Ganymedriveration" for a story set on Ganymede). With the `known_words` option a word built of
several pieces may only grow as a prefix of a known word, and end only as a whole one: a word of the input, of
the query or of the bundle's word list (`words.txt`: the words of its training text). A word of one piece is a
word of the tokenizer's own vocabulary and always allowed. Words are runs of letters, lowercased; a word of several
pieces is also written as words are: lowercase, Capitalized or ALL CAPS, or with the capitals of a word of the input
or query that has others ("SmartKom"), never "MistY" or "prostraTe".

The lists are sorted distinct words searched by bisection: an input's list holds its distinct words, so building
it reads the input once and it grows with the input's vocabulary, never faster than the input.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DataError, OptionError

logger = logging.getLogger("locsum_sdk")

WORD = re.compile(r"[^\W\d_]+")  # a run of letters
_LEADING = re.compile(r"^[^\W\d_]+")
_TRAILING = re.compile(r"[^\W\d_]+$")
CONTENT_LETTERS = 4  # a content word has at least this many letters (evaluation's measures, keywords)
RARE_SHARE = 0.15  # a word fewer than this share of the (other distinct) inputs hold is rare (evaluation, keywords)


def words_of(texts: Iterable[str]) -> set[str]:
    """The distinct lowercased runs of letters of `texts`."""
    found: set[str] = set()
    for text in texts:
        found.update(WORD.findall(text.lower()))
    return found


def content_words(text: str) -> set[str]:
    """The distinct lowercased words (runs of letters, as `words_of` reads them) of four or more letters of `text`."""
    return {word for word in words_of([text]) if len(word) >= CONTENT_LETTERS}


def written_as_words_are(word: str) -> bool:
    """Whether a run of letters is lowercase, Capitalized or ALL CAPS (its start included: every prefix of such a word
    is one too, so a word checked piece by piece as it grows is one when it ends)."""
    return len(word) < 2 or word[1:].islower() or word.isupper()


def input_words(texts: Iterable[str]) -> tuple[WordList, WordList]:
    """The distinct lowercased words of `texts`, and, as written, those of their words whose capitals are neither
    Capitalized nor ALL CAPS ("SmartKom", "iPhone"): reading the texts once."""
    lowered: set[str] = set()
    mixed: set[str] = set()
    for text in texts:
        for word in WORD.findall(text):
            lowered.add(word.lower())
            if not written_as_words_are(word):
                mixed.add(word)
    return WordList(lowered), WordList(mixed)


class WordList:
    """Sorted distinct words: whether a string is a word of the list, or the start of one."""

    def __init__(self, words: Iterable[str]):
        self.words: list[str] = sorted(set(words))

    def __len__(self) -> int:
        return len(self.words)

    def has_prefix(self, text: str) -> bool:
        """Whether some word of the list starts with `text` (the word itself included)."""
        i = bisect.bisect_left(self.words, text)
        return i < len(self.words) and self.words[i].startswith(text)

    def has_word(self, text: str) -> bool:
        i = bisect.bisect_left(self.words, text)
        return i < len(self.words) and self.words[i] == text

    def write(self, path: str | os.PathLike) -> Path:
        """One word a line, UTF-8: a bundle's `words.txt`."""
        path = Path(path)
        path.write_text("".join(word + "\n" for word in self.words), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | os.PathLike) -> WordList:
        """A list as `write` writes it; a file that cannot be read or is not one raises `DataError`."""
        try:
            lines = Path(path).read_bytes().decode("utf-8").splitlines()
        except OSError as err:
            raise DataError(f"cannot read the word list {path}: {err.strerror or err}") from None
        except UnicodeDecodeError:
            raise DataError(f"the word list {path} is not UTF-8 text; write one lowercase word a line") from None
        bad = [line for line in lines if not WORD.fullmatch(line) or line != line.lower()]
        if bad:
            raise DataError(f"the word list {path} holds {len(bad)} line(s) that are not one lowercase word, e.g. "
                            f"{bad[0][:40]!r}; write one lowercase word a line")
        return cls(lines)


NO_BYTE = "\udc80"  # a lone surrogate: Latin-1 cannot encode it


def _byte_alphabet() -> dict[int, str]:
    """Byte-level BPE's printable stand-in for each byte, as a `str.translate` table from stand-in to byte (a
    Latin-1 character): printable Latin-1 bytes stand for themselves, the others for the code points from 256 up,
    in byte order. A Latin-1 character that stands for no byte maps to a lone surrogate, which no text encodes."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet, extra = {}, 0
    for byte in range(256):
        if byte in kept:
            alphabet[byte] = chr(byte)
        else:
            alphabet[256 + extra] = chr(byte)
            alphabet[byte] = NO_BYTE
            extra += 1
    return alphabet


def _components(config: dict | None) -> list[dict]:
    if not config:
        return []
    inner = config.get("pretokenizers") or config.get("decoders") or []
    return [config, *(part for item in inner for part in _components(item))]


@dataclass(frozen=True)
class Spelled:
    """A word a sequence of token ids spells: its letters, lowercased, and the pieces it was read from (a mixed
    piece at either end included)."""

    text: str
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Pieces:
    """What each token id is as part of a word: its letters (lowercased; None when it holds anything but letters)
    and whether it opens a word (byte-level BPE's "Ġ", SentencePiece's "▁", a WordPiece without "##"). A piece
    that mixes letters with other characters ("ense.", "s,", ".The") can finish the word before it with the letters
    it starts with (`ends`, unless it opens a word) and start one with the letters it ends in (`starts`). Letters are
    lowercased; those holding a capital are also kept as written (`capitals`, `capital_ends`, `capital_starts`)."""

    letters: list[str | None]
    opens: np.ndarray  # (V,) bool
    continues: np.ndarray  # (V,) bool: letters only and not opening a word
    ends: dict[int, str] = field(default_factory=dict)  # mixed piece, not opening -> the letters it starts with
    starts: dict[int, str] = field(default_factory=dict)  # mixed piece -> the letters it ends in
    special: frozenset[int] = frozenset()  # special tokens: left out of the text, so they join what they separate
    capitals: dict[int, str] = field(default_factory=dict)  # a letters piece with a capital -> its letters as written
    capital_ends: dict[int, str] = field(default_factory=dict)  # as `ends`, as written, where they hold a capital
    capital_starts: dict[int, str] = field(default_factory=dict)  # as `starts`, as written, likewise
    digits: np.ndarray | None = None  # (V,) bool: digits only and not opening a word (None: none known)

    @property
    def inner(self) -> np.ndarray:
        """(V,) bool: the pieces that go on with a word or a number begun before them (letters or digits only, not
        opening a word), which `ngram_word_starts` never forbids."""
        return self.continues if self.digits is None else self.continues | self.digits

    @classmethod
    def from_tokenizer(cls, tokenizer, size: int | None = None) -> Pieces:
        """The pieces of a `tokenizers.Tokenizer` (byte-level BPE, SentencePiece-style or WordPiece), for a model
        of `size` token ids (None: the tokenizer's count); ids past the tokenizer's are no letters."""
        return cls.from_texts(*piece_texts(tokenizer, size, "known_words"))

    @classmethod
    def from_texts(cls, texts: list[str], marked: list[bool], special: set[int]) -> Pieces:
        """The pieces of a tokenizer read by `piece_texts`."""
        vocab = len(texts)
        letters = [None if i in special or not text or not text.isalpha() else text.lower()
                   for i, text in enumerate(texts)]
        opens = np.array(marked, dtype=bool)
        continues = np.array([text is not None for text in letters]) & ~opens
        digits = np.array([i not in special and text.isdecimal() for i, text in enumerate(texts)], dtype=bool) & ~opens
        ends, starts = {}, {}
        capitals = {i: texts[i] for i, text in enumerate(letters) if text is not None and texts[i] != text}
        capital_ends, capital_starts = {}, {}
        for i, text in enumerate(texts):
            if i in special or not text or letters[i] is not None:
                continue
            head, tail = _LEADING.match(text), _TRAILING.search(text)
            if head and not marked[i]:
                ends[i] = head.group().lower()
                if ends[i] != head.group():
                    capital_ends[i] = head.group()
            if tail:
                starts[i] = tail.group().lower()
                if starts[i] != tail.group():
                    capital_starts[i] = tail.group()
        return cls(letters, opens, continues, ends, starts, frozenset(i for i in special if i < vocab), capitals,
                   capital_ends, capital_starts, digits)

    def spell(self, sequence: Iterable[int]) -> list[Spelled]:
        """The words a sequence of token ids spells, in order (runs of letters, lowercased; the last one too, though
        it may go on), each with the pieces it was read from: a mixed piece ends the word before it with the letters
        it starts with ("ense." after "Cor") and starts the next with the letters it ends in ("s.The")."""
        found: list[Spelled] = []
        current = None
        for token in sequence:
            finished, current = self.advance(current, token)
            if finished is not None:
                found.append(finished)
        return found if current is None else [*found, current]

    def advance(self, current: Spelled | None, token: int) -> tuple[Spelled | None, Spelled | None]:
        """`spell` one token further: a sequence whose last word is `current` (None: it ends in no word) goes on
        with `token`; the word the token finishes (None: none) and the word the sequence then ends in."""
        piece = self.letters[token] if 0 <= token < len(self.letters) else None
        text, tokens = ("", ()) if current is None else (current.text, current.tokens)
        if piece is not None and not self.opens[token]:
            return None, Spelled(text + piece, (*tokens, token))
        if piece is None and token in self.ends:
            text, tokens = text + self.ends[token], (*tokens, token)
        finished = Spelled(text, tokens) if text else None
        if piece is not None:
            return finished, Spelled(piece, (token,))
        return finished, Spelled(self.starts[token], (token,)) if token in self.starts else None


class BeamWords:
    """Each beam's words as decoding writes them, read one token a step (`Pieces.advance`) and reordered with the
    beams: `finished[b][k]`, the word beam k of item b finished with its last token (None: none), and
    `current[b][k]`, the word its summary ends in (None: none). The words finished so far and the current one are
    what `Pieces.spell` reads from the whole summary (its decoder start token left out); a step's work does not grow
    with the summary."""

    def __init__(self, pieces: Pieces, batch: int, beams: int):
        self.pieces = pieces
        self.finished: list[list[Spelled | None]] = [[None] * beams for _ in range(batch)]
        self.current: list[list[Spelled | None]] = [[None] * beams for _ in range(batch)]

    def advance(self, tokens: np.ndarray, beam_index: np.ndarray | None) -> None:
        """tokens (B, K): each beam's new token; beam_index (B, K): the beam each continued (None: its own)."""
        current = self.current if beam_index is None else [[row[k] for k in ks]
                                                           for row, ks in zip(self.current, beam_index.tolist())]
        for b, row in enumerate(tokens.tolist()):
            for k, token in enumerate(row):
                self.finished[b][k], current[b][k] = self.pieces.advance(current[b][k], token)
        self.current = current


def piece_texts(tokenizer, size: int | None, option: str) -> tuple[list[str], list[bool], set[int]]:
    """Each token id's text without its word-start marker ("" where its bytes are not whole characters), whether
    it has one (byte-level BPE's "Ġ", SentencePiece's "▁", a WordPiece without "##"), and the special tokens, for
    a model of `size` token ids (None: the tokenizer's count). OptionError naming `option` for a tokenizer that
    marks no word starts."""
    parts = {part.get("type"): part for component in (tokenizer.pre_tokenizer, tokenizer.decoder)
             for part in _components(None if component is None else json.loads(component.__getstate__()))}
    vocab = tokenizer.get_vocab_size(with_added_tokens=True) if size is None else size
    tokens = [""] * vocab
    for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
        if i < vocab:
            tokens[i] = token
    special = {i for i, added in tokenizer.get_added_tokens_decoder().items() if added.special}
    if type(tokenizer.model).__name__ == "WordPiece":
        prefix = tokenizer.model.continuing_subword_prefix or "##"
        marked = [not t.startswith(prefix) for t in tokens]
        texts = [t[len(prefix):] if t.startswith(prefix) else t for t in tokens]
    elif "ByteLevel" in parts:
        alphabet = _byte_alphabet()
        marked = [t.startswith("Ġ") for t in tokens]
        texts = [_from_bytes(t[1:] if m else t, alphabet) for t, m in zip(tokens, marked)]
    elif (marker := _space_marker(parts)) is not None:
        marked = [t.startswith(marker) for t in tokens]
        texts = [t[len(marker):] if m else t for t, m in zip(tokens, marked)]
        if "ByteFallback" in parts:  # "<0x0A>": a byte of a character the vocabulary lacks
            texts = [_fallback_byte(t) if _BYTE_PIECE.fullmatch(t) else t for t in texts]
    else:
        raise OptionError(f"{option} needs a tokenizer that marks where words start (byte-level BPE, SentencePiece "
                          f"or WordPiece); this bundle's does not: turn {option} off")
    return texts, marked, special


SENTENCEPIECE_MARKER = "\u2581"  # SentencePiece's word start, where a space was
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _space_marker(parts: dict[str, dict]) -> str | None:
    """SentencePiece's word-start marker, from a Metaspace pre-tokenizer or decoder, or from the decoder that turns
    it back into a space (`Replace`, as the Llama and Mistral tokenizers converted from SentencePiece have it)."""
    if "Metaspace" in parts:
        return parts["Metaspace"].get("replacement") or SENTENCEPIECE_MARKER
    replace = parts.get("Replace")
    if replace is not None and replace.get("content") == " ":
        marker = (replace.get("pattern") or {}).get("String")
        return marker or None
    return None


def _fallback_byte(piece: str) -> str:
    """A byte-fallback piece's character where its byte is one (ASCII), else "" (part of a character)."""
    value = int(piece[3:5], 16)
    return chr(value) if value < 0x80 else ""


def _from_bytes(text: str, alphabet: dict[int, str]) -> str:
    """A byte-level piece's text; "" where its bytes are not whole UTF-8 characters."""
    if text.isascii() and text.isprintable() and " " not in text:  # "!" to "~": each stands for itself
        return text
    try:
        return text.translate(alphabet).encode("latin-1").decode("utf-8")
    except UnicodeError:  # a character that stands for no byte, or bytes that are no whole characters
        return ""


class WordGuard:
    """The `known_words` filter of one decoding batch: for each batch item, the lists its words may come from.
    Special tokens other than `eos` are never written: decoding leaves them out of the text, where they would
    join the pieces on either side into one word ("Cor", "<s>", "ense": "Corense")."""

    def __init__(self, pieces: Pieces, known: Sequence[Sequence[WordList]], eos: int | None = None,
                 mixed: Sequence[WordList] | None = None):
        """`known`: each batch item's word lists; `mixed`: each item's words of the input and query whose capitals
        are neither Capitalized nor ALL CAPS, as written (`input_words`; None: none)."""
        self.pieces, self.known = pieces, known
        self.mixed = mixed if mixed is not None else [WordList(()) for _ in known]
        self.hidden = np.array(sorted(pieces.special - {eos}), dtype=np.int64)

    def current_word(self, sequence: Sequence[int]) -> tuple[str, int]:
        """The word the sequence ends in, as written, and how many pieces it has ("" and 0 after a space,
        punctuation or a special token); a mixed piece counts with the letters it ends in ("s.The" starts "The")."""
        pieces = self.pieces
        letters, opens, starts = pieces.letters, pieces.opens, pieces.starts
        parts: list[str] = []
        for token in map(int, reversed(sequence)):
            text = letters[token] if 0 <= token < len(letters) else None
            if text is None:
                if token in starts:
                    parts.append(pieces.capital_starts.get(token, starts[token]))
                break
            parts.append(pieces.capitals.get(token, text))
            if opens[token]:
                break
        return "".join(reversed(parts)), len(parts)

    def unfinished(self, item: int, token_ids: Sequence[int], eos: int) -> int:
        """How many pieces before a final end-of-sequence (or at the end) form a word of several pieces that is
        unknown: decoding stopped at max_length in the middle of it, and those pieces are to be dropped (0: none).
        Every other word of the sequence the filter has checked."""
        body = token_ids[:-1] if token_ids and token_ids[-1] == eos else token_ids
        word, parts = self.current_word(body)
        return 0 if parts <= 1 or self._word(item, word) else parts

    def _prefix(self, item: int, written: str) -> bool:
        """Whether `written` can grow into a known word: a prefix of one, lowercased, and written as words are or
        as the start of one of the input's words with other capitals."""
        return (any(words.has_prefix(written.lower()) for words in self.known[item])
                and (written_as_words_are(written) or self.mixed[item].has_prefix(written)))

    def _word(self, item: int, written: str) -> bool:
        """Whether `written` is a known word, lowercased, written as words are or as the input writes it."""
        return (any(words.has_word(written.lower()) for words in self.known[item])
                and (written_as_words_are(written) or self.mixed[item].has_word(written)))

    def apply(self, log_probs: np.ndarray, sequences: np.ndarray, needed: int, complete: bool) -> None:
        """Forbid, in place, the tokens that would leave a word of several pieces unknown. log_probs (B, K, V),
        sequences (B, K, T). Each beam's tokens are checked best first until `needed` are allowed: a step chooses
        among those alone. Rows of only some tokens (`complete` False) may be left with fewer, for the caller to
        read the full distribution; a full row whose every token is forbidden (a word no piece can finish) is
        left as it was."""
        continues, ends, letters = self.pieces.continues, self.pieces.ends, self.pieces.letters
        capitals, capital_ends = self.pieces.capitals, self.pieces.capital_ends
        log_probs[..., self.hidden] = -np.inf  # Pieces.special holds ids of the model's vocabulary only
        for b, k in np.ndindex(*sequences.shape[:2]):
            word, parts = self.current_word(sequences[b, k])  # read back from its end: the word's pieces alone
            if parts == 0:
                continue
            row = log_probs[b, k]
            before = row.copy() if complete else None  # to leave a full row as it was, should it be emptied
            if parts > 1 and not self._word(b, word):
                row[~continues[: len(row)]] = -np.inf  # the word cannot end before it is a known one
            allowed = 0
            for token in _best_first(row):
                if continues[token] and not self._prefix(b, word + capitals.get(token, letters[token])):
                    row[token] = -np.inf
                    continue
                end = capital_ends.get(token, ends.get(token))
                if end is not None and not self._word(b, word + end):
                    row[token] = -np.inf
                    continue
                allowed += 1
                if allowed == needed:
                    break
            if before is not None and allowed == 0:
                row[:] = before
                logger.debug("known_words: no piece finishes %r as a known word; left unfiltered", word)


def _best_first(row: np.ndarray, first: int = 64, growth: int = 8) -> Iterable[int]:
    """The indices of `row`'s finite entries, highest first (equal entries by index): the best one by argmax, then
    the best `first` of the rest by a partial sort, then the best `growth` times as many of the rest, and so on, so
    that a caller who stops early sorts little of a wide row (one who takes the best alone, none of it)."""
    top = int(row.argmax()) if len(row) else 0
    ahead = bool(len(row)) and bool(np.isfinite(row[top]))  # argmax: the first highest, or a NaN (then no shortcut)
    if ahead:
        yield top
    rest = np.flatnonzero(np.isfinite(row))
    if ahead:
        rest = rest[rest != top]
    size = first
    while len(rest):
        values = row[rest]
        if len(rest) > size:
            bar = np.partition(values, len(values) - size)[len(values) - size]  # the size-th highest
            taken = values >= bar  # those equal to it too: ties keep their order by index
            chunk, values, rest = rest[taken], values[taken], rest[~taken]
        else:
            chunk, rest = rest, rest[:0]
        yield from chunk[np.argsort(-values, kind="stable")].tolist()
        size *= growth
