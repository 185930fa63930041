"""Decoding time with `known_words` against without, for every shipped bundle, on ONNX Runtime.

Each shipped bundle (with its word list) summarizes the first QMSum val inputs twice in turn, the filter on and
off, with 4 beams and min_length = max_length = 65, so that both decode exactly 64 steps; the figure is the ratio
of the medians of the decoding time (`Summary.timings["decode"]`: the backend's steps and every logit filter).
The filter rebuilds each beam's current word and checks the best tokens against the input's and the bundle's
sorted words; its cost is Python per beam and step, the same at any input length once the lists are built (their
building is paging time, not decoding). Target: within 1.3x of decoding without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.common import alternated_decode, plot, write_result
from locsum_sdk import Summarizer
from locsum_sdk.evaluation import read_examples

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "qmsum" / "val.jsonl"
BUNDLES = ("pagesum", "dyle", "hierencdec", "hiersumm")
TARGET = 1.3


@pytest.mark.parametrize("name", BUNDLES)
def test_known_words_decode_time_against_without(benchmark, name, quick):
    if not DATA.is_file():
        pytest.skip(f"{DATA} is not here (../shared/data)")
    summarizer = Summarizer.from_pretrained(ROOT / "engines" / name, threads=2)
    examples = read_examples(DATA, 2 if quick else 4)
    options = dict(num_beams=4, min_length=65, max_length=65, truncate=True)
    on_s, off_s, changed = alternated_decode(benchmark, summarizer, examples, options,
                                             {"known_words": True}, {"known_words": False})
    ratio = on_s / off_s
    print(f"\n{name}: {len(examples)} QMSum val inputs, 64 steps of 4 beams, 2 threads: median decoding with "
          f"known_words {on_s:.2f} s, without {off_s:.2f} s -> {ratio:.2f}x (target <= {TARGET}x); "
          f"{changed} of {len(examples)} summaries changed")
    info = {"bundle": name, "inputs": len(examples), "steps": 64, "beams": 4, "threads": 2,
            "known_words_median_s": on_s, "without_median_s": off_s, "ratio": ratio, "changed": changed,
            "target": TARGET}
    benchmark.extra_info.update(info)
    path = write_result(f"known_words_{name}", info)
    ratios = {json.loads(p.read_text())["bundle"]: json.loads(p.read_text())["ratio"]
              for p in sorted(path.parent.glob("known_words_*.json"))}
    with plot(path.parent / "known_words.png", "decoding time, known_words / without",
              "Known words: decoding cost") as axes:
        axes.bar(list(ratios), list(ratios.values()), label="median decoding time, on / off")
        axes.axhline(TARGET, color="red", linestyle="--", label=f"target {TARGET}x")
