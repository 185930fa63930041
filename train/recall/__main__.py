"""Extractor recall of oracle snippets for a bundle's extractor (as the runtime runs it) or a DYLE training
checkpoint's (in torch), next to the tf-idf, lead and random rankings.

    python -m train.recall --bundle engines/dyle --data ../shared/data/qmsum/test.jsonl --k 5,10,25 [--limit N]
    python -m train.recall --checkpoint RUN/checkpoints/step-N --config train/configs/dyle-small.toml --data ...
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from locsum_sdk import Summarizer
from locsum_sdk.tokenizer_file import read_tokenizer

from ..config import TrainConfig
from . import Item, bundle_items, print_report, recall_report


def checkpoint_items(checkpoint: Path, settings: TrainConfig, data: Path, limit: int | None,
                     progress: bool = True) -> Iterator[Item]:
    """A training checkpoint's extractor in torch (any extractor, one with its own tokenizer included) on the
    snippets and oracle the training data set makes of `data` with the training config's options."""
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    from ..__main__ import training_pager
    from ..kinds.dyle import DyleSet

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
