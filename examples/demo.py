"""Summarize the shipped example meeting with a bundle; builds an UNTRAINED demo bundle if none is given.

    python examples/demo.py [--bundle DIR] [--query "What was decided about the roof?"]

Until a trained default bundle ships in engines/, this script makes everything itself, with no download:
a byte-level BPE tokenizer learned from the example text, a small PageSum with random weights, its export to
an ONNX bundle (in ~/.cache/locsum/demo), and then the real runtime path on the example document. The weights
are random, so the summary text is noise; the pages, page weights, timings and the pipeline are real.
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

CACHE = Path.home() / ".cache" / "locsum" / "demo"


def build_untrained_bundle(text: str) -> Path:
    import torch

    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.config import BartConfig
    from locsum_sdk.modeling.pagesum import PageSum
    from train.tokenizer import save_tokenizer, train_tokenizer

    bundle = CACHE / "bundle"
    if (bundle / "manifest.json").is_file():
        return bundle
    tokenizer = train_tokenizer(text.splitlines(), vocab_size=2000, min_frequency=1)
    tokenizer_file = save_tokenizer(tokenizer, CACHE / "tokenizer.json")
    config = BartConfig(
        vocab_size=tokenizer.get_vocab_size(), d_model=256, encoder_layers=3, decoder_layers=3, encoder_heads=4,
        decoder_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024, max_positions=512,
    )
    torch.manual_seed(0)
    model = PageSum(config)
    model.reset_parameters(std=0.05)
    checkpoint = save_checkpoint(
        model.eval(), CACHE / "checkpoint", tokenizer_file,
        units={"policy": "spatial", "max_pages": 16, "page_tokens": 512},
        generation={"num_beams": 4, "max_length": 48, "no_repeat_ngram_size": 3},
    )
    export_onnx(checkpoint, bundle, force=True)
    return bundle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", help="a bundle directory (default: an untrained demo bundle built here)")
    parser.add_argument("--file", default=str(HERE / "meeting.txt"))
    parser.add_argument("--query", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    text = Path(args.file).read_text(encoding="utf-8")
    bundle = Path(args.bundle) if args.bundle else build_untrained_bundle(text)
    summarizer = Summarizer.from_pretrained(bundle)
    summary = summarizer.summarize(text, query=args.query)
    if not args.bundle:
        print("NOTE: this bundle has RANDOM weights (no trained model ships yet): the summary text is noise.\n")
    print(f"{len(text.split())} words -> {len(summary.units)} pages (mean page weight over the summary):")
    for i, (unit, weight) in enumerate(zip(summary.units, summary.unit_weights.mean(axis=0))):
        print(f"  page {i}: chars {unit.start}-{unit.end}, {len(unit.token_ids)} tokens, weight {weight:.3f}: "
              f"{textwrap.shorten(unit.text, 60)}")
    print("\nsummary:", summary.text)
    print("timings:", {k: round(v, 3) for k, v in summary.timings.items()})


if __name__ == "__main__":
    main()
