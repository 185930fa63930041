"""The shipped PageSum (`engines/pagesum`, which reads every page at its defaults; the default bundle keeps 4) on every
QMSum test meeting (10k-17k words) with default options, next to the same bundle truncated to its first 8,000 input
tokens (about the 16 pages it was limited to before limits were counted in tokens). The two are run example by
example in turn. Asserts that no meeting is refused or truncated with default options; prints ROUGE with intervals
for both, the pages per meeting and the time per meeting."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import write_result
from locsum_sdk import Summarizer
from locsum_sdk.evaluation import evaluate, format_report, read_examples

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qmsum" / "test.jsonl"
TRUNCATED_TOKENS = 8000


@pytest.mark.skipif(not DATA.is_file(), reason=f"{DATA} (the shared data) is not here")
def test_every_qmsum_meeting_with_default_options(benchmark, quick, caplog):
    examples = read_examples(DATA, 8 if quick else None)
    summarizer = Summarizer.from_pretrained("pagesum", threads=2)
    rows = {"default options": [], f"truncated to {TRUNCATED_TOKENS} tokens": []}
    pages, seconds = [], {name: [] for name in rows}

    def run():
        for example in examples:
            for name, options in zip(rows, ({}, {"truncate": True, "max_tokens": TRUNCATED_TOKENS})):
                caplog.clear()
                started = time.perf_counter()
                with caplog.at_level(logging.WARNING, logger="locsum_sdk"):
                    summary = summarizer.summarize(example.documents, query=example.query, **options)
                seconds[name].append(time.perf_counter() - started)
                rows[name].append(summary.text)
                if not options:
                    assert not caplog.records, f"{example.id}: {caplog.text}"  # nothing truncated
                    pages.append(len(summary.units))

    benchmark.pedantic(run, rounds=1, iterations=1)
    report = evaluate(rows, examples)
    print(f"\n{len(examples)} QMSum test examples, all summarized with default options (none refused or truncated)")
    print(f"pages per meeting: min {min(pages)}, median {int(np.median(pages))}, max {max(pages)}")
    for name, times in seconds.items():
        print(f"{name}: {np.mean(times):.2f} s per meeting")
    print(format_report(report))
    write_result("long_inputs", {"examples": len(examples), "pages": pages, "seconds": seconds, "rouge": report})
