"""DYLE (bart-base-shaped generator and extractor, random weights):

- memory and time against input length, 1k to 128k tokens, K = 25 fixed (each point in a fresh process: peak RSS,
  extractor + encoder time, time per step); the extractor reads every chunk, run by run, so only its pass grows
  with the input. Target: under 4 GB at 128k tokens.
- the decoding step against K (5 to 50): ONNX Runtime vs the torch reference, 4 beams, interleaved after a warm-up,
  identical tokens. Target: ONNX Runtime at least 1.5x faster at K = 25.
Plots in benchmarks/results/."""

from __future__ import annotations

import numpy as np

from benchmarks.common import RESULTS, bart_base_dyle, interleaved_steps, line_plot, text_of_tokens, write_result
from locsum_sdk import Summarizer
from locsum_sdk.generation import GenerationOptions
from locsum_sdk.profiling import measure_in_fresh_process
from locsum_sdk.unit_batch import UnitBatch

LENGTHS, QUICK_LENGTHS = [1024, 4096, 16384, 65536, 131072], [1024, 4096]
KS, QUICK_KS = [5, 10, 25, 50], [5, 25]


def test_memory_and_time_vs_input_length(benchmark, quick):
    _, bundle = bart_base_dyle()
    points = []

    def run():
        for tokens in QUICK_LENGTHS if quick else LENGTHS:
            points.append(measure_in_fresh_process(str(bundle), tokens, steps=8, threads=2))

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\n{'tokens':>8} {'snippets kept':>14} {'peak MB':>8} {'working MB':>11} {'extractor s':>12} "
          f"{'encode s':>9} {'step ms':>8}")
    for p in points:
        print(f"{p.target_tokens:>8} {p.pages:>14} {p.peak_rss_mb:>8.0f} {p.peak_rss_mb - p.loaded_rss_mb:>11.0f} "
              f"{p.select_seconds:>12.2f} {p.encode_seconds:>9.2f} {p.step_ms:>8.1f}")
    first, last = points[1] if len(points) > 1 else points[0], points[-1]
    growth = (last.peak_rss_mb - first.peak_rss_mb) / max(1, last.target_tokens - first.target_tokens) * 1024
    print(f"peak memory from {first.target_tokens} to {last.target_tokens} tokens: +{growth:.2f} MB per 1k tokens; "
          f"at {last.target_tokens}: {last.peak_rss_mb / 1024:.2f} GB (target: under 4 GB at 131072)")
    line_plot({"peak RSS (MB)": [(p.target_tokens, p.peak_rss_mb) for p in points],
               "working (MB)": [(p.target_tokens, p.peak_rss_mb - p.loaded_rss_mb) for p in points]},
              RESULTS / "dyle_memory.png", "input tokens", "MB", "DYLE memory vs input length (K = 25)", log_x=True)
    line_plot({"extractor (s)": [(p.target_tokens, p.select_seconds) for p in points],
               "encoder (s)": [(p.target_tokens, p.encode_seconds) for p in points]},
              RESULTS / "dyle_time.png", "input tokens", "seconds", "DYLE extractor and encoder time", log_x=True)
    write_result("dyle_memory", {"points": [vars(p) for p in points], "mb_per_1k_tokens": growth})
    assert all(p.pages == 25 for p in points if p.target_tokens >= 4096)


def snippet_batch(summarizer, k: int, tokens: int = 64) -> UnitBatch:
    """One input of `k` snippets of about `tokens` tokens each, made by the kind's own pager."""
    text = "\n".join(text_of_tokens(summarizer.tokenizer, tokens - 8, seed=i).replace("\n", " ") for i in range(k))
    options = summarizer.options(snippet_tokens=tokens, policy="turn").units  # a line each
    units = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options)([text])[:k]
    assert len(units) == k
    return UnitBatch.from_units([units], summarizer.special.pad)


def test_step_time_vs_k_onnxruntime_vs_torch(benchmark, quick):
    checkpoint, bundle = bart_base_dyle()
    ort = Summarizer.from_pretrained(bundle, threads=2, verify=False)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch", threads=2)
    options = GenerationOptions(num_beams=4, max_length=9 if quick else 17, min_length=9 if quick else 17)
    rows = []
    for k in QUICK_KS if quick else KS:
        batch = snippet_batch(ort, k)
        ort_times, ref_times, same = interleaved_steps(benchmark if not rows else _Once(), ort, ref, batch, options,
                                                       1 if quick else 2)
        rows.append({"k": k, "onnxruntime_ms": 1000 * float(np.median(ort_times)),
                     "torch_ms": 1000 * float(np.median(ref_times)), "identical_tokens": same})
    print(f"\n{'K':>4} {'onnxruntime ms':>15} {'torch ms':>9} {'speedup':>8} {'same tokens':>12}")
    for r in rows:
        r["speedup"] = r["torch_ms"] / r["onnxruntime_ms"]
        print(f"{r['k']:>4} {r['onnxruntime_ms']:>15.1f} {r['torch_ms']:>9.1f} {r['speedup']:>7.2f}x "
              f"{str(r['identical_tokens']):>12}")
    line_plot({"onnxruntime": [(r["k"], r["onnxruntime_ms"]) for r in rows],
               "torch": [(r["k"], r["torch_ms"]) for r in rows]},
              RESULTS / "dyle_step.png", "snippets K", "median step (ms)", "DYLE step vs K (4 beams, 2 threads)")
    write_result("dyle_step", {"rows": rows, "beams": 4, "threads": 2})
    assert all(r["identical_tokens"] for r in rows)


class _Once:
    """pytest-benchmark times one call per test: later K values run through this stand-in."""

    @staticmethod
    def pedantic(run, rounds, iterations):
        run()
