"""Trainer throughput of every kind's base config, by precision: tokens/s (real source and target tokens, as the
trainer logs them) and peak memory, each point in a process of its own (`benchmarks/training_child.py`).

- On a GPU: pretrain-base's bart-base shape, each base config's batch and units, float32 (TF32 matmuls), bf16 and
  fp16 autocast (fp16 with its loss scaler), 20 steps; peak CUDA memory allocated.
- On the CPU, or with --quick: d_model 256, 2 + 2 layers, 4 units, one micro-batch, float32 and bf16, 4 steps;
  the process's peak resident set.

The median tokens/s of the steps after the first, and each precision's ratio to float32 in the same run.
Reads the first 64 QMSum train examples (skipped without ../shared/data). Table and plot:
benchmarks/results/training_speed.{json,png}.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import RESULTS, bar_plot, write_result

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT.parent / "shared" / "data" / "qmsum" / "train.jsonl"
WORK = Path("~/.cache/locsum/bench/training").expanduser()  # its tokenizer and random starts are reused
KINDS = ("pagesum", "hierencdec", "dyle", "hiersumm")


def point(kind: str, precision: str, steps: int, small: bool) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.training_child", kind, precision, str(steps), str(WORK),
                           *(["--quick"] if small else [])], capture_output=True, text=True, cwd=ROOT, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not TRAIN.is_file(), reason=f"{TRAIN} (the shared data) is not here")
def test_trainer_throughput_by_kind_and_precision(quick):
    cuda = torch.cuda.is_available()
    small = quick or not cuda
    precisions = ("fp32", "bf16", "fp16") if cuda else ("fp32", "bf16")
    steps = 4 if small else 20
    rows = {kind: {precision: point(kind, precision, steps, small) for precision in precisions} for kind in KINDS}
    device = rows[KINDS[0]][precisions[0]]["device"]
    size = "d_model 256, 2 + 2 layers, 4 units" if small else "bart-base shape, base configs"
    print(f"\ntrainer throughput on {device} ({size}), tokens/s and peak memory:")
    for kind, points in rows.items():
        base = points[precisions[0]]["tokens_per_s"]
        cells = ", ".join(f"{p} {v['tokens_per_s']:,.0f} = {v['tokens_per_s'] / base:.2f}x "
                          f"({v['peak_bytes'] / 2**20:,.0f} MB)" for p, v in points.items())
        print(f"  {kind:<11} {points[precisions[0]]['parameters'] / 1e6:6.1f}M parameters: {cells}")
    write_result("training_speed", {"device": device, "size": size, "steps": steps, "points": rows})
    bar_plot({kind: {p: v["tokens_per_s"] for p, v in points.items()} for kind, points in rows.items()},
             RESULTS / "training_speed.png", "tokens/s", f"Trainer throughput, {device} ({size})")
    assert all(v["tokens_per_s"] > 0 and v["peak_bytes"] > 0 and v["steps"] == steps
               for points in rows.values() for v in points.values())
