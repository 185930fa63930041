"""How much input a call accepts, and which pages it keeps when `truncate` is on.

Two limits apply to every call, after paging and before any encoder work: `max_tokens` (the input's text tokens,
per input) and `memory_limit` (the estimated working memory of the whole batch, `memory.estimate_memory`).
Over either, a call raises a typed error naming the figure and the limit, or, with `truncate=True`, keeps the
pages that fit and logs a warning: the first ones (`select="first"`) or those that score best against the query
by tf-idf (`select="tfidf"`; without a query, against the input as a whole), in their original order.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InputTooLongError, MemoryLimitError
from .memory import MemoryEstimate, largest_parts, parse_size, size_text
from .units import Unit
from .validation import check_bool, check_choice, check_int

logger = logging.getLogger("locsum_sdk")

SELECTIONS = ("first", "tfidf")
DEFAULT_MAX_TOKENS = 262_144  # input tokens accepted by default; memory_limit is what really bounds a call


@dataclass(frozen=True)
class LimitOptions:
    """How much input a call accepts and what happens to more."""

    max_tokens: int = DEFAULT_MAX_TOKENS  # most text tokens of one input (query and special tokens not counted)
    truncate: bool = False  # over a limit: False raises, True keeps the pages that fit (and warns)
    select: str = "first"  # which pages truncation keeps: one of SELECTIONS
    memory_limit: int | str | None = None  # bytes (or "6GB"); None: memory.DEFAULT_SHARE of the backend's free_memory

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, 1)
        check_bool("truncate", self.truncate)
        check_choice("select", self.select, SELECTIONS)
        if self.memory_limit is not None:
            parse_size(self.memory_limit)


def split_legacy_units(units: dict) -> tuple[dict, dict]:
    """Paging settings written before limits were counted in tokens (bundle format 3, older checkpoints): drop
    `max_pages` (the page cap that refused most long inputs; `max_tokens` and the memory limit replace it) and
    move `truncate` to the limits. Returns (paging, limits) settings."""
    units = dict(units)
    units.pop("max_pages", None)
    limits = {"truncate": units.pop("truncate")} if "truncate" in units else {}
    return units, limits


Estimate = Callable[[int, int, int], MemoryEstimate]  # (items, units per item, unit length) -> estimate


def grid(items: Sequence[Sequence[Unit]]) -> tuple[int, int, int]:
    """The (items, units per item, unit length) grid a batch of `items` is padded to: what an `Estimate` reads."""
    return len(items), max(len(units) for units in items), max(len(u.token_ids) for units in items for u in units)


def after_batches(estimate: Estimate, held: MemoryEstimate | None) -> Estimate:
    """`estimate` of a batch that runs after others of the same call whose estimate was `held` (None: the first):
    each part at its largest over them (`memory.largest_parts`: the runtime's arenas keep their chunks)."""
    if held is None:
        return estimate
    return lambda items, width, length: largest_parts([held, estimate(items, width, length)])


def apply_limits(items: list[list[Unit]], options: LimitOptions, estimate: Estimate, limit: int | None,
                 queries: Sequence[Sequence[int]], unit_tokens: str) -> list[list[Unit]]:
    """Check (or truncate to) `max_tokens` per input and the memory limit for the batch.

    Args:
        items: the pages of each input.
        estimate: working memory of a (items, units, length) grid.
        limit: bytes the call may use (None: unknown, not checked).
        queries: each input's query token ids (for `select="tfidf"`).
        unit_tokens: the name of the option that bounds a unit's tokens (the kind's `UNIT_TOKENS`), for advice.
    """
    items = within_tokens(items, options, queries, unit_tokens)
    _, width, length = grid(items)
    needed = estimate(len(items), width, length)
    if limit is None or needed.total <= limit:
        return items
    fits = _widest_fitting(estimate, len(items), width, length, limit)
    advice = (
        f"lower num_beams or max_length, summarize fewer inputs at once, pass truncate=True to keep the pages that "
        f"fit, or raise memory_limit (now {size_text(limit)})"
    )
    if not options.truncate:
        raise MemoryLimitError(
            f"summarizing {len(items)} input(s) of up to {width} pages needs about {needed.describe()}, over the "
            f"memory limit of {size_text(limit)}; {advice}"
        )
    if fits == 0:
        raise MemoryLimitError(
            f"even one page per input needs about {estimate(len(items), 1, length).describe()}, over the memory "
            f"limit of {size_text(limit)}; {advice}"
        )
    kept = [_select(units, query, fits, None, options.select) if len(units) > fits else units
            for units, query in zip(items, queries)]
    logger.warning(
        "input truncated to fit memory: %d input(s) of up to %d pages would need about %s, over the limit of %s; "
        "kept %d pages per input (select=%s)", len(items), width, size_text(needed.total), size_text(limit), fits,
        options.select,
    )
    return kept


def within_tokens(items: list[list[Unit]], options: LimitOptions, queries: Sequence[Sequence[int]],
                  unit_tokens: str) -> list[list[Unit]]:
    """Check (or truncate to) `max_tokens` per input: the units of each input, within the limit. `unit_tokens`
    names the option that bounds a unit's tokens, for the advice an error gives."""
    return [_within_tokens(i, units, options, query, unit_tokens)
            for i, (units, query) in enumerate(zip(items, queries))]


def _within_tokens(index: int, units: list[Unit], options: LimitOptions, query: Sequence[int],
                   unit_tokens: str) -> list[Unit]:
    tokens = _tokens(units)
    if tokens <= options.max_tokens:
        return units
    if not options.truncate:
        raise InputTooLongError(
            f"input {index} has {tokens} tokens, over max_tokens={options.max_tokens}; raise max_tokens (memory "
            "is checked separately) or pass truncate=True to keep the pages that fit (select='first' or 'tfidf')"
        )
    kept = _select(units, query, None, options.max_tokens, options.select)
    if not kept:
        raise InputTooLongError(
            f"input {index}: no page fits max_tokens={options.max_tokens} (the smallest page has "
            f"{min(len(u.text_ids) for u in units)} tokens); raise max_tokens or lower {unit_tokens}"
        )
    logger.warning("input %d truncated: %s", index, _kept_text(kept, units, options.select))
    return kept


def _kept_text(kept: list[Unit], units: list[Unit], select: str) -> str:
    """How much of an input's `units` a limit `kept`: "kept 4 of 11 pages (1936 of 5314 tokens, select=tfidf)"."""
    return (f"kept {len(kept)} of {len(units)} pages ({_tokens(kept)} of {_tokens(units)} tokens, "
            f"select={select})")


def truncation(before: list[Unit], after: list[Unit], options: LimitOptions) -> list[str]:
    """What the limits did to an input whose units were `before` and are `after` (`Summary.warnings`): nothing, or
    which limit cut it and how much of it was kept."""
    if len(after) == len(before):
        return []
    limit, advice = ((f"max_tokens={options.max_tokens}", "raise max_tokens") if _tokens(before) > options.max_tokens
                     else ("the memory limit", "raise memory_limit or lower num_beams"))
    return [f"truncated to fit {limit}: {_kept_text(after, before, options.select)}; {advice} to read all of it"]


def _tokens(units: list[Unit]) -> int:
    return sum(len(u.text_ids) for u in units)


def _widest_fitting(estimate: Estimate, batch: int, width: int, length: int, limit: int) -> int:
    """The most units per item whose estimate fits `limit` (0 if not even one): binary search, the estimate
    growing with the width."""
    low, high = 0, width
    while low < high:
        middle = (low + high + 1) // 2
        if estimate(batch, middle, length).total <= limit:
            low = middle
        else:
            high = middle - 1
    return low


def _select(units: list[Unit], query: Sequence[int], count: int | None, tokens: int | None,
            policy: str) -> list[Unit]:
    """At most `count` pages, or pages of at most `tokens` text tokens, chosen by `policy`, in input order."""
    order = range(len(units)) if policy == "first" else np.argsort(-tfidf_scores(units, query), kind="stable")
    chosen: list[int] = []
    used = 0
    for index in order:
        size = len(units[index].text_ids)
        if tokens is not None and used + size > tokens:
            if policy == "first":
                break
            continue
        chosen.append(int(index))
        used += size
        if count is not None and len(chosen) == count:
            break
    return [units[i] for i in sorted(chosen)]


def tfidf_scores(units: Sequence[Unit], query: Sequence[int]) -> np.ndarray:
    """Cosine similarity of each page's tf-idf vector (over token ids) to the query's, or, without a query, to
    the input's as a whole. Linear in the input: one sparse count per page."""
    return tfidf_cosine([u.text_ids for u in units], query)


def tfidf_cosine(texts: Sequence[Sequence[int]], query: Sequence[int]) -> np.ndarray:
    """`tfidf_scores` over token id sequences: each text's tf-idf cosine (document frequencies over `texts`) to
    `query`'s, or, with an empty query, to all the texts' together; float64, (len(texts),)."""
    counts = [Counter(ids) for ids in texts]
    frequency: Counter = Counter()
    whole: Counter = Counter()
    for count in counts:
        frequency.update(count.keys())
        whole.update(count)
    idf = {token: np.log((1 + len(texts)) / (1 + df)) + 1 for token, df in frequency.items()}
    target = Counter(query) if len(query) else whole
    target_weights = {t: c * idf.get(t, 0.0) for t, c in target.items()}
    target_norm = np.sqrt(sum(w * w for w in target_weights.values())) or 1.0
    scores = np.zeros(len(texts))
    for i, count in enumerate(counts):
        weights = {t: c * idf[t] for t, c in count.items()}
        norm = np.sqrt(sum(w * w for w in weights.values())) or 1.0
        scores[i] = sum(w * target_weights.get(t, 0.0) for t, w in weights.items()) / (norm * target_norm)
    return scores


def tfidf_feature(texts: Sequence[Sequence[int]], query: Sequence[int]) -> np.ndarray:
    """`tfidf_cosine` standardized over the texts (zero mean, unit deviation; zeros where they all score alike):
    a learned selection stage's lexical input, on one scale whatever the input's length; float32, (len(texts),)."""
    cosine = tfidf_cosine(texts, query)
    spread = cosine.std()
    centred = cosine - cosine.mean()
    return (centred / spread if spread > 1e-9 else np.zeros_like(cosine)).astype(np.float32)
