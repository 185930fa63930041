"""How many units an encoder run should take on the CPU: each shipped bundle encodes the same input in runs of 1, 2,
4 and 8 units, and as the ONNX Runtime backend chooses by itself (`units_per_run`: as many as fill `CPU_RUN_ROWS`
token rows, at most `unit_batch_size`), in turns, 2 threads.

Prints, per bundle, the median encoding time a unit at each run size and the backend's own choice against four
units a run (`unit_batch_size`'s default, which every run took before the backend bounded its rows).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks.common import write_result
from locsum_sdk import Summarizer
from locsum_sdk.backends import onnxruntime as ort_backend
from locsum_sdk.errors import BundleNotFoundError
from locsum_sdk.profiling import text_of_tokens

ENGINES = Path(__file__).resolve().parent.parent / "engines"
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
