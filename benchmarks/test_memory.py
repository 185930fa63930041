"""Peak memory of `summarize()` against input length (bart-base-shaped random PageSum, greedy, 32 steps).

Each point runs in a fresh process and reports that process's peak RSS. The ONNX Runtime backend and the torch
reference backend run the same document; the table gives both, with linear and quadratic fits of the ONNX
Runtime curve from 8k tokens on. Target: the quadratic term explains under 5% of the memory at 64k tokens, and
64k tokens run in under 6 GB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, write_result

FULL = [2048, 4096, 8192, 16384, 32768, 65536]
QUICK = [2048, 4096, 8192]


def measure(path: Path, backend: str, tokens: int) -> dict:
    child = Path(__file__).resolve().parent / "memory_child.py"
    out = subprocess.run(
        [sys.executable, str(child), str(path), "--backend", backend, "--tokens", str(tokens)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def fits(tokens: np.ndarray, memory: np.ndarray) -> dict:
    linear = np.polyfit(tokens, memory, 1)
    quadratic = np.polyfit(tokens, memory, 2)
    top = tokens.max()
    share = quadratic[0] * top**2 / np.polyval(quadratic, top)
    return {"linear_mb_per_1k_tokens": linear[0] * 1000, "linear_intercept_mb": linear[1],
            "quadratic_coefficients": quadratic.tolist(), "quadratic_share_at_max": float(share)}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for backend in ("onnxruntime", "torch"):
        points = [(r["tokens"], r[backend]["peak_rss_mb"]) for r in rows if backend in r]
        ax.plot(*zip(*points), marker="o", label=backend)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("input tokens")
    ax.set_ylabel("peak RSS (MB)")
    ax.set_title("PageSum (bart-base shape), greedy, 32 steps")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def test_peak_memory_vs_length(benchmark, bart_base, quick):
    checkpoint, bundle = bart_base
    lengths = QUICK if quick else FULL

    def sweep():
        rows = []
        for tokens in lengths:
            row = {"target_tokens": tokens}
            for backend, path in (("onnxruntime", bundle), ("torch", checkpoint)):
                row[backend] = measure(path, backend, tokens)
            row["tokens"] = row["onnxruntime"]["tokens"]
            row["same_tokens"] = row["onnxruntime"].pop("token_ids") == row["torch"].pop("token_ids")
            rows.append(row)
        return rows

    rows = benchmark.pedantic(sweep, rounds=1, iterations=1)
    tokens = np.array([r["tokens"] for r in rows], dtype=float)
    ort_mb = np.array([r["onnxruntime"]["peak_rss_mb"] for r in rows])
    fitted = tokens >= 8000
    fit = fits(tokens[fitted], ort_mb[fitted]) if fitted.sum() >= 3 else None
    print("\n tokens  pages  ORT peak MB  torch peak MB  torch/ORT  same tokens")
    for r in rows:
        o, t = r["onnxruntime"], r["torch"]
        print(f"{r['tokens']:7d}  {o['pages']:5d}  {o['peak_rss_mb']:11.0f}  {t['peak_rss_mb']:13.0f}  "
              f"{t['peak_rss_mb'] / o['peak_rss_mb']:9.2f}  {r['same_tokens']}")
    if fit:
        print(f"ORT fit from 8k: {fit['linear_mb_per_1k_tokens']:.1f} MB per 1k tokens + "
              f"{fit['linear_intercept_mb']:.0f} MB; quadratic share at {int(tokens.max())} tokens: "
              f"{100 * fit['quadratic_share_at_max']:.1f}%")
    benchmark.extra_info.update({"rows": rows, "fit": fit, "threads": 2, "steps": 32, "beams": 1, "dtype": "float32"})
    write_result("memory_vs_length", {"rows": rows, "fit": fit, "threads": 2, "steps": 32, "beams": 1})
    plot(rows, RESULTS / "memory_vs_length.png")
    assert all(r["same_tokens"] for r in rows)
