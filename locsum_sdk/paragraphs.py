"""Paragraphs as units (the Hierarchical Transformer's input) and the tf-idf graph between them.

A paragraph is a block of a document between blank lines, or, in a dialogue, a run of consecutive speaker turns;
either is cut (at sentence, then token bounds) or filled to `paragraph_tokens`. Paragraph units are framed
`<s> text </s>` without the query: the query is the ranker's title, not part of any paragraph.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import LocsumError, OptionError
from .units import MIN_PAGE_TOKENS, Pager, Span, Unit, by_block, by_line, is_dialogue
from .validation import check_choice, check_int

PARAGRAPH_POLICIES = ("auto", "blocks", "turns")


@dataclass(frozen=True)
class ParagraphOptions:
    """How text becomes paragraphs and how many the encoder reads."""

    UNIT_TOKENS = "paragraph_tokens"

    policy: str = "auto"  # "blocks" (blank-line separated), "turns" (runs of speaker turns), "auto": turns in a
    # dialogue, blocks otherwise
    paragraph_tokens: int = 128  # one paragraph, <s> and </s> included
    top_paragraphs: int = 24  # L': the ranker's best paragraphs the encoder reads

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, PARAGRAPH_POLICIES)
        check_int("paragraph_tokens", self.paragraph_tokens, MIN_PAGE_TOKENS)
        check_int("top_paragraphs", self.top_paragraphs, 1)

    def check_model(self, model: dict[str, Any], error: type[LocsumError] = OptionError) -> None:
        """top_paragraphs fits the model: each paragraph the encoder reads is coded by its rank, one of the
        model's `max_positions` sinusoid rows."""
        positions = model["max_positions"]
        if self.top_paragraphs > positions:
            raise error(f"top_paragraphs={self.top_paragraphs} is over the model's {positions} paragraph ranks; use "
                        f"at most {positions}")


class ParagraphPager(Pager):
    """Paragraph units; `query_ids` (validated as a unit's half) are not framed into them."""

    def pages(self, documents: Sequence[str], query_ids: list[int]) -> list[Unit]:
        body = self.text_budget(query_ids, framed=False)
        paragraphs: list[list[Span]] = []
        for index, text in enumerate(documents):
            spans = self._spans(index, text, body)
            policy = self.options.policy
            if policy == "turns" or (policy == "auto" and is_dialogue(text)):
                paragraphs += fill_turns(by_line(text, spans), body)
            else:
                paragraphs += [page for block in by_block(text, spans) for page in self._fill(block, body)]
        return [self._unit(documents, paragraph, []) for paragraph in paragraphs]


def fill_turns(turns: list[list[Span]], budget: int) -> list[list[Span]]:
    """Consecutive whole turns into paragraphs of at most `budget` tokens; a turn over the budget is filled into
    paragraphs of its own."""
    paragraphs: list[list[Span]] = []
    size = budget + 1
    for turn in turns:
        tokens = sum(len(span.token_ids) for span in turn)
        if tokens > budget:
            paragraphs += Pager._fill(turn, budget)
            size = budget + 1
            continue
        if size + tokens > budget:
            paragraphs.append([])
            size = 0
        paragraphs[-1] += turn
        size += tokens
    return paragraphs


def tfidf_graph(paragraphs: Sequence[Sequence[int]]) -> np.ndarray:
    """Cosine similarity of the paragraphs' tf-idf vectors over their token ids (idf from these paragraphs):
    (P, P) float32, 1 on the diagonal of a non-empty paragraph."""
    counts = [Counter(ids) for ids in paragraphs]
    frequency: Counter = Counter()
    for count in counts:
        frequency.update(count.keys())
    idf = {token: np.log((1 + len(counts)) / (1 + df)) + 1 for token, df in frequency.items()}
    vectors = [{t: c * idf[t] for t, c in count.items()} for count in counts]
    norms = [np.sqrt(sum(w * w for w in v.values())) or 1.0 for v in vectors]
    graph = np.zeros((len(counts), len(counts)), dtype=np.float32)
    for i, a in enumerate(vectors):
        for j in range(i, len(counts)):
            b = vectors[j]
            small, large = (a, b) if len(a) <= len(b) else (b, a)
            graph[i, j] = graph[j, i] = sum(w * large.get(t, 0.0) for t, w in small.items()) / (norms[i] * norms[j])
    return graph
