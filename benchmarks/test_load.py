"""The default bundle's load (`Summarizer.from_pretrained()`, what every `locsum summarize` pays first) with ONNX
Runtime optimizing its graphs at every load, as before, against reading the optimized graphs kept in its cache
directory (`backends.optimized_graphs`), in one run: the two take turns, 3 rounds, 2 threads; and the first load,
which optimizes the graphs and writes them there. Prints the median seconds of each, their ratio, and whether the
two decode the same tokens on the example meeting's first pages."""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import pytest

from benchmarks.common import write_result
from locsum_sdk import Summarizer
from locsum_sdk.backends import optimized_graphs
from locsum_sdk.errors import BundleNotFoundError

ROUNDS = 3
THREADS = 2
TEXT = "\n".join((Path(__file__).resolve().parents[1] / "examples" / "meeting.txt").read_text().splitlines()[:20])


def load(kept: bool, monkeypatch) -> tuple[float, Summarizer]:
    with monkeypatch.context() as patch:
        if not kept:
            patch.setattr(optimized_graphs, "directory", lambda *args: None)
        start = time.perf_counter()
        summarizer = Summarizer.from_pretrained(threads=THREADS)
        return time.perf_counter() - start, summarizer


def test_load_with_kept_optimized_graphs(monkeypatch):
    try:
        seconds, summarizer = load(False, monkeypatch)
    except BundleNotFoundError as error:
        pytest.skip(f"the default's base model is not installed: {error}")
    shutil.rmtree(summarizer.backend.bundle.graph_path / optimized_graphs.GRAPHS_DIR, ignore_errors=True)
    first, _ = load(True, monkeypatch)
    times: dict[str, list[float]] = {"optimized at load": [], "kept": []}
    tokens = {}
    for _ in range(ROUNDS):
        for name, kept in (("optimized at load", False), ("kept", True)):
            seconds, summarizer = load(kept, monkeypatch)
            times[name].append(seconds)
            tokens[name] = summarizer.summarize(TEXT, num_beams=1, max_length=32).token_ids
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["optimized at load"] / medians["kept"]
    same = tokens["optimized at load"] == tokens["kept"]
    print(f"\ndefault bundle load: optimized at every load {medians['optimized at load']:.2f} s, from the kept "
          f"graphs {medians['kept']:.2f} s ({ratio:.2f}x faster); the first load, writing them, {first:.2f} s; "
          f"the same tokens: {same}")
    write_result("load", {"threads": THREADS, "rounds": ROUNDS, "seconds": times, "first_load": first,
                          "ratio": ratio, "same_tokens": same})
    assert same
