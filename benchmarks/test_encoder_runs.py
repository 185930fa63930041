"""How many units an encoder run should take on the CPU: each shipped bundle encodes the same input in runs of 1, 2,
4 and 8 units, and as the ONNX Runtime backend chooses by itself (`units_per_run`: as many as fill `CPU_RUN_ROWS`
token rows, at most `unit_batch_size`), in turns, 2 threads.

Prints, per bundle, the median encoding time a unit at each run size and the backend's own choice against four
units a run (`unit_batch_size`'s default, which every run took before the backend bounded its rows).

Then the default bundle at its defaults on Multi-News clusters (skipped without ../shared/data): its units encoded in
runs of like lengths, longest first, each padded to its own longest unit (`backends.base.length_runs`, what the
backend does on the CPU for units encoded alone), against runs in grid order padded to the batch's longest unit (the
backend before), in turns; prints the encoding time of each, their ratio, the units' share of padding in the second,
and how many summaries are the same token for token (the int8 encoder quantizes each run's activations with one
scale, so another grouping rounds them differently).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks.common import write_result
from locsum_sdk import Summarizer
from locsum_sdk.backends import onnxruntime as ort_backend
from locsum_sdk.errors import BundleNotFoundError
from locsum_sdk.profiling import text_of_tokens

ENGINES = Path(__file__).resolve().parent.parent / "engines"
MULTINEWS = Path(__file__).resolve().parents[2] / "shared" / "data" / "multinews" / "test.jsonl"
CLUSTERS = 30
BUNDLES = ("default", "pagesum", "hiersumm")
SIZES = (1, 2, 4, 8)
THREADS = 2
TOKENS = 8192


def encode_seconds(summarizer: Summarizer, text: str) -> tuple[float, int]:
    """One summary's encoding (its selection stage's runs included) and how many units it read."""
    summary = summarizer.summarize(text, max_tokens=TOKENS, truncate=False, max_length=2)
    return summary.timings["encode"] + summary.timings["select"], len(summary.units)


@pytest.mark.parametrize("name", BUNDLES)
def test_units_per_encoder_run(name, quick, monkeypatch):
    try:
        summarizers = {size: Summarizer.from_pretrained(ENGINES / name, threads=THREADS, unit_batch_size=size)
                       for size in SIZES}
        summarizers["auto"] = Summarizer.from_pretrained(ENGINES / name, threads=THREADS, unit_batch_size=max(SIZES))
    except BundleNotFoundError as error:
        pytest.skip(f"the {name} bundle's base model is not installed: {error}")
    text = text_of_tokens(summarizers[1].tokenizer, TOKENS // 2 if quick else TOKENS)
    rows = ort_backend.CPU_RUN_ROWS
    times: dict[object, list[float]] = {size: [] for size in summarizers}
    units = 0
    for turn in range(2 if quick else 5):
        order = list(summarizers) if turn % 2 == 0 else list(summarizers)[::-1]
        for size in order:
            # a fixed size runs as many units as it says; "auto" as the backend bounds them by rows
            monkeypatch.setattr(ort_backend, "CPU_RUN_ROWS", rows if size == "auto" else 1 << 30)
            seconds, units = encode_seconds(summarizers[size], text)
            times[size].append(seconds)
    per_unit = {str(size): statistics.median(values) / units * 1e3 for size, values in times.items()}
    speedup = per_unit["4"] / per_unit["auto"]
    print(f"\n{name}, {units} units: ms a unit " + ", ".join(
        f"{size} a run {ms:.1f}" for size, ms in per_unit.items() if size != "auto")
          + f"; the backend's choice {per_unit['auto']:.1f} ({speedup:.2f}x four a run)")
    write_result(f"encoder_runs_{name}", {"threads": THREADS, "units": units, "cpu_run_rows": rows,
                                          "ms_a_unit": per_unit, "speedup_over_four": speedup})
    assert all(ms > 0 for ms in per_unit.values())


def test_runs_of_like_lengths(quick, monkeypatch):
    if not MULTINEWS.is_file():
        pytest.skip(f"{MULTINEWS} (the shared data) is not here")
    try:
        summarizer = Summarizer.from_pretrained(threads=THREADS)
    except BundleNotFoundError as error:
        pytest.skip(f"the default's base model is not installed: {error}")
    layout = type(summarizer.kind.layout)
    clusters = [json.loads(line)["documents"] for line in MULTINEWS.read_text(encoding="utf-8").splitlines()]
    clusters = clusters[: 10 if quick else CLUSTERS]
    forms = ("grid order", "like lengths")
    seconds: dict[str, list[float]] = {form: [] for form in forms}
    tokens: dict[str, list[list[int]]] = {}
    padding = []
    for turn in range(2 if quick else 3):
        for form in forms if turn % 2 == 0 else forms[::-1]:
            with monkeypatch.context() as patch:
                if form == "grid order":  # the backend's runs for units not encoded alone: the grid's rows in turn
                    patch.setattr(layout, "units_alone", False)
                summaries = [summarizer.summarize(documents, max_length=16) for documents in clusters]
            seconds[form].append(sum(summary.timings["encode"] for summary in summaries))
            tokens[form] = [summary.token_ids for summary in summaries]
            if not padding:
                for summary in summaries:
                    lengths = [len(unit.token_ids) for unit in summary.units]
                    padding.append(1 - sum(lengths) / (len(lengths) * max(lengths)))
    medians = {form: statistics.median(values) for form, values in seconds.items()}
    ratio = medians["grid order"] / medians["like lengths"]
    same = sum(a == b for a, b in zip(tokens["grid order"], tokens["like lengths"]))
    print(f"\ndefault, {len(clusters)} Multi-News clusters at its defaults: encoding {medians['grid order']:.2f} s in "
          f"grid order, {medians['like lengths']:.2f} s in runs of like lengths ({ratio:.2f}x faster); the units' "
          f"padding in grid order {statistics.mean(padding):.0%}; the same tokens in {same} of {len(clusters)}")
    write_result("encoder_length_runs", {"threads": THREADS, "clusters": len(clusters), "seconds": seconds,
                                         "ratio": ratio, "padding": statistics.mean(padding), "same_tokens": same})
    assert ratio > 0
