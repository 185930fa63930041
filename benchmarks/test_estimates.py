"""The memory estimate against the measured peak over a grid of input shapes, for every kind's shipped bundle:
documents from 1 to 5,000, document lengths from a few words to many pages, queries, beams and batches. Each point
runs in a fresh process (`locsum_sdk.memory_probe`): the peak resident set above the one before the call, the
runtime warmed up, beside the estimate the call was checked against. Prints every point with estimate / measured,
writes `benchmarks/results/estimates.json` and `estimates.png` (estimate against measured peak per kind, with the
lines estimate = peak and estimate = 2 x peak). Target: no point whose peak exceeds its estimate."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from benchmarks.common import RESULTS, plot, write_result
from locsum_sdk.memory_probe import Case, measure_case_in_fresh_process

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = {"pagesum": ROOT / "engines" / "pagesum", **{kind: ROOT / "engines" / kind
                                                         for kind in ("dyle", "hierencdec", "hiersumm")}}
# (documents of each input (count x words), query words, beams, max_length, unit_batch_size)
GRID = [
    ([(1, 12)], 0, 1, 8, 4),
    ([(1, 3000)], 8, 4, 40, 4),
    ([(1, 20000)], 0, 1, 16, 4),
    ([(1, 60000)], 0, 2, 16, 8),
    ([(8, 400)], 8, 4, 40, 4),
    ([(20, 50), (5, 30)], 0, 2, 16, 4),
    ([(300, 5)], 0, 1, 8, 4),
    ([(2000, 12)], 0, 1, 8, 4),
    ([(5000, 12)], 0, 1, 8, 4),
    ([(1000, 60)], 8, 2, 16, 8),
    ([(3, 3000), (3, 3000), (3, 3000), (3, 3000)], 8, 4, 40, 4),
]
QUICK = [GRID[i] for i in (0, 1, 5, 7)]


def cases(kind: str, grid) -> list[Case]:
    return [Case(bundle=str(BUNDLES[kind]), documents=[[words] * count for count, words in inputs],
                 query_words=query, num_beams=beams, max_length=length, unit_batch_size=size)
            for inputs, query, beams, length, size in grid]


def test_estimate_against_measured_peak(benchmark, quick):
    points: dict[str, list] = {kind: [] for kind in BUNDLES}

    def run():
        for kind in BUNDLES:
            for case in cases(kind, QUICK if quick else GRID):
                points[kind].append(measure_case_in_fresh_process(case, timeout=1200))

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\n{'kind':>10} {'input':>28} {'beams':>5} {'units':>12} {'peak MB':>9} {'estimate MB':>12} {'est/peak':>9}")
    for kind, measured in points.items():
        for m in measured:
            shape = " + ".join(f"{len(d)}x{d[0]}w" for d in m.case.documents)
            print(f"{kind:>10} {shape:>28} {m.case.num_beams:>5} {str(m.units):>12} {m.measured / 2**20:>9.1f} "
                  f"{m.estimate / 2**20:>12.1f} {m.ratio:>9.2f}")
    with plot(RESULTS / "estimates.png", "estimate (MB)", "memory estimate against measured peak") as ax:
        top = max(m.measured for measured in points.values() for m in measured) / 2**20
        ax.plot([0, top], [0, top], color="black", lw=0.8, label="estimate = peak")
        ax.plot([0, top], [0, 2 * top], color="grey", lw=0.8, ls="--", label="estimate = 2 x peak")
        for kind, measured in points.items():
            ax.scatter([m.measured / 2**20 for m in measured], [m.estimate / 2**20 for m in measured], label=kind)
        ax.set_xscale("symlog")
        ax.set_yscale("symlog")
        ax.set_xlabel("measured peak above the loaded model (MB)")
    over = [(kind, m.case.documents[0][:1], m.measured, m.estimate) for kind, measured in points.items()
            for m in measured if m.measured > m.estimate]
    write_result("estimates", {"points": {kind: [asdict(m) | {"ratio": m.ratio} for m in measured]
                                          for kind, measured in points.items()}, "over": len(over)})
    assert not over, f"peaks over their estimate: {over}"
