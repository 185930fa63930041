"""The default's decoding step as the fused graph (`modeling.fused_llama`) against the shipped int8 graph, on the
same pages, in one run: greedy, exactly 96 new tokens, 2 threads, the two bundles taking turns.

Prints, per input, the decoder graph's median ms a run and the whole step's ms a token (search and decoding
options included) for each, their ratio, and how many of the 96 tokens the two choose alike before they first
differ (the fused graph runs the GGUF's 4-bit blocks as the file holds them, the shipped one its base re-quantized
to int8 per tensor, so they are not the same model to the last bit).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from benchmarks.common import write_result
from benchmarks.fused_default import fused_default
from benchmarks.test_peers import LOCSUM_OPTIONS, NEW, THREADS, agreement, inputs
from locsum_sdk import Summarizer
from locsum_sdk.backends import onnxruntime as ort_backend
from locsum_sdk.errors import BundleNotFoundError

ROUNDS = 2


def test_fused_step_against_the_shipped_step(quick, monkeypatch):
    try:
        fused_bundle, from_file = fused_default()
    except BundleNotFoundError as error:
        pytest.skip(f"the default's base model is not installed: {error}")
    runs: list[float] = []
    run = ort_backend._run

    def timed(session, binding, graph: str) -> None:
        start = time.perf_counter()
        run(session, binding, graph)
        if graph == "decoder":
            runs.append(time.perf_counter() - start)

    monkeypatch.setattr(ort_backend, "_run", timed)
    systems = {"shipped": Summarizer.from_pretrained(threads=THREADS),
               "fused": Summarizer.from_pretrained(fused_bundle, threads=THREADS, verify=False)}
    points = []
    for name, text, options in inputs(quick):
        graph_ms = {key: [] for key in systems}
        token_ms = {key: [] for key in systems}
        tokens = {}
        for _ in range(ROUNDS):
            for key, summarizer in systems.items():
                runs.clear()
                summary = summarizer.summarize(text, **{**options, **LOCSUM_OPTIONS})
                graph_ms[key].append(1000 * float(np.median(runs)))
                token_ms[key].append(1000 * summary.timings["decode"] / len(runs))
                tokens[key] = summary.token_ids
        same = agreement(tokens["shipped"], tokens["fused"])
        point = {"input": name, "new_tokens": NEW, "tokens_alike_before_first_difference": same,
                 **{f"{key}_graph_ms": float(np.median(v)) for key, v in graph_ms.items()},
                 **{f"{key}_step_ms": float(np.median(v)) for key, v in token_ms.items()}}
        point["graph_speedup"] = point["shipped_graph_ms"] / point["fused_graph_ms"]
        point["step_speedup"] = point["shipped_step_ms"] / point["fused_step_ms"]
        points.append(point)
        print(f"\n{name}: decoder graph shipped {point['shipped_graph_ms']:.1f} ms, fused "
              f"{point['fused_graph_ms']:.1f} ms a run ({point['graph_speedup']:.2f}x); whole step "
              f"{point['shipped_step_ms']:.1f} vs {point['fused_step_ms']:.1f} ms a token "
              f"({point['step_speedup']:.2f}x); {same} tokens alike before the first difference")
    write_result("fused_step", {"threads": THREADS, "block_recipes": from_file, "points": points})
    assert all(p["fused_graph_ms"] > 0 for p in points)
