"""Time per decoding step: ONNX Runtime vs the torch reference backend on the same weights.

bart-base-shaped random PageSum, 8 pages of 1024 tokens, 4 beams, 2 threads each. The two backends run
interleaved, after a warm-up, on the same encoded document; tokens must be identical. Target: ORT >= 2x.
Also prints the step as a multiple of its roofline bound, measured on this machine in the same run.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import interleaved_steps, page_batch, write_result
from benchmarks.roofline import bandwidth_gbs, matmul_gflops, step_bound
from locsum_sdk import Summarizer
from locsum_sdk.generation import GenerationOptions


def test_step_time_onnxruntime_vs_torch(benchmark, bart_base, quick):
    checkpoint, bundle = bart_base
    pages, rounds = (4, 1) if quick else (8, 3)
    ort = Summarizer.from_pretrained(bundle, threads=2, verify=False)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch", threads=2)
    batch = page_batch(ort, pages)
    options = GenerationOptions(num_beams=4, max_length=17, min_length=17)
    ort_times, ref_times, same = interleaved_steps(benchmark, ort, ref, batch, options, rounds)
    ort_ms, ref_ms = 1000 * np.median(ort_times), 1000 * np.median(ref_times)
    ratio = ref_ms / ort_ms
    bandwidth, gflops = bandwidth_gbs(), matmul_gflops()
    weights = (bundle / "decoder.onnx").stat().st_size  # every weight of the step graph, read once per step
    bound = step_bound(ort.backend.config, weights, batch.width, batch.input_ids.shape[1], 4, 8, bandwidth, gflops)
    print(f"\nmachine: {bandwidth:.1f} GB/s read, {gflops:.0f} GFLOP/s float32 matmul (2 threads); step bound "
          f"{1000 * bound.seconds:.1f} ms ({bound.bytes / 1e6:.0f} MB, {bound.flops / 1e9:.2f} GFLOP): onnxruntime at "
          f"{ort_ms / (1000 * bound.seconds):.2f}x the bound, torch at {ref_ms / (1000 * bound.seconds):.2f}x; "
          "reading and "
          f"computing never overlapped would take {1000 * bound.serial_seconds:.1f} ms (onnxruntime at "
          f"{ort_ms / (1000 * bound.serial_seconds):.2f}x that)")
    print(f"\n{batch.width} pages x {batch.input_ids.shape[1]} tokens, 4 beams, 2 threads: median step "
          f"onnxruntime {ort_ms:.1f} ms, torch {ref_ms:.1f} ms -> onnxruntime is {ratio:.2f}x faster; "
          f"identical tokens: {same}")
    info = {"pages": batch.width, "page_tokens": int(batch.input_ids.shape[1]), "beams": 4, "threads": 2,
            "dtype": "float32", "steps_per_round": 16, "rounds": rounds, "onnxruntime_median_ms": ort_ms,
            "torch_median_ms": ref_ms,
            "speedup": ratio, "identical_tokens": same, "bandwidth_gbs": bandwidth, "matmul_gflops": gflops,
            "bound_ms": 1000 * bound.seconds, "serial_bound_ms": 1000 * bound.serial_seconds}
    benchmark.extra_info.update(info)
    write_result("step_speed", info)
    assert same
