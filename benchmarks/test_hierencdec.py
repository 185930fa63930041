"""HierEncDec's encoder memory against the number of documents (512 tokens each, one item, bart-base shape,
random weights, torch): the efficient form (documents as their own sequences, only <s> states exchanged) against
the dense-mask form (the documents concatenated under a (D*L)^2 mask, as the authors' code builds it). Each point in
a fresh process; dense points predicted over 16 GB are skipped, not run. Prints peak and working memory (peak minus
the loaded model), their ratio where both ran, whether the states agree, and writes a PNG.
Targets: at 32 documents the efficient form at most 1/4 of the dense form; 64 documents under 4 GB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, line_plot, write_result

FULL = [4, 8, 16, 32, 64]
QUICK = [4, 8]
LENGTH = 512
LIMIT_MB = 16 * 1024


def predicted_dense_mb(docs: int) -> float:
    """Scores, bias and probabilities of one layer over (D*L)^2 (12 heads, float32) on top of ~1.2 GB."""
    return 1200 + 3 * 12 * (docs * LENGTH) ** 2 * 4 / 2**20


def measure(form: str, docs: int) -> dict:
    if form == "dense" and predicted_dense_mb(docs) > LIMIT_MB:
        return {"skipped": f"predicted {predicted_dense_mb(docs) / 1024:.0f} GB"}
    child = Path(__file__).resolve().parent / "hierencdec_child.py"
    out = subprocess.run([sys.executable, str(child), "--form", form, "--docs", str(docs), "--length", str(LENGTH)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"skipped": f"failed with exit status {out.returncode} (-9: killed, out of memory)"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_encoder_memory_vs_documents(benchmark, quick):
    rows = []

    def run():
        for docs in QUICK if quick else FULL:
            rows.append({form: measure(form, docs) for form in ("efficient", "dense")} | {"docs": docs})

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\n{'docs':>5} {'tokens':>7} {'efficient MB':>13} {'dense MB':>10} {'working e/d':>12} {'same states':>12}")
    for row in rows:
        eff, dense = row["efficient"], row["dense"]
        if "skipped" in dense:
            cells = f"{'-':>10} {'-':>12} {'-':>12}  dense {dense['skipped']}"
        else:
            ratio = (eff["peak_rss_mb"] - eff["loaded_rss_mb"]) / (dense["peak_rss_mb"] - dense["loaded_rss_mb"])
            same = np.allclose(eff["digest"], dense["digest"], atol=1e-3)
            cells = f"{dense['peak_rss_mb']:>10.0f} {ratio:>12.3f} {str(same):>12}"
        print(f"{row['docs']:>5} {row['docs'] * LENGTH:>7} {eff.get('peak_rss_mb', float('nan')):>13.0f} {cells}")
    write_result("hierencdec_encoder_memory", {"length": LENGTH, "rows": rows})
    series = {form: [(r["docs"], r[form]["peak_rss_mb"]) for r in rows if "peak_rss_mb" in r[form]]
              for form in ("efficient", "dense")}
    line_plot(series, RESULTS / "hierencdec_encoder_memory.png", f"documents of {LENGTH} tokens", "peak RSS (MB)",
              "HierEncDec encoder memory: efficient vs dense mask", log_x=True)
