"""The paragraph ranker's ROUGE-L recall at L' (Liu & Lapata 2019, Table 1): the share of the summary's longest
common subsequence that the L' best-ranked paragraphs hold, for the learned ranker of a Hierarchical Transformer
bundle or checkpoint next to a tf-idf ranking against the query (or, without one, the whole input), the input order
and a random order, with 95% bootstrap intervals.

    python -m train.ranker_recall --bundle engines/hiersumm --data ../shared/data/qmsum/val.jsonl --l 5,10,20,40
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from locsum_sdk import Summarizer

from .data import JsonlIndex
from .oracle import _lcs_hits, rouge_tokens
from .recall import baseline_rankers, print_report, report_rows


def rouge_l_recall(candidate: Sequence[str], reference: Sequence[str]) -> float:
    """LCS(candidate, reference) / len(reference) over rouge-score tokens (0 for an empty reference)."""
    if not reference:
        return 0.0
    vocab = {w: k for k, w in enumerate(dict.fromkeys(reference))}
    hits = _lcs_hits([vocab[w] for w in reference], [[vocab.get(w, -2) for w in candidate]])
    return float(hits.sum()) / len(reference)


def ranker_report(summarizer: Summarizer, data: Path, lengths: Sequence[int], limit: int | None = None,
                  progress: bool = True) -> dict[str, dict[int, dict[str, float]]]:
    options = summarizer.defaults.units
    pager = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options)
    baselines = baseline_rankers(random.Random(0))
    rows: dict[str, dict[int, list[float]]] = {name: {n: [] for n in lengths} for name in ("ranker", *baselines)}
    index = JsonlIndex([data])
    for i in tqdm(range(min(limit or len(index), len(index))), desc="ranker recall", disable=not progress):
        example = index[i]
        query = pager.query_ids(example.query)
        units = pager.pages(example.documents, query)
        reference = rouge_tokens(example.summary)
        ranked = {"ranker": summarizer.unit_scores(units, example.query, options),
                  **{name: rank(units, query) for name, rank in baselines.items()}}
        for name, scores in ranked.items():
            order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
            for n in lengths:
                chosen = sorted(order[:n].tolist())  # the kept paragraphs, read in input order
                words = [w for k in chosen for w in rouge_tokens(units[k].text)]
                rows[name][n].append(rouge_l_recall(words, reference))
    return report_rows(rows, "ranker")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", required=True, help="a hiersumm bundle, or a checkpoint (run in torch)")
    parser.add_argument("--data", required=True, help="a JSON Lines file of ../shared/data")
    parser.add_argument("--l", default="5,10,20,40", help="comma-separated L' values")
    parser.add_argument("--limit", type=int, help="first N examples")
    parser.add_argument("--output", help="write the report as JSON here")
    args = parser.parse_args(argv)
    report = ranker_report(Summarizer.from_pretrained(args.bundle), Path(args.data),
                           [int(n) for n in args.l.split(",")], args.limit)
    print_report(report, lambda n: f"ROUGE-L R@{n}")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
