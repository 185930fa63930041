"""Decoding time with `keywords` against without, for every shipped bundle, on ONNX Runtime.

Each shipped bundle, copied with the common words of its training inputs (`locsum_sdk.keywords.common_words` over
the train splits of QMSum, SQuALITY and FewSum), summarizes the first QMSum val inputs twice in turn, keywords=10
and off, with 4 beams and min_length = max_length = the bundle's own max_length, so that both decode its longest
summary, every step; the figure is the ratio of the medians of the decoding time (`Summary.timings["decode"]`: the
backend's steps and every logit filter). With keywords every step reads each beam's full distribution and takes in
the word its new token finished (`words.BeamWords`: Python per beam and step, growing neither with the summary's
length nor with the input's); finding an input's keywords is paging time, not decoding.
Target: within 1.3x of decoding without them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.common import CACHE, alternated_decode, plot, write_result
from locsum_sdk import Summarizer
from locsum_sdk.evaluation import read_examples
from locsum_sdk.exporters.defaults import set_defaults
from locsum_sdk.keywords import common_words

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BUNDLES = ("pagesum", "dyle", "hierencdec", "hiersumm")
TRAIN = ("qmsum", "squality", "fewsum")
TARGET = 1.3


@pytest.fixture(scope="module")
def common_file() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    inputs = ("\n".join(ex.documents) for name in TRAIN for ex in read_examples(DATA / name / "train.jsonl"))
    return common_words(inputs).write(CACHE / "common_words.txt")


@pytest.mark.parametrize("name", BUNDLES)
def test_keywords_decode_time_against_without(benchmark, name, quick, request):
    if not (DATA / "qmsum" / "val.jsonl").is_file():
        pytest.skip(f"{DATA} is not here (../shared/data)")
    bundle = set_defaults(ROOT / "engines" / name, CACHE / f"keywords-{name}", {}, force=True,
                          common_words=request.getfixturevalue("common_file"))
    summarizer = Summarizer.from_pretrained(bundle.path, threads=2)
    examples = read_examples(DATA / "qmsum" / "val.jsonl", 2 if quick else 4)
    length = summarizer.generation.max_length  # the start token and one piece a step
    steps = length - 1
    options = dict(num_beams=4, min_length=length, max_length=length, truncate=True)
    on_s, off_s, changed = alternated_decode(benchmark, summarizer, examples, options,
                                             {"keywords": 10}, {"keywords": 0})
    ratio = on_s / off_s
    print(f"\n{name}: {len(examples)} QMSum val inputs, {steps} steps of 4 beams, 2 threads: median decoding with "
          f"keywords=10 {on_s:.2f} s, without {off_s:.2f} s -> {ratio:.2f}x (target <= {TARGET}x); "
          f"{changed} of {len(examples)} summaries changed")
    info = {"bundle": name, "inputs": len(examples), "steps": steps, "beams": 4, "threads": 2, "keywords": 10,
            "keywords_median_s": on_s, "without_median_s": off_s, "ratio": ratio, "changed": changed,
            "target": TARGET}
    benchmark.extra_info.update(info)
    path = write_result(f"keywords_{name}", info)
    ratios = {json.loads(p.read_text())["bundle"]: json.loads(p.read_text())["ratio"]
              for p in sorted(path.parent.glob("keywords_*.json"))}
    with plot(path.parent / "keywords.png", "decoding time, keywords / without", "Keywords: decoding cost") as axes:
        axes.bar(list(ratios), list(ratios.values()), label="median decoding time, on / off")
        axes.axhline(TARGET, color="red", linestyle="--", label=f"target {TARGET}x")
    assert changed > 0, "keywords changed no summary: the bonus was not applied"
