"""The Hierarchical Transformer (the paper's sizes, random weights):

- memory and time against the number of paragraphs (8 to 128 of 128 tokens, all kept: top_paragraphs = their
  number), ONNX Runtime and the torch reference, each point in a fresh process: peak RSS, ranker, encoder and
  step time; plots.
- the decoding step at 40 paragraphs, 4 beams: ONNX Runtime vs torch, interleaved after a warm-up, identical
  tokens. Target: ONNX Runtime at least 1.5x faster.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from benchmarks.common import RESULTS, interleaved_steps, line_plot, paper_hiersumm, text_of_tokens, write_result
from locsum_sdk import Summarizer
from locsum_sdk.generation import GenerationOptions
from locsum_sdk.unit_batch import UnitBatch

COUNTS, QUICK_COUNTS = [8, 16, 32, 64, 128], [8, 16]
CHILD = """
import json, sys
from benchmarks.test_hiersumm import paragraphs_text
from locsum_sdk import Summarizer
from locsum_sdk.profiling import peak_rss_mb, rss_mb
path, backend, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
summarizer = Summarizer.from_pretrained(path, backend=backend, threads=2, verify=False)
text = paragraphs_text(summarizer, count)
loaded = rss_mb()
summary = summarizer.summarize(text, top_paragraphs=count, max_length=9, min_length=9, num_beams=4)
t = summary.timings
print(json.dumps({"paragraphs": len(summary.units), "peak_rss_mb": peak_rss_mb(), "loaded_rss_mb": loaded,
                  "ranker_s": t["select"], "encode_s": t["encode"], "step_ms": 1000 * t["decode"] / 8}))
"""


def paragraphs_text(summarizer, count: int, tokens: int = 120) -> str:
    """`count` blank-line separated paragraphs of about `tokens` tokens."""
    return "\n\n".join(text_of_tokens(summarizer.tokenizer, tokens - 10, seed=i).replace("\n", " ")
                         for i in range(count))


def point(path, backend: str, count: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), backend, str(count)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        return {"skipped": done.stderr.strip().splitlines()[-1] if done.stderr else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_memory_and_time_vs_paragraphs(benchmark, quick):
    checkpoint, bundle = paper_hiersumm()
    rows = []

    def run():
        for count in QUICK_COUNTS if quick else COUNTS:
            rows.append({"count": count, "onnxruntime": point(bundle, "onnxruntime", count),
                         "torch": point(checkpoint, "torch", count)})

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\n{'paragraphs':>10} {'backend':>12} {'peak MB':>8} {'working MB':>11} {'ranker s':>9} {'encode s':>9} "
          f"{'step ms':>8}")
    for row in rows:
        for backend in ("onnxruntime", "torch"):
            p = row[backend]
            if "skipped" in p:
                print(f"{row['count']:>10} {backend:>12} skipped: {p['skipped']}")
                continue
            working = p["peak_rss_mb"] - p["loaded_rss_mb"]
            print(f"{row['count']:>10} {backend:>12} {p['peak_rss_mb']:>8.0f} {working:>11.0f} "
                  f"{p['ranker_s']:>9.2f} {p['encode_s']:>9.2f} {p['step_ms']:>8.1f}")
    series = lambda backend, key: [(r["count"], r[backend][key]) for r in rows if key in r[backend]]  # noqa: E731
    line_plot({f"{b} peak RSS": series(b, "peak_rss_mb") for b in ("onnxruntime", "torch")},
              RESULTS / "hiersumm_memory.png", "paragraphs (128 tokens)", "MB", "Hierarchical Transformer memory",
              log_x=True)
    line_plot({f"{b} step": series(b, "step_ms") for b in ("onnxruntime", "torch")},
              RESULTS / "hiersumm_step_vs_paragraphs.png", "paragraphs (128 tokens)", "ms per step (4 beams)",
              "Hierarchical Transformer step time", log_x=True)
    write_result("hiersumm_memory", {"rows": rows})
    assert all("skipped" not in r["onnxruntime"] for r in rows)


def test_step_time_at_40_paragraphs_onnxruntime_vs_torch(benchmark, quick):
    checkpoint, bundle = paper_hiersumm()
    ort = Summarizer.from_pretrained(bundle, threads=2, verify=False)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch", threads=2)
    count = 8 if quick else 40
    options = ort.options(top_paragraphs=count)
    units = ort.kind.pager(ort.tokenizer, ort.special, options.units)([paragraphs_text(ort, count)])[:count]
    assert len(units) == count
    batch = UnitBatch.from_units([units], ort.special.pad)
    generation = GenerationOptions(num_beams=4, max_length=17, min_length=17)
    ort_times, ref_times, same = interleaved_steps(benchmark, ort, ref, batch, generation, 1 if quick else 3)
    ort_ms, ref_ms = 1000 * np.median(ort_times), 1000 * np.median(ref_times)
    print(f"\nhiersumm, {count} paragraphs x {batch.input_ids.shape[1]} tokens, 4 beams, 2 threads: median step "
          f"onnxruntime {ort_ms:.1f} ms, torch {ref_ms:.1f} ms -> onnxruntime is {ref_ms / ort_ms:.2f}x faster; "
          f"identical tokens: {same}")
    write_result("hiersumm_step", {"paragraphs": count, "onnxruntime_median_ms": ort_ms, "torch_median_ms": ref_ms,
                                   "speedup": ref_ms / ort_ms, "identical_tokens": same})
    assert same
