"""The default bundle's load (`Summarizer.from_pretrained()`, what every `locsum summarize` pays first) with ONNX
Runtime optimizing its graphs at every load, as before, against reading the optimized graphs kept in its cache
directory (`backends.optimized_graphs`), in one run: the two take turns, 3 rounds, 2 threads; and the first load,
which optimizes the graphs and writes them there. Prints the median seconds of each, their ratio, and whether the
two decode the same tokens on the example meeting's first pages.

Then the kept graphs with the weights as the kernels pre-pack them (`optimized_graphs.PREPACKED`) against without,
each load in a fresh process (`load_child.py`), in turns: the load's seconds and the process's private and
file-backed memory after the load and after a summary (private memory is what each of several processes on one
machine holds alone; file-backed pages are shared through the page cache); and two processes of each form loaded at
once, each's proportional set size (its private pages and its share of the pages it maps with the other)."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.common import write_result
from locsum_sdk import Summarizer
from locsum_sdk.backends import optimized_graphs
from locsum_sdk.errors import BundleNotFoundError

ROUNDS = 3
THREADS = 2
ROOT = Path(__file__).resolve().parents[1]
TEXT = "\n".join((ROOT / "examples" / "meeting.txt").read_text().splitlines()[:20])


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


def child(form: str, text_file: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.load_child", form, str(THREADS), str(text_file)],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def pair_pss(form: str, text_file: Path, hold: float = 5.0) -> list[float]:
    """Two processes of `form` loaded at once: each's proportional set size (smaps_rollup's Pss) in MiB, read while
    both hold their bundle."""
    command = [sys.executable, "-m", "benchmarks.load_child", form, "1", str(text_file), str(hold)]
    pair = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for _ in range(2)]
    try:
        for process in pair:
            process.stdout.readline()  # its summary written: loaded
        sizes = []
        for process in pair:
            rollup = Path(f"/proc/{process.pid}/smaps_rollup").read_text().splitlines()
            sizes.append(next(int(line.split()[1]) for line in rollup if line.startswith("Pss:")) / 1024)
    finally:
        for process in pair:
            process.communicate(timeout=60)
    return sizes


def test_kept_graphs_with_prepacked_weights(monkeypatch, tmp_path):
    try:
        Summarizer.from_pretrained(threads=THREADS)
    except BundleNotFoundError as error:
        pytest.skip(f"the default's base model is not installed: {error}")
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT, encoding="utf-8")
    forms = ("plain", "prepacked")
    for form in forms:  # each form's graphs written (the first load), not measured
        child(form, text_file)
    runs: dict[str, list[dict]] = {form: [] for form in forms}
    for index in range(ROUNDS):
        for form in forms if index % 2 == 0 else forms[::-1]:
            runs[form].append(child(form, text_file))

    figures = {form: {"load_s": statistics.median(run["load_s"] for run in runs[form]),
                      **{f"{when}_{kind}_mib": statistics.median(run[when][kind] for run in runs[form])
                         for when in ("after_load", "after_summary") for kind in ("RssAnon", "RssFile")}}
               for form in forms}
    same = len({tuple(run["tokens"]) for form in forms for run in runs[form]}) == 1
    plain, packed = figures["plain"], figures["prepacked"]
    print(f"\nkept graphs, plain / with prepacked weights (median of {ROUNDS} fresh processes each, in turns): load "
          f"{plain['load_s']:.2f} / {packed['load_s']:.2f} s ({plain['load_s'] / packed['load_s']:.2f}x faster); "
          f"private memory after the load {plain['after_load_RssAnon_mib']:.0f} / "
          f"{packed['after_load_RssAnon_mib']:.0f} MiB, after a summary {plain['after_summary_RssAnon_mib']:.0f} / "
          f"{packed['after_summary_RssAnon_mib']:.0f} MiB; file-backed after a summary "
          f"{plain['after_summary_RssFile_mib']:.0f} / {packed['after_summary_RssFile_mib']:.0f} MiB; "
          f"the same tokens: {same}")
    pss = {form: pair_pss(form, text_file) for form in forms}
    print(f"two processes loaded at once, each's proportional set size, plain / with prepacked weights: "
          f"{statistics.mean(pss['plain']):.0f} / {statistics.mean(pss['prepacked']):.0f} MiB")
    write_result("load_prepacked", {"threads": THREADS, "rounds": ROUNDS, "figures": figures, "pair_pss_mib": pss,
                                    "runs": {form: [{k: v for k, v in run.items() if k != "tokens"} for run in values]
                                             for form, values in runs.items()}, "same_tokens": same})
    assert same
