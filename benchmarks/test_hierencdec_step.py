"""HierEncDec's decoding step: ONNX Runtime vs the torch reference backend on the same weights (bart-base shape,
random), 16 documents of 512 tokens, 4 beams, 2 threads each, interleaved after a warm-up on the same encoded
documents; tokens must be identical. Target: ONNX Runtime at least 1.5x faster.

Also prints the step as a multiple of its roofline bound (decoder weights and every document's cross keys/values
read once per step), measured on this machine in the same run."""

from __future__ import annotations

import numpy as np

from benchmarks.common import bart_base_hierencdec, interleaved_steps, text_of_tokens, write_result
from benchmarks.roofline import bandwidth_gbs, matmul_gflops, step_bound
from locsum_sdk import Summarizer
from locsum_sdk.generation import GenerationOptions
from locsum_sdk.unit_batch import UnitBatch
from locsum_sdk.units import as_documents


def documents_batch(summarizer, documents: int, tokens: int) -> UnitBatch:
    """One input of `documents` documents of at most `tokens` tokens each (one unit per document), paged by the
    kind's own pager."""
    texts = [text_of_tokens(summarizer.tokenizer, tokens - 40, seed=i) for i in range(documents)]
    options = summarizer.options(page_tokens=tokens).units
    units = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options)(as_documents(texts))
    assert len(units) == documents, f"{len(units)} units for {documents} documents: the filler ran over a unit"
    return UnitBatch.from_units([units], summarizer.special.pad)


def test_step_time_onnxruntime_vs_torch(benchmark, quick):
    checkpoint, bundle = bart_base_hierencdec()
    documents, rounds = (4, 1) if quick else (16, 3)
    ort = Summarizer.from_pretrained(bundle, threads=2, verify=False)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch", threads=2)
    batch = documents_batch(ort, documents, 512)
    options = GenerationOptions(num_beams=4, max_length=17, min_length=17)
    ort_times, ref_times, same = interleaved_steps(benchmark, ort, ref, batch, options, rounds)
    ort_ms, ref_ms = 1000 * np.median(ort_times), 1000 * np.median(ref_times)
    bandwidth, gflops = bandwidth_gbs(), matmul_gflops()
    weights = (bundle / "decoder.onnx").stat().st_size  # every weight of the step graph, read once per step
    bound = step_bound(ort.backend.config, weights, batch.width, batch.input_ids.shape[1], 4, 8, bandwidth, gflops,
                       rows=4)
    print(f"\nmachine: {bandwidth:.1f} GB/s read, {gflops:.0f} GFLOP/s float32 matmul (2 threads); step bound "
          f"{1000 * bound.seconds:.1f} ms ({bound.bytes / 1e6:.0f} MB, {bound.flops / 1e9:.2f} GFLOP): onnxruntime at "
          f"{ort_ms / (1000 * bound.seconds):.2f}x the bound, torch at {ref_ms / (1000 * bound.seconds):.2f}x")
    print(f"\nhierencdec, {batch.width} documents x {batch.input_ids.shape[1]} tokens, 4 beams, 2 threads: median step "
          f"onnxruntime {ort_ms:.1f} ms, torch {ref_ms:.1f} ms -> onnxruntime is {ref_ms / ort_ms:.2f}x faster; "
          f"identical tokens: {same}")
    info = {"documents": batch.width, "document_tokens": int(batch.input_ids.shape[1]), "beams": 4, "threads": 2,
            "rounds": rounds, "onnxruntime_median_ms": ort_ms, "torch_median_ms": ref_ms, "speedup": ref_ms / ort_ms,
            "identical_tokens": same, "bandwidth_gbs": bandwidth, "matmul_gflops": gflops,
            "bound_ms": 1000 * bound.seconds, "bound_mb": bound.bytes / 1e6}
    write_result("hierencdec_step_speed", info)
    assert same
