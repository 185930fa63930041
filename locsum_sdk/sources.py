"""Where each sentence of a summary came from: its character span in the summary, the units it drew on (the mean,
over the sentence's tokens, of each decoding step's weight per unit: `Summary.unit_weights`, whatever the kind makes
of them), and up to `PASSAGES` passages of the input that support it.

The rule: passages are sentences of the units the sentence weighs at least `UNIT_SHARE` of its top unit's weight
(at most `MAX_UNITS` of them, the highest first); each is scored by the share of the summary sentence's content
words (`words.CONTENT_LETTERS` letters or more, lowercase) it holds, plus its unit's weight (a tie-break: the
weights alone rarely tell units apart). The best passage is cited first, then the one that adds the most content
words the first lacks, while one adds any. A sentence is supported when its passages together hold at least
`SUPPORT_SHARE` of its content words; an unsupported one keeps the passages found, marked as such, and a sentence
without content words is unsupported (nothing in it can be checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .units import Unit, split_sentences
from .words import content_words

UNIT_SHARE = 0.5  # passages are looked for in the units a sentence weighs at least this share of its top unit's
MAX_UNITS = 8  # and in at most this many of them
PASSAGES = 2  # passages cited per sentence, at most
SUPPORT_SHARE = 0.5  # a sentence is supported when its passages hold this share of its content words
SPAN_CONTEXT = 8  # tokens decoded before each one to read what it adds (a character's bytes span at most 4)


@dataclass(frozen=True)
class Passage:
    """A span of the input cited for a sentence: in the text of document `document` (the input's documents, as
    `Unit.document` counts them), inside unit `unit` (an index of `Summary.units`)."""

    unit: int
    document: int
    start: int  # character span in the document
    end: int
    shared: float  # the share of the sentence's content words the passage holds
    score: float  # `shared` plus the unit's weight for the sentence

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "document": self.document, "start": self.start, "end": self.end,
                "shared": round(self.shared, 4), "score": round(self.score, 4)}


@dataclass(frozen=True)
class Sentence:
    """A sentence of the summary and where it came from."""

    start: int  # character span in the summary's text
    end: int
    unit_weights: tuple[float, ...]  # per unit of the summary: the sentence's mean step weight
    passages: tuple[Passage, ...]
    supported: bool

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "unit_weights": [round(w, 4) for w in self.unit_weights],
                "passages": [p.to_dict() for p in self.passages], "supported": self.supported}


def token_spans(tokenizer: Any, token_ids: Sequence[int], text: str) -> list[tuple[int, int]]:
    """The character span in `text` (the decoded ids, stripped) of each token: what decoding it added, read from
    decodings of the `SPAN_CONTEXT` tokens before it and of those with it (linear in the summary's length: each
    decoding's tail depends on its last tokens alone, and both share their head)."""
    ids = list(token_ids)
    full = tokenizer.decode(ids, skip_special_tokens=True)
    lead = len(full) - len(full.lstrip())
    ends, end = [], 0
    for i in range(len(ids)):
        first = max(0, i - SPAN_CONTEXT)
        before = len(tokenizer.decode(ids[first:i], skip_special_tokens=True)) if i > first else 0
        end += len(tokenizer.decode(ids[first:i + 1], skip_special_tokens=True)) - before
        ends.append(end - lead)
    starts = [0, *ends[:-1]]
    return [(min(max(a, 0), len(text)), min(max(b, 0), len(text))) for a, b in zip(starts, ends)]


def sentence_sources(text: str, token_ids: Sequence[int], unit_weights: np.ndarray, units: Sequence[Unit],
                     tokenizer: Any) -> list[Sentence]:
    """Each sentence of the summary `text` (decoded from `token_ids`, whose steps weighed the `units` as
    `unit_weights` (steps, units) says) with the units it drew on and its passages (see the module docstring)."""
    spans = np.array(token_spans(tokenizer, token_ids, text), dtype=np.int64).reshape(-1, 2)
    steps = min(len(spans), unit_weights.shape[0])
    spans = spans[:steps]
    split: dict[int, list[tuple[int, int, set[str]]]] = {}
    found = []
    for start, end in split_sentences(text):
        rows = np.flatnonzero((spans[:, 0] < end) & (spans[:, 1] > start))
        weights = (unit_weights[rows].mean(axis=0) if rows.size else np.zeros(len(units))).astype(float)
        words = content_words(text[start:end])
        candidates = []
        for index in [int(i) for i in np.argsort(-weights, kind="stable")[:MAX_UNITS]]:
            if weights[index] < UNIT_SHARE * weights.max():
                break
            unit = units[index]
            if index not in split:
                split[index] = [(a, b, content_words(unit.text[a:b])) for a, b in split_sentences(unit.text)]
            candidates += [(index, a, b, held & words) for a, b, held in split[index] if held & words]
        passages: list[Passage] = []
        covered: set[str] = set()
        while candidates and len(passages) < PASSAGES:
            index, a, b, held = max(candidates, key=lambda c: (len(c[3] - covered), weights[c[0]], -c[0], -c[1]))
            if not held - covered:
                break
            shared = len(held) / len(words)
            unit = units[index]
            passages.append(Passage(index, unit.document, unit.start + a, unit.start + b, shared,
                                    shared + float(weights[index])))
            covered |= held
            candidates.remove((index, a, b, held))
        supported = bool(words) and len(covered) >= SUPPORT_SHARE * len(words)
        found.append(Sentence(start, end, tuple(weights.tolist()), tuple(passages), supported))
    return found


def supported_only(text: str, sentences: Sequence[Sentence]) -> tuple[str, list[Sentence]]:
    """The summary without its unsupported sentences (the `drop_unsupported` option): the supported ones joined by a
    space, each with its span in the new text."""
    kept, parts, at = [], [], 0
    for sentence in sentences:
        if not sentence.supported:
            continue
        piece = text[sentence.start:sentence.end]
        start = at + (1 if parts else 0)
        kept.append(replace(sentence, start=start, end=start + len(piece)))
        parts.append(piece)
        at = start + len(piece)
    return " ".join(parts), kept
