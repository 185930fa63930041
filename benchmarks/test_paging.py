"""Paging time against input length: 10k to 1M tokens of text punctuated normally, lowercase after every period
(as many transcripts are: one "sentence" per line), without punctuation, and without spaces (one huge word), paged
with the shipped bundle's tokenizer and page size. Prints the time per 1k tokens at each length and, per kind of
text, the ratio of the slowest to the fastest (flat within 2x is linear). Then one 1M-word input through
`Summarizer.summarize` with default options: refused (over max_tokens) or paged, and how long that took."""

from __future__ import annotations

import random
import time

from benchmarks.common import RESULTS, line_plot, write_result
from locsum_sdk import Summarizer
from locsum_sdk.errors import InputTooLongError
from locsum_sdk.profiling import WORDS
from locsum_sdk.units import Pager, as_documents

FULL = [10_000, 100_000, 1_000_000]
QUICK = [10_000, 100_000]


def text(kind: str, words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    if kind == "no spaces":
        return "".join(rng.choice(WORDS) for _ in range(words))
    out = []
    for i in range(words):
        word = rng.choice(WORDS)
        end = i % 12 == 11
        if kind == "punctuated":
            word = word.capitalize() if i % 12 == 0 else word + ("." if end else "")
        elif kind == "lowercase":
            word += "." if end else ""
        out.append(word)
    return " ".join(out)


def page_seconds(summarizer: Summarizer, source: str) -> tuple[float, int]:
    pager = Pager(summarizer.tokenizer, summarizer.special, summarizer.paging)
    started = time.perf_counter()
    units = pager(as_documents(source))
    return time.perf_counter() - started, sum(len(u.text_ids) for u in units)


KINDS = ["punctuated", "lowercase", "unpunctuated", "no spaces"]


def test_paging_time_per_token(benchmark, quick):
    summarizer = Summarizer.from_pretrained(threads=2)
    rows: dict[str, list[dict]] = {kind: [] for kind in KINDS}

    def run():
        for kind in KINDS:
            per_word = page_seconds(summarizer, text(kind, 20_000))[1] / 20_000
            for tokens in QUICK if quick else FULL:
                source = text(kind, max(1, round(tokens / per_word)))
                seconds, counted = min(page_seconds(summarizer, source) for _ in range(2))
                rows[kind].append({"tokens": counted, "seconds": seconds, "ms_per_1k_tokens": 1e6 * seconds / counted})

    benchmark.pedantic(run, rounds=1, iterations=1)
    print()
    for kind, points in rows.items():
        spread = max(r["ms_per_1k_tokens"] for r in points) / min(r["ms_per_1k_tokens"] for r in points)
        cells = [f"{r['tokens']:>9,} tokens {r['seconds']:6.2f} s ({r['ms_per_1k_tokens']:.2f} ms/1k)" for r in points]
        print(f"{kind:>12}: " + ", ".join(cells) + f"; slowest/fastest per token {spread:.2f}x")
    write_result("paging", {"rows": rows})
    line_plot({kind: [(r["tokens"], r["ms_per_1k_tokens"]) for r in points] for kind, points in rows.items()},
              RESULTS / "paging.png", "input tokens", "ms per 1k tokens", "paging time per token", log_x=True)


def test_a_million_words(benchmark, quick):
    summarizer = Summarizer.from_pretrained(threads=2)
    source = text("lowercase", 100_000 if quick else 1_000_000)
    outcome = {}

    def run():
        started = time.perf_counter()
        try:
            summarizer.summarize(source, max_length=2)
            outcome["result"] = "summarized"
        except InputTooLongError as err:
            outcome["result"] = f"refused: {err}"
        outcome["seconds"] = time.perf_counter() - started

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\n{len(source.split()):,} words: {outcome['result'][:160]} after {outcome['seconds']:.2f} s")
    write_result("paging_million_words", {"words": len(source.split()), **outcome})
