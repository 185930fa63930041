"""Whether an input is like the text a bundle was trained on: a bundle fine-tuned on English writes fluent-looking
nonsense for Arabic, Chinese or German input, or for an input of no words, and said nothing. Two checks against a
list the bundle carries, and one of the input alone:

- scripts (`unfamiliar`): the writing systems of the input's letters against those of the bundle's known words
  (`words.txt`). A letter's script is the first word of its Unicode name (LATIN, GREEK, CYRILLIC, ARABIC, HEBREW,
  CJK, HIRAGANA, HANGUL, ...; FULLWIDTH and HALFWIDTH forms count as their script's); only letters count
  (categories Lu, Ll, Lt, Lo), so digits, punctuation, symbols and emoji say nothing.
- common words (`uncommon`): the share of the input's words of four or more letters that are among the words most of
  the bundle's training inputs hold (`common_words.txt`). Over the 6,817 documents of 100 or more such words in the
  English data the default was trained and tested on, that share is 0.22 at the least (median 0.61); German, French,
  Spanish, Italian and Portuguese prose has 0 to 0.04 of the default's, Dutch 0.11, a list of names 0. Under
  COMMON_FLOOR the input is likely in another language, or not prose.
- words (`wordless`): runs of letters against the visible characters, over a sample of WORDLESS_SAMPLE characters.
  The shared data's 2,823 inputs hold one word a 4.6 visible characters (median), one a 6.2 at the most; an input of
  numbers, symbols or emoji, or of letters run together without spaces, holds fewer than one a WORDLESS_CHARACTERS
  and has little for a summary to draw on.

A long input is read through evenly spaced windows (`sample`), so the checks cost the same for a page and a book.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .words import CONTENT_LETTERS, WORD, WordList

LETTERS = frozenset({"Lu", "Ll", "Lt", "Lo"})
WIDTHS = ("FULLWIDTH ", "HALFWIDTH ")
SAMPLE_CHARACTERS = 1 << 18  # at most this many characters of an input are read
WINDOWS = 64  # evenly spaced windows a longer text is read through
DOCUMENT_FLOOR = 256  # every document of a many-document input is read through at least this many characters
KNOWN_SHARE = 0.01  # a script is a bundle's when at least this share of its words' letters are in it
UNFAMILIAR_SHARE = 0.5  # an input is out of a bundle's scripts when at least this share of its letters are
COMMON_FLOOR = 0.12  # an input fewer of whose words than this are a bundle's common words is unlike its training text
COMMON_MIN_WORDS = 100  # words of CONTENT_LETTERS or more an input needs before its share of common words says much
WORDLESS_CHARACTERS = 20  # fewer words (runs of letters) than one a this many visible characters: little to summarize
WORDLESS_MIN_CHARACTERS = 256  # visible characters an input needs before its words say much
WORDLESS_SAMPLE = 1 << 12  # characters of an input its words are counted in (a ratio: a small sample tells it)


@functools.lru_cache(maxsize=1 << 16)
def script_of(character: str) -> str | None:
    """The script of a letter (`LATIN`, `ARABIC`, `CJK`, ...), or None for anything that is not a letter."""
    if unicodedata.category(character) not in LETTERS:
        return None
    name = unicodedata.name(character, "")
    for width in WIDTHS:
        name = name.removeprefix(width)
    return name.split(" ", 1)[0] or None


def sample(text: str, limit: int) -> str:
    """`text` itself, or WINDOWS evenly spaced windows of it that hold `limit` characters in all."""
    if len(text) <= limit:
        return text
    width, stride = limit // WINDOWS, len(text) // WINDOWS
    return "".join(text[i * stride: i * stride + width] for i in range(WINDOWS))


def samples(texts: Sequence[str], limit: int = SAMPLE_CHARACTERS) -> list[str]:
    """Each of `texts` sampled (`sample`): `limit` characters in all, at least DOCUMENT_FLOOR a text."""
    share = max(DOCUMENT_FLOOR, limit // max(len(texts), 1))
    return [sample(text, share) for text in texts]


def letter_scripts(texts: Sequence[str], limit: int = SAMPLE_CHARACTERS) -> Counter[str]:
    """How many letters of `texts` (`samples`) each script has."""
    return _scripts_of(samples(texts, limit))


def known_scripts(words: Iterable[str]) -> frozenset[str]:
    """The scripts of a word list (a bundle's `words.txt`): those holding at least KNOWN_SHARE of its letters."""
    counts = _scripts_of(words)
    total = sum(counts.values())
    return frozenset(script for script, count in counts.items() if count >= KNOWN_SHARE * total)


@dataclass(frozen=True)
class Unfamiliar:
    """The letters of an input in scripts a bundle does not know: their share of its letters, those scripts (the
    most letters first) and the bundle's."""

    share: float
    scripts: tuple[str, ...]
    known: frozenset[str]

    def message(self) -> str:
        names = [_title(s) for s in self.scripts[:3]] + (["other"] if len(self.scripts) > 3 else [])
        scripts = f"{_listed(names)} script{'s' if len(self.scripts) > 1 else ''}"
        known = _listed(sorted(_title(s) for s in self.known))
        return (f"{self.share:.0%} of the input's letters are {scripts}, which this bundle's words do not hold "
                f"(they are {known}): it was not trained on this language and its summary will likely be unrelated "
                "to the input or not in its language; summarize it with a bundle trained on it")


def unfamiliar(texts: Sequence[str], known: frozenset[str]) -> Unfamiliar | None:
    """Whether at least UNFAMILIAR_SHARE of the letters of `texts` are in scripts outside `known`, and which; None
    where they are not, where the texts have no letters, or where `known` is empty (nothing to judge by)."""
    if not known:
        return None
    counts = letter_scripts(texts)
    total = sum(counts.values())
    foreign = Counter({script: count for script, count in counts.items() if script not in known})
    if not total or sum(foreign.values()) < UNFAMILIAR_SHARE * total:
        return None
    return Unfamiliar(sum(foreign.values()) / total, tuple(s for s, _ in foreign.most_common()), known)


@dataclass(frozen=True)
class Uncommon:
    """An input few of whose words are a bundle's common words: that share, and how many words it is of."""

    share: float
    words: int

    def message(self) -> str:
        return (f"only {self.share:.0%} of the input's {self.words} words of {CONTENT_LETTERS} or more letters are "
                f"among the words most of this bundle's training inputs hold (fewer than {COMMON_FLOOR:.0%}): it is "
                "likely in a language the bundle was not trained on, or not prose (a list, a table, code), and its "
                "summary will likely be unrelated to it")


def uncommon(texts: Sequence[str], common: WordList) -> Uncommon | None:
    """Whether fewer than COMMON_FLOOR of the words (of CONTENT_LETTERS or more letters) of `texts` (`samples`) are
    in `common`, a bundle's common words; None where they are not, or where the texts hold fewer than
    COMMON_MIN_WORDS such words (too few to say)."""
    counts: Counter[str] = Counter()
    for text in samples(texts):
        counts.update(word.lower() for word in WORD.findall(text) if len(word) >= CONTENT_LETTERS)
    total = sum(counts.values())
    if total < COMMON_MIN_WORDS or not len(common):
        return None
    share = sum(count for word, count in counts.items() if common.has_word(word)) / total
    return Uncommon(share, total) if share < COMMON_FLOOR else None


def _scripts_of(texts: Iterable[str]) -> Counter[str]:
    """How many letters of `texts`, read whole, each script has."""
    counts: Counter[str] = Counter()
    for text in texts:
        for character, count in Counter(text).items():
            script = script_of(character)
            if script is not None:
                counts[script] += count
    return counts


def _title(script: str) -> str:
    return script if script == "CJK" else script.title()


def _listed(names: list[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True)
class Wordless:
    """An input of few words (runs of letters) for its visible characters: both counts, over its sample
    (`WORDLESS_SAMPLE`)."""

    words: int
    characters: int

    def message(self) -> str:
        held = (f"one word (a run of letters) a {self.characters / self.words:.0f} visible characters, where prose "
                "holds one a 4 to 6" if self.words else "no words (runs of letters)")
        return (f"the input holds {held}: it is numbers, symbols or emoji, or letters run together without spaces, "
                "which leaves a summary little to draw on, so it will likely be made up")


def wordless(texts: Sequence[str]) -> Wordless | None:
    """Whether `texts` (`samples` of WORDLESS_SAMPLE characters) hold fewer words than one a WORDLESS_CHARACTERS
    visible characters; None where they hold more, or fewer than WORDLESS_MIN_CHARACTERS visible characters (too few
    to say)."""
    words = characters = 0
    for text in samples(texts, WORDLESS_SAMPLE):
        characters += len("".join(text.split()))
        words += len(WORD.findall(text))
    if characters < WORDLESS_MIN_CHARACTERS or words * WORDLESS_CHARACTERS >= characters:
        return None
    return Wordless(words, characters)
