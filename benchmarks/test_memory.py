"""Peak memory of summarizing against input length (bart-base shape, random weights, greedy, 32 steps).

Each point runs in a fresh process and reports that process's peak RSS. Systems: locsum PageSum on ONNX
Runtime and on the torch reference backend (same document, same tokens), HF LED (sliding-window attention)
and HF BART with full attention over the whole input (the quadratic baseline; points predicted to need more
than 16 GB are skipped, not run). Printed: the table, linear and quadratic fits of the ONNX Runtime curve from
8k tokens on, and each system's fitted exponents (log-log slopes) of peak RSS and of working memory (peak minus
the RSS with the model loaded, which is what grows with the input), from 8k tokens (from 2k for a system with
fewer than two points beyond 8k, like full attention). Targets: PageSum's quadratic term under 5% of
its memory at 64k and 64k under 6 GB; exponent at most 1.1 from 8k to 128k, the full-attention baseline near 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, line_plot, write_result
from locsum_sdk.profiling import measure_in_fresh_process

FULL = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
QUICK = [1024, 4096]  # keeps the quick suite within minutes; fits need the full sweep
SYSTEMS = ("onnxruntime", "torch", "led", "bart-full")
LIMIT_MB = 16 * 1024


def predicted_full_attention_mb(tokens: int) -> float:
    """Eager full attention keeps scores and probabilities (12 heads, float32) of one layer at a time."""
    return 1500 + 2 * 12 * tokens**2 * 4 / 2**20


def measure(path: Path, system: str, tokens: int) -> dict:
    """One point in a fresh process: locsum's own through `locsum_sdk.profiling`, HF baselines through memory_child."""
    if system in ("onnxruntime", "torch"):
        return asdict(measure_in_fresh_process(str(path), tokens, steps=32, backend=system, threads=2))
    child = Path(__file__).resolve().parent / "memory_child.py"
    out = subprocess.run(
        [sys.executable, str(child), "--system", system, "--tokens", str(tokens)], capture_output=True, text=True,
    )
    if out.returncode != 0:  # an HF baseline killed for memory is a result (it does not fit), not a crash of the sweep
        return {"skipped": f"failed with exit status {out.returncode} (-9: killed, out of memory)"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def fits(tokens: np.ndarray, memory: np.ndarray) -> dict:
    linear = np.polyfit(tokens, memory, 1)
    quadratic = np.polyfit(tokens, memory, 2)
    top = tokens.max()
    share = quadratic[0] * top**2 / np.polyval(quadratic, top)
    return {"linear_mb_per_1k_tokens": linear[0] * 1000, "linear_intercept_mb": linear[1],
            "quadratic_coefficients": quadratic.tolist(), "quadratic_share_at_max": float(share)}


def exponent(tokens: list[float], memory: list[float]) -> float | None:
    return float(np.polyfit(np.log(tokens), np.log(memory), 1)[0]) if len(tokens) >= 2 else None


def fitted_exponents(rows: list[dict], system: str) -> dict:
    """Log-log slopes of peak RSS and of working memory against length, from 8k tokens; a system measured at fewer
    than two lengths there (full attention, skipped beyond its limit) is fitted from 2k."""
    measured = [r for r in rows if "peak_rss_mb" in r[system]]
    start = 8192 if sum(r["target_tokens"] >= 8192 for r in measured) >= 2 else 2048
    used = [r for r in measured if r["target_tokens"] >= start]
    tokens = [r["target_tokens"] for r in used]
    peak = [r[system]["peak_rss_mb"] for r in used]
    working = [r[system]["peak_rss_mb"] - r[system]["loaded_rss_mb"] for r in used]
    rounded = {name: None if e is None else round(e, 3)
               for name, e in (("peak", exponent(tokens, peak)), ("working", exponent(tokens, working)))}
    return {**rounded, "from_tokens": start}


def test_peak_memory_vs_length(benchmark, bart_base, quick):
    checkpoint, bundle = bart_base
    lengths = QUICK if quick else FULL
    paths = {"onnxruntime": bundle, "torch": checkpoint, "led": bundle, "bart-full": bundle}

    def sweep():
        rows, failed = [], set()
        for tokens in lengths:
            row = {"target_tokens": tokens}
            for system in SYSTEMS:
                if system in failed:
                    row[system] = {"skipped": "failed at a shorter length"}
                    continue
                if system == "bart-full" and predicted_full_attention_mb(tokens) > LIMIT_MB:
                    row[system] = {"skipped": f"predicted {predicted_full_attention_mb(tokens):.0f} MB > 16 GB"}
                    continue
                row[system] = measure(paths[system], system, tokens)
                if "skipped" in row[system]:
                    failed.add(system)
            row["tokens"] = row["onnxruntime"]["tokens"]
            row["same_tokens"] = row["onnxruntime"].pop("token_ids") == row["torch"].pop("token_ids")
            for system in ("led", "bart-full"):
                row[system].pop("token_ids", None)
            rows.append(row)
        return rows

    rows = benchmark.pedantic(sweep, rounds=1, iterations=1)
    tokens = np.array([r["tokens"] for r in rows], dtype=float)
    ort_mb = np.array([r["onnxruntime"]["peak_rss_mb"] for r in rows])
    fitted = tokens >= 8000
    fit = fits(tokens[fitted], ort_mb[fitted]) if fitted.sum() >= 3 else None
    exponents = {system: fitted_exponents(rows, system) for system in SYSTEMS}
    print("\n tokens  pages" + "".join(f"  {s + ' MB':>15s}" for s in SYSTEMS) + "  same tokens")
    for r in rows:
        cells = "".join(f"  {r[s]['peak_rss_mb']:15.0f}" if "peak_rss_mb" in r[s] else f"  {'skipped':>15s}"
                        for s in SYSTEMS)
        print(f"{r['tokens']:7d}  {r['onnxruntime']['pages']:5d}{cells}  {r['same_tokens']}")
    for system, fitted in exponents.items():
        print(f"{system}: fitted exponent of peak RSS {fitted['peak']}, of working memory (peak minus the loaded "
              f"model) {fitted['working']}, from {fitted['from_tokens']} tokens")
    if fit:
        print(f"ORT fit from 8k: {fit['linear_mb_per_1k_tokens']:.1f} MB per 1k tokens + "
              f"{fit['linear_intercept_mb']:.0f} MB; quadratic share at {int(tokens.max())} tokens: "
              f"{100 * fit['quadratic_share_at_max']:.1f}%")
    settings = {"threads": 2, "steps": 32, "beams": 1, "dtype": "float32", "limit_mb": LIMIT_MB}
    benchmark.extra_info.update({"rows": rows, "fit": fit, "exponents": exponents, **settings})
    write_result("memory_vs_length", {"rows": rows, "fit": fit, "exponents": exponents, **settings})
    series = {s: [(r["target_tokens"], r[s]["peak_rss_mb"]) for r in rows if "peak_rss_mb" in r[s]] for s in SYSTEMS}
    line_plot(series, RESULTS / "memory_vs_length.png", "input tokens", "peak RSS (MB)",
              "bart-base shape, greedy, 32 steps (fresh process per point)", log=True)
    assert all(r["same_tokens"] for r in rows)
