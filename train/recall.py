"""Extractor recall of oracle snippets: how many of an example's oracle snippets (`train.oracle`) a ranking puts in
its top K, with 95% bootstrap intervals, for a bundle's (or checkpoint's) extractor next to a tf-idf ranking of the
snippets against the query (or, without one, against the whole input), the input order (lead) and a random order.

    python -m train.recall --bundle engines/dyle --data ../shared/data/qmsum/test.jsonl --k 5,10,25 [--limit N]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from tqdm import tqdm

from locsum_sdk import Summarizer
from locsum_sdk.limits import tfidf_scores
from locsum_sdk.units import Unit

from .data import JsonlIndex
from .kinds.dyle import reference_sentences
from .oracle import oracle

Ranker = Callable[[Sequence[Unit], Sequence[int]], np.ndarray]  # (snippets, query ids) -> a score per snippet


def recall_at(scores: np.ndarray, oracle_indices: Sequence[int], k: int) -> float:
    """Share of the oracle snippets among the k best-scored (ties to the earlier snippet)."""
    top = set(np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k].tolist())
    return len(top & set(oracle_indices)) / len(oracle_indices)


def interval(values: Sequence[float], samples: int = 1000, seed: int = 0) -> dict[str, float]:
    """Mean and 95% percentile-bootstrap interval, in percent."""
    values = 100 * np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (samples, len(values)))].mean(axis=1)
    return {"mean": float(values.mean()), "low": float(np.percentile(means, 2.5)),
            "high": float(np.percentile(means, 97.5))}


def evaluate_recall(summarizer: Summarizer, data: Path, ks: Sequence[int], limit: int | None = None,
                    progress: bool = True) -> dict[str, dict[int, dict[str, float]]]:
    """Recall at each k of the summarizer's extractor and of the baselines, on the examples of `data` that have
    oracle snippets (the oracle of at most max(ks) snippets, on the snippets the summarizer's pager makes)."""
    options = summarizer.defaults.units
    pager = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options)
    rng = random.Random(0)
    rankers: dict[str, Ranker] = {
        "extractor": lambda units, query: summarizer.unit_scores(units, query, options),
        "tf-idf": lambda units, query: tfidf_scores(units, query),
        "lead": lambda units, query: -np.arange(len(units), dtype=np.float64),
        "random": lambda units, query: np.array([rng.random() for _ in units]),
    }
    rows: dict[str, dict[int, list[float]]] = {name: {k: [] for k in ks} for name in rankers}
    index = JsonlIndex([data])
    for i in tqdm(range(min(limit or len(index), len(index))), desc="recall", disable=not progress):
        example = index[i]
        query = pager.query_ids(example.query)
        units = pager.pages(example.documents, query)
        found = oracle([u.text for u in units], reference_sentences(example.summary), max(ks)).indices
        if not found:
            continue
        for name, rank in rankers.items():
            scores = rank(units, query)
            for k in ks:
                rows[name][k].append(recall_at(scores, found, k))
    return {name: {k: interval(values) | {"examples": len(values)} for k, values in by_k.items()}
            for name, by_k in rows.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", required=True, help="a DYLE bundle or checkpoint directory")
    parser.add_argument("--data", required=True, help="a JSON Lines file of ../shared/data")
    parser.add_argument("--k", default="5,10,25", help="comma-separated K values")
    parser.add_argument("--limit", type=int, help="first N examples")
    parser.add_argument("--output", help="write the report as JSON here")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    report = evaluate_recall(Summarizer.from_pretrained(args.bundle), Path(args.data), ks, args.limit)
    for name, by_k in report.items():
        cells = "  ".join(f"R@{k} {v['mean']:.1f} [{v['low']:.1f}, {v['high']:.1f}]" for k, v in by_k.items())
        print(f"{name:>10}  {cells}  ({next(iter(by_k.values()))['examples']} examples)")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
