"""The writing systems (scripts) of a text's letters, and how much of an input is in scripts a bundle's words do not
hold: a bundle fine-tuned on English writes fluent-looking nonsense for Arabic or Chinese input, and says nothing.

A letter's script is the first word of its Unicode name (LATIN, GREEK, CYRILLIC, ARABIC, HEBREW, CJK, HIRAGANA,
HANGUL, ...; FULLWIDTH and HALFWIDTH forms count as their script's); only letters count (categories Lu, Ll, Lt, Lo),
so digits, punctuation, symbols and emoji say nothing. A long input is read through evenly spaced windows, so the
check costs the same for a page and a book.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LETTERS = frozenset({"Lu", "Ll", "Lt", "Lo"})
WIDTHS = ("FULLWIDTH ", "HALFWIDTH ")
SAMPLE_CHARACTERS = 1 << 18  # at most this many characters of an input are read
WINDOWS = 64  # evenly spaced windows a longer text is read through
DOCUMENT_FLOOR = 256  # every document of a many-document input is read through at least this many characters
KNOWN_SHARE = 0.01  # a script is a bundle's when at least this share of its words' letters are in it
UNFAMILIAR_SHARE = 0.5  # an input is out of a bundle's scripts when at least this share of its letters are


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


def letter_scripts(texts: Sequence[str], limit: int = SAMPLE_CHARACTERS) -> Counter[str]:
    """How many letters of `texts` (sampled: `limit` characters in all, at least DOCUMENT_FLOOR a text) each script
    has."""
    share = max(DOCUMENT_FLOOR, limit // max(len(texts), 1))
    counts: Counter[str] = Counter()
    for text in texts:
        for character, count in Counter(sample(text, share)).items():
            script = script_of(character)
            if script is not None:
                counts[script] += count
    return counts


def known_scripts(words: Iterable[str]) -> frozenset[str]:
    """The scripts of a word list (a bundle's `words.txt`): those holding at least KNOWN_SHARE of its letters."""
    counts: Counter[str] = Counter()
    for word in words:
        for character in word:
            script = script_of(character)
            if script is not None:
                counts[script] += 1
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


def _title(script: str) -> str:
    return script if script == "CJK" else script.title()


def _listed(names: list[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
