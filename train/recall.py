"""Extractor recall of oracle snippets: how many of an example's oracle snippets (`train.oracle`) a ranking puts in
its top K, with 95% bootstrap intervals, for a bundle's (or checkpoint's) extractor next to a tf-idf ranking of the
snippets against the query (or, without one, against the whole input), the input order (lead) and a random order.

    python -m train.recall --bundle engines/dyle --data ../shared/data/qmsum/test.jsonl --k 5,10,25 [--limit N]
    python -m train.recall --checkpoint RUN/checkpoints/step-N --config train/configs/dyle-small.toml --data ...
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from locsum_sdk import Summarizer
from locsum_sdk.evaluation import interval as bootstrap_interval
from locsum_sdk.limits import tfidf_scores
from locsum_sdk.tokenizer_file import read_tokenizer
from locsum_sdk.units import Unit

from .config import TrainConfig
from .data import JsonlIndex
from .kinds.dyle import reference_sentences
from .oracle import oracle

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


def checkpoint_items(checkpoint: Path, settings: TrainConfig, data: Path, limit: int | None,
                     progress: bool = True) -> Iterator[Item]:
    """A training checkpoint's extractor in torch (any extractor, one with its own tokenizer included) on the
    snippets and oracle the training data set makes of `data` with the training config's options."""
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    from .__main__ import training_pager
    from .kinds.dyle import DyleSet

    model = load_checkpoint(checkpoint).model
    pager = training_pager(settings, read_tokenizer(settings.resolve(settings.tokenizer)), model)
    examples = DyleSet([data], pager, pager.tokenizer, settings, f"eval-{data.parent.name}-{data.stem}", progress)
    for i in tqdm(range(min(limit or len(examples), len(examples))), desc="recall", disable=not progress):
        sample = examples.get(i)
        scores = examples.extractor_scores(model, sample.snippets, sample.query)
        yield sample.snippets, pager.query_ids(sample.query), sample.oracle, scores


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", help="a DYLE bundle or checkpoint directory, run as the runtime runs it")
    parser.add_argument("--checkpoint", help="a DYLE training checkpoint, its extractor run in torch (with --config)")
    parser.add_argument("--config", help="the training config of --checkpoint (its snippet options)")
    parser.add_argument("--data", required=True, help="a JSON Lines file of ../shared/data")
    parser.add_argument("--k", default="5,10,25", help="comma-separated K values")
    parser.add_argument("--limit", type=int, help="first N examples")
    parser.add_argument("--output", help="write the report as JSON here")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    if bool(args.bundle) == bool(args.checkpoint) or (args.checkpoint and not args.config):
        parser.error("give --bundle, or --checkpoint with --config")
    if args.bundle:
        items = bundle_items(Summarizer.from_pretrained(args.bundle), Path(args.data), args.limit, max(ks))
    else:
        items = checkpoint_items(Path(args.checkpoint), TrainConfig.load(args.config), Path(args.data), args.limit)
    report = recall_report(items, ks)
    print_report(report, lambda k: f"R@{k}")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
