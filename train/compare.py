"""Compare systems side by side on splits of ../shared/data: ROUGE-1/2, input-specific and made-up words, distinct
summaries, words repeated and specific words also in the reference with 95% bootstrap intervals, next to lead,
random and the references, as Markdown tables.

    python -m train.compare --system copy=RUN/checkpoints/step-N --system plain=engines/default \
        [--sets qmsum/val,qmsum/test] [--limit 40] [--markdown compare.md] [--json compare.json]

A system is NAME=CHECKPOINT_OR_BUNDLE[;option=value...] (a checkpoint is exported first). The verdict compares the
first system with the second on every set and, given several sets, on all their examples together (each set's mean
weighted by its examples; input-specific words stay defined within each set): better means a higher mean ROUGE-1
and a higher mean count of input-specific words. A shipped bundle is replaced where the new one is better over all
the val splits of its training data (qmsum/val,squality/val,fewsum/val). Summaries are kept under --work by bundle
content, options and data, so a comparison that was stopped picks up where it was.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from locsum_sdk.evaluation import (
    DISTINCT,
    MADE_UP,
    REFERENCE,
    REPEATED,
    SHARED,
    SPECIFIC,
    evaluate,
    read_examples,
    run_baseline,
)

from .config import DATA
from .release import Comparison, cached, cell, real_words

COLUMNS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", SPECIFIC: "input-specific words", MADE_UP: "made-up words",
           DISTINCT: "distinct %", REPEATED: "repeated %", SHARED: "in reference"}
BASELINES = ("lead", "random")


def table(report: dict) -> list[str]:
    lines = ["| system | " + " | ".join(COLUMNS.values()) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    return lines + [f"| {name} | " + " | ".join(cell(metrics, c) for c in COLUMNS) + " |"
                    for name, metrics in report.items()]


def better(report: dict, candidate: str, incumbent: str) -> bool:
    """Whether `candidate` has the higher mean ROUGE-1 and the higher mean of input-specific words."""
    return all(report[candidate][m]["mean"] > report[incumbent][m]["mean"] for m in ("rouge1", SPECIFIC))


def pooled(reports: dict[str, dict], sizes: dict[str, int], system: str, metric: str) -> float:
    """The mean of `metric` over every set's examples together: each set's mean weighted by its examples."""
    return sum(sizes[name] * report[system][metric]["mean"] for name, report in reports.items()) / sum(sizes.values())


def compare(systems: list[Comparison], sets: list[str], limit: int | None,
            work: Path) -> tuple[dict[str, dict], dict[str, int]]:
    """Each set's report (`evaluate`) of the systems, the baselines and the references, and its count of examples."""
    bundles = {system.name: (system.bundle(work), system.options) for system in systems}
    reports, sizes = {}, {}
    for name in sets:
        examples = read_examples(DATA / f"{name}.jsonl", limit)
        texts = {system: cached(work, path, name.replace("/", "-"), examples, options)
                 for system, (path, options) in bundles.items()}
        reports[name] = evaluate({**texts, **{b: run_baseline(b, examples) for b in BASELINES}}, examples,
                                 known=real_words(DATA))
        sizes[name] = len(examples)
    return reports, sizes


def pooled_verdict(reports: dict[str, dict], sizes: dict[str, int], names: list[str]) -> str:
    """The first system against the second over all the sets' examples together, as one sentence."""
    first, second = names[:2]
    means = {name: {m: {"mean": pooled(reports, sizes, name, m)} for m in ("rouge1", SPECIFIC)} for name in names[:2]}
    counts = ", ".join(f"{name} {count}" for name, count in sizes.items())
    return (f"Over all {sum(sizes.values())} examples ({counts}): ROUGE-1 {means[first]['rouge1']['mean']:.2f} "
            f"against {means[second]['rouge1']['mean']:.2f}, input-specific words {means[first][SPECIFIC]['mean']:.2f} "
            f"against {means[second][SPECIFIC]['mean']:.2f}; {first} better than {second} on both: "
            f"{'yes' if better(means, first, second) else 'no'}.")


def markdown(reports: dict[str, dict], sizes: dict[str, int], names: list[str], limit: int | None) -> str:
    count = f"first {limit}" if limit else "all"
    lines = [f"Examples per set: {count}. ROUGE F1, input-specific words and made-up words per summary (words in no "
             "text of any split of the training datasets nor of the set) and the percent of distinct summaries, each "
             "with its 95% bootstrap interval; the references' own in the last row.", ""]
    for name, report in reports.items():
        references = report[REFERENCE]
        lines += [f"**{name}**", "", *table({k: v for k, v in report.items() if k != REFERENCE}),
                  f"| references | - | - | {cell(references, SPECIFIC)} | - | {cell(references, DISTINCT)} |", ""]
    if len(names) >= 2:
        verdicts = {name: better(report, names[0], names[1]) for name, report in reports.items()}
        lines.append(f"{names[0]} better than {names[1]} on ROUGE-1 and input-specific words: "
                     + ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in verdicts.items()) + ".")
        if len(reports) > 1:
            lines += ["", pooled_verdict(reports, sizes, names)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", action="append", required=True, type=Comparison.parse,
                        help="NAME=CHECKPOINT_OR_BUNDLE[;option=value...]; the first is compared with the second")
    parser.add_argument("--sets", default="qmsum/val,qmsum/test", help="comma-separated splits of ../shared/data")
    parser.add_argument("--limit", type=int, help="first N examples of each set")
    parser.add_argument("--work", default="~/.cache/locsum/compare")
    parser.add_argument("--markdown", help="write the tables here")
    parser.add_argument("--json", help="write the reports here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sets = [name for name in args.sets.split(",") if name]
    missing = [name for name in sets if not (DATA / f"{name}.jsonl").is_file()]
    if missing:
        parser.error(f"--sets {missing}: no such split under {DATA} (e.g. qmsum/val)")
    work = Path(args.work).expanduser()
    work.mkdir(parents=True, exist_ok=True)
    reports, sizes = compare(args.system, sets, args.limit, work)
    text = markdown(reports, sizes, [s.name for s in args.system], args.limit)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
