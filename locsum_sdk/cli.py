"""`locsum summarize | export`: the command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .errors import LocsumError


def _summarize(args: argparse.Namespace) -> int:
    from .summarizer import Summarizer

    summarizer = Summarizer.from_pretrained(args.bundle, backend=args.backend, threads=args.threads)
    overrides = {k: v for k, v in vars(args).items() if k in _OPTION_FLAGS and v is not None}
    documents = [Path(f).read_bytes() for f in args.files]
    summary = summarizer.summarize(documents, query=args.query, **overrides)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(summary.text)
    return 0


def _export(args: argparse.Namespace) -> int:
    from .exporters.onnx import export_onnx
    from .units import PagingOptions

    paging = None
    if args.page_tokens or args.max_pages or args.policy:
        defaults = PagingOptions()
        paging = PagingOptions(
            policy=args.policy or defaults.policy,
            max_pages=args.max_pages or defaults.max_pages,
            page_tokens=args.page_tokens or defaults.page_tokens,
        )
    bundle = export_onnx(
        args.checkpoint, args.output, tokenizer=args.tokenizer, config=args.config, paging=paging, force=args.force
    )
    print(f"wrote {bundle.path} ({', '.join(sorted(bundle.manifest.files))})")
    return 0


_OPTION_FLAGS = ("num_beams", "max_length", "min_length", "length_penalty", "no_repeat_ngram_size",
                 "policy", "max_pages", "page_tokens", "num_pages", "truncate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="locsum", description="Locality-aware long-input summarization.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    commands = parser.add_subparsers(dest="command", required=True)

    s = commands.add_parser("summarize", help="summarize files; several files are several documents of one input")
    s.add_argument("files", nargs="+", help="UTF-8 text files")
    s.add_argument("--query", help="question for query-focused summarization")
    s.add_argument("--bundle", help="bundle or checkpoint directory (default: the shipped bundle)")
    s.add_argument("--backend", default="auto", choices=("auto", "onnxruntime", "torch"))
    s.add_argument("--threads", type=int)
    s.add_argument("--json", action="store_true", help="print text, pages, page weights and timings as JSON")
    s.add_argument("--num-beams", dest="num_beams", type=int)
    s.add_argument("--max-length", dest="max_length", type=int)
    s.add_argument("--min-length", dest="min_length", type=int)
    s.add_argument("--length-penalty", dest="length_penalty", type=float)
    s.add_argument("--no-repeat-ngram-size", dest="no_repeat_ngram_size", type=int)
    s.add_argument("--policy", choices=("spatial", "discourse", "document"))
    s.add_argument("--max-pages", dest="max_pages", type=int)
    s.add_argument("--page-tokens", dest="page_tokens", type=int)
    s.add_argument("--num-pages", dest="num_pages", type=int)
    s.add_argument("--truncate", action="store_true", default=None, help="keep the first pages of a too long input")
    s.set_defaults(run=_summarize)

    e = commands.add_parser("export", help="export a checkpoint to an ONNX bundle")
    e.add_argument("--kind", default="pagesum", choices=("pagesum",))
    e.add_argument("--checkpoint", required=True, help="our checkpoint, an HF BART directory or a research state dict")
    e.add_argument("--output", required=True, help="bundle directory to create")
    e.add_argument("--tokenizer", help="tokenizer.json (default: the one beside the checkpoint)")
    e.add_argument("--config", help="HF config.json for a bare state dict file")
    e.add_argument("--policy", choices=("spatial", "discourse", "document"))
    e.add_argument("--max-pages", dest="max_pages", type=int)
    e.add_argument("--page-tokens", dest="page_tokens", type=int)
    e.add_argument("--force", action="store_true", help="replace an existing output directory")
    e.set_defaults(run=_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.run(args)
    except (LocsumError, OSError) as err:
        print(f"locsum: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
