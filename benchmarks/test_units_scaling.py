"""Per-step cost against the number of units: PageSum (bart-base shape) with 1 to 32 pages of 1024 tokens,
4 beams, ONNX Runtime and the torch reference alternated (two rounds in full mode) on the same pages. Prints
median step time, the marginal cost of one more page and the ORT/torch ratio; writes a PNG of step time vs
pages."""

from __future__ import annotations

import numpy as np

from benchmarks.common import RESULTS, decode, line_plot, page_batch, write_result
from locsum_sdk import Summarizer
from locsum_sdk.generation import GenerationOptions

FULL = [1, 2, 4, 8, 16, 32]
QUICK = [1, 4]


def test_step_cost_vs_units(benchmark, bart_base, quick):
    checkpoint, bundle = bart_base
    ort = Summarizer.from_pretrained(bundle, threads=2, verify=False)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch", threads=2)
    options = GenerationOptions(num_beams=4, max_length=9, min_length=9)
    rounds = 1 if quick else 2
    rows = []

    def run():
        for pages in QUICK if quick else FULL:
            batch = page_batch(ort, pages)
            decode(ort, batch, GenerationOptions(num_beams=4, max_length=2))  # warm-up
            decode(ref, batch, GenerationOptions(num_beams=4, max_length=2))
            a_times, b_times, same = [], [], True
            for _ in range(rounds):  # alternated, so a slow spell of the machine hits both backends
                a_tokens, times = decode(ort, batch, options)
                a_times += times
                b_tokens, times = decode(ref, batch, options)
                b_times += times
                same &= a_tokens == b_tokens
            rows.append({"pages": batch.width, "onnxruntime_ms": 1000 * float(np.median(a_times)),
                         "torch_ms": 1000 * float(np.median(b_times)), "identical_tokens": same})

    benchmark.pedantic(run, rounds=1, iterations=1)
    pages = np.array([r["pages"] for r in rows], dtype=float)
    slopes = {b: float(np.polyfit(pages, [r[f"{b}_ms"] for r in rows], 1)[0]) for b in ("onnxruntime", "torch")}
    print("\npages  ORT step ms  torch step ms  torch/ORT  identical")
    for r in rows:
        print(f"{r['pages']:5d}  {r['onnxruntime_ms']:11.1f}  {r['torch_ms']:13.1f}  "
              f"{r['torch_ms'] / r['onnxruntime_ms']:9.2f}  {r['identical_tokens']}")
    print(f"marginal cost of one more page: onnxruntime {slopes['onnxruntime']:.1f} ms, torch {slopes['torch']:.1f} ms")
    info = {"rows": rows, "ms_per_page": slopes, "beams": 4, "threads": 2, "page_tokens": 1024,
            "dtype": "float32", "rounds": rounds}
    benchmark.extra_info.update(info)
    write_result("units_scaling", info)
    series = {b: [(r["pages"], r[f"{b}_ms"]) for r in rows] for b in ("onnxruntime", "torch")}
    line_plot(series, RESULTS / "units_scaling.png", "pages (1024 tokens each)", "median decoding step (ms), 4 beams")
    assert all(r["identical_tokens"] for r in rows)
