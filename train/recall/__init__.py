"""Extractor recall of oracle snippets: how many of an example's oracle snippets (`train.oracle`) a ranking puts in
its top K, with 95% bootstrap intervals, for a bundle's (or checkpoint's) extractor next to a tf-idf ranking of the
snippets against the query (or, without one, against the whole input), the input order (lead) and a random order.
The command line is `python -m train.recall` (`__main__.py`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from locsum_sdk import Summarizer
from locsum_sdk.evaluation import interval as bootstrap_interval
from locsum_sdk.limits import tfidf_scores
from locsum_sdk.units import Unit

from ..data import JsonlIndex
from ..oracle import oracle, reference_sentences

Ranker = Callable[[Sequence[Unit], Sequence[int]], np.ndarray]  # (snippets, query ids) -> a score per snippet


def recall_at(scores: np.ndarray, oracle_indices: Sequence[int], k: int) -> float:
    """Share of the oracle snippets among the k best-scored (ties to the earlier snippet)."""
    top = set(np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k].tolist())
    return len(top & set(oracle_indices)) / len(oracle_indices)


def interval(values: Sequence[float]) -> dict[str, float]:
    """Mean and 95% bootstrap interval of shares (0 to 1), in percent."""
    return bootstrap_interval(100 * np.asarray(values, dtype=np.float64), np.random.default_rng(0))


def baseline_rankers(rng: random.Random) -> dict[str, Ranker]:
    """The rankings a learned one is reported beside: tf-idf against the query (or the whole input), the input
    order, a random order."""
    return {
        "tf-idf": lambda units, query: tfidf_scores(units, query),
        "lead": lambda units, query: -np.arange(len(units), dtype=np.float64),
        "random": lambda units, query: np.array([rng.random() for _ in units]),
    }


def share(value: dict[str, float]) -> str:
    """A percentage with its interval: '41.2 [38.0, 44.5]'."""
    return f"{value['mean']:.1f} [{value['low']:.1f}, {value['high']:.1f}]"


def print_report(report: dict[str, dict[int, dict[str, float]]], label: Callable[[int], str]) -> None:
    """One line per ranking: each cutoff's mean and interval, and the examples counted."""
    width = max(map(len, report))
    for name, by_cutoff in report.items():
        cells = "  ".join(f"{label(n)} {share(v)}" for n, v in by_cutoff.items())
        print(f"{name:>{width}}  {cells}  ({next(iter(by_cutoff.values()))['examples']} examples)")


Item = tuple[Sequence[Unit], Sequence[int], Sequence[int], np.ndarray]  # units, query ids, oracle, extractor scores


def recall_report(items: Iterable[Item], ks: Sequence[int]) -> dict[str, dict[int, dict[str, float]]]:
    """Recall at each k of the extractor's scores and of the baselines, over the items with oracle snippets."""
    baselines = baseline_rankers(random.Random(0))
    rows: dict[str, dict[int, list[float]]] = {name: {k: [] for k in ks} for name in ("extractor", *baselines)}
    for units, query, found, scores in items:
        if not found:
            continue
        ranked = {"extractor": scores, **{name: rank(units, query) for name, rank in baselines.items()}}
        for name, values in ranked.items():
            for k in ks:
                rows[name][k].append(recall_at(values, found, k))
    return report_rows(rows, "extractor")


def report_rows(rows: dict[str, dict[int, list[float]]], learned: str) -> dict[str, dict[int, dict[str, float]]]:
    """Each ranking's mean and 95% interval at each cutoff from its per-example shares, and a last row, the
    `learned` ranking minus tf-idf with the examples resampled in pairs (in points: an interval above 0 says the
    learned ranking is the better on these examples)."""
    report = {name: {k: interval(values) | {"examples": len(values)} for k, values in by_k.items()}
              for name, by_k in rows.items()}
    report[f"{learned} minus tf-idf"] = {
        k: interval(np.subtract(values, rows["tf-idf"][k])) | {"examples": len(values)}
        for k, values in rows[learned].items()}
    return report


def bundle_items(summarizer: Summarizer, data: Path, limit: int | None, top: int,
                 progress: bool = True) -> Iterator[Item]:
    """The runtime's snippets and extractor scores (any backend) of each example, with its oracle of at most
    `top` snippets on those snippets."""
    options = summarizer.defaults.units
    pager = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options)
    index = JsonlIndex([data])
    for i in tqdm(range(min(limit or len(index), len(index))), desc="recall", disable=not progress):
        example = index[i]
        query = pager.query_ids(example.query)
        units = pager.pages(example.documents, query)
        found = oracle([u.text for u in units], reference_sentences(example.summary), top).indices
        yield units, query, found, (summarizer.unit_scores(units, example.query, options) if found else np.zeros(0))
