"""One memory point in a fresh process: load, summarize an input of N tokens, report the peak RSS as JSON."""

import argparse
import json
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import text_of_tokens  # noqa: E402
from locsum_sdk import Summarizer  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    summarizer = Summarizer.from_pretrained(args.path, backend=args.backend, threads=args.threads, verify=False)
    text = text_of_tokens(summarizer.tokenizer, args.tokens)
    loaded = rss_mb()
    summary = summarizer.summarize(text, num_beams=1, max_length=args.steps + 1, min_length=args.steps + 1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "tokens": sum(len(u.token_ids) for u in summary.units), "pages": len(summary.units),
        "steps": len(summary.token_ids), "rss_loaded_mb": loaded, "peak_rss_mb": peak,
        "token_ids": summary.token_ids, "seconds": summary.timings["total"],
    }))


if __name__ == "__main__":
    main()
