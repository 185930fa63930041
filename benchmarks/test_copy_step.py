"""Decode step time with the copy distribution (`model.copy`) against without, for every kind, on ONNX Runtime.

Each kind at the shape of its shipped bundle (engines/<kind>: d_model 256, its layers and 8,192 tokens) with random
weights, exported twice, copy off and on, and decoding the same unit grid at the bundle's unit size (PageSum and
HierEncDec: 16 units of 512 tokens; DYLE: 25 snippets of 128; the Hierarchical Transformer: 24 paragraphs of 128),
4 beams, 32 steps, 2 threads. The two run interleaved after a warm-up; the figure is the ratio of median step
times. Target: copy within 1.3x of without.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import CACHE, current_bundle, export_bundle, interleaved_steps, plot, write_result
from locsum_sdk import Summarizer, kinds
from locsum_sdk.bundle import Bundle
from locsum_sdk.generation import GenerationOptions
from locsum_sdk.unit_batch import UnitBatch
from locsum_sdk.units import Unit

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = {"pagesum": "pagesum", "dyle": "dyle", "hierencdec": "hierencdec", "hiersumm": "hiersumm"}
GRID = {"pagesum": (16, 512), "dyle": (25, 128), "hierencdec": (16, 512), "hiersumm": (24, 128)}  # units, tokens
TARGET = 1.3


def shipped_shape_bundle(kind: str, copy: bool) -> Path:
    """A random model of `kind` at its shipped bundle's shape, copy on or off, exported once into the cache."""
    bundle = CACHE / f"copy-step-{kind}-{'copy' if copy else 'plain'}"
    if current_bundle(bundle):
        return bundle
    import torch

    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.registry import model_kind

    shipped = ROOT / "engines" / BUNDLES[kind]
    manifest = json.loads((shipped / "manifest.json").read_text())
    config = kinds.get(kind).config.from_dict({**manifest["model"], "copy": copy})
    torch.manual_seed(0)
    model = model_kind(kind).model(config)
    model.reset_parameters(0.02)
    tokenizer = Bundle.load(shipped).file("tokenizer.json")
    checkpoint = save_checkpoint(model.eval(), CACHE / f"{bundle.name}-checkpoint", tokenizer,
                                 units=manifest["units"], generation={"num_beams": 4, "max_length": 33})
    export_bundle(checkpoint, bundle)
    return bundle


def unit_grid(kind: str, vocab: int, pad: int) -> UnitBatch:
    units, tokens = GRID[kind]
    rng = np.random.default_rng(0)
    return UnitBatch.from_units([[Unit(0, 0, 0, "", (0, *rng.integers(5, vocab, tokens - 2).tolist(), 2))
                                  for _ in range(units)]], pad)


@pytest.mark.parametrize("kind", sorted(BUNDLES))
def test_copy_step_time_against_without(benchmark, kind, quick):
    rounds = 1 if quick else 3
    plain = Summarizer.from_pretrained(shipped_shape_bundle(kind, False), threads=2, verify=False)
    copying = Summarizer.from_pretrained(shipped_shape_bundle(kind, True), threads=2, verify=False)
    batch = unit_grid(kind, plain.backend.config["vocab_size"], plain.special.pad)
    options = GenerationOptions(num_beams=4, max_length=33, min_length=33)
    copy_times, plain_times, _ = interleaved_steps(benchmark, copying, plain, batch, options, rounds)
    copy_ms, plain_ms = 1000 * np.median(copy_times), 1000 * np.median(plain_times)
    ratio = copy_ms / plain_ms
    units, tokens = GRID[kind]
    print(f"\n{kind}: {units} units x {tokens} tokens, 4 beams, 2 threads: median step with copy {copy_ms:.1f} ms, "
          f"without {plain_ms:.1f} ms -> {ratio:.2f}x (target <= {TARGET}x)")
    info = {"kind": kind, "units": units, "unit_tokens": tokens, "beams": 4, "threads": 2, "rounds": rounds,
            "copy_median_ms": copy_ms, "plain_median_ms": plain_ms, "ratio": ratio, "target": TARGET}
    benchmark.extra_info.update(info)
    path = write_result(f"copy_step_{kind}", info)
    ratios = {json.loads(p.read_text())["kind"]: json.loads(p.read_text())["ratio"]
              for p in sorted(path.parent.glob("copy_step_*.json"))}
    with plot(path.parent / "copy_step.png", "step time with copy / without", "Copy distribution: decode step cost") \
            as axes:
        axes.bar(list(ratios), list(ratios.values()), label="median step, copy / without")
        axes.axhline(TARGET, color="red", linestyle="--", label=f"target {TARGET}x")
