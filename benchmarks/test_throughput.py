"""Throughput against batch size: documents/s and peak memory of `summarize_batch` at batch sizes 1, 2, 4, 8 and 16,
for every shipped bundle, on the first 16 test inputs of a data set of its kind (greedy, 32 tokens each, every step
taken), each point in a fresh process; a float32 bundle's summaries must be identical at every batch size (an int8
bundle's activation scales span the batch, so its summaries are counted, not required, equal). Table in
benchmarks/results/throughput.json, plot in throughput.png. Target: PageSum at batch 8 at least 2x batch 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import RESULTS, line_plot, write_result

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BUNDLES = {"pagesum": ("pagesum", "multinews"), "hierencdec": ("hierencdec", "multinews"),
           "dyle": ("dyle", "qmsum"), "hiersumm": ("hiersumm", "multinews")}
SIZES = (1, 2, 4, 8, 16)


def point(bundle: str, data: Path, batch_size: int, inputs: int, max_length: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.throughput_child", str(ROOT / "engines" / bundle),
                           str(data), str(batch_size), str(inputs), str(max_length)], capture_output=True, text=True,
                          cwd=ROOT, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", list(BUNDLES))
def test_throughput_against_batch_size(kind, quick):
    bundle, dataset = BUNDLES[kind]
    data = DATA / dataset / "test.jsonl"
    if not data.is_file():
        pytest.skip(f"{data} is not here (../shared/data)")
    inputs, sizes = (8, (1, 8)) if quick else (16, SIZES)
    points = {size: point(bundle, data, size, inputs, 32) for size in sizes}
    base = points[1]["documents_per_second"]
    for size, measured in points.items():
        print(f"\n{kind} batch {size:>2}: {measured['documents_per_second']:.2f} documents/s "
              f"({measured['documents_per_second'] / base:.2f}x batch 1), peak {measured['peak_bytes'] / 2**20:.0f} MB")
    agree = {size: sum(a == b for a, b in zip(p["tokens"], points[1]["tokens"])) for size, p in points.items()}
    same = all(count == inputs for count in agree.values())
    dtype = json.loads((ROOT / "engines" / bundle / "manifest.json").read_text())["dtype"]
    print(f"\n{kind} ({dtype}): summaries equal to batch 1's at each size: {agree}")
    table = {str(size): {"documents_per_second": p["documents_per_second"], "speedup": p["documents_per_second"] / base,
                         "peak_mb": p["peak_bytes"] / 2**20} for size, p in points.items()}
    path = RESULTS / "throughput.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    results = {name: saved[name] for name in BUNDLES if name in saved}  # the other kinds' last points
    results[kind] = {"bundle": bundle, "dtype": dtype, "data": dataset, "inputs": inputs, "identical_outputs": same,
                     "equal_to_batch_1": agree, "points": table}
    write_result("throughput", results)
    line_plot({k: [(int(s), v["documents_per_second"]) for s, v in r["points"].items()] for k, r in results.items()},
              RESULTS / "throughput.png", "batch size", "documents/s", "throughput against batch size", log_x=True)
    # int8 bundles quantize activations per run, with one scale over the whole batch: another batch moves the
    # rounding, so only float32 bundles are held to identical summaries
    assert same or dtype == "int8"
