"""The default's decoding step as the fused graph (`modeling.fused_llama`) against its int8 graph, on the same
pages, in one run: greedy, exactly 96 new tokens, 2 threads, the bundles taking turns (the form the default does
not ship in exported again, `benchmarks.default_forms`). Where the default ships as the fused step, that step as
this checkout writes it (the default exported again: its step and its encoder) runs beside them: what releasing it
again would change.

Prints, per input, the decoder graph's median ms a run and the whole step's ms a token (search and decoding
options included) for each, their ratios, the encoder graph's ms over the input for each (both int8; the fused
form's units attend through GroupQueryAttention, `modeling.unit_attention`) and their ratio, and how many of the 96
tokens two choose alike before they first differ (the fused graph runs the GGUF's 4-bit blocks as the file
holds them, the int8 one its base re-quantized to int8 per tensor, so they are not the same model to the last bit).
"""

from __future__ import annotations

import pytest

from benchmarks.common import write_result
from benchmarks.default_forms import DEFAULT, block_recipes, default_as
from benchmarks.graph_turns import GraphTimer
from benchmarks.test_peers import NEW, THREADS, agreement
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleNotFoundError

ROUNDS = 2


def test_fused_step_against_the_int8_step(quick, monkeypatch):
    try:
        bundles = {"int8": default_as("int8"), "fused": default_as("blocks")}
        again = default_as("blocks", again=True) if bundles["fused"] == DEFAULT else None
        if again is not None:
            bundles["fused-again"] = again
    except BundleNotFoundError as error:
        pytest.skip(f"the default's base model is not installed: {error}")
    points = []
    for name, turns in GraphTimer(monkeypatch, bundles).each_input(quick, ROUNDS):
        tokens = turns.tokens
        same = agreement(tokens["int8"], tokens["fused"])
        point = {"input": name, "new_tokens": NEW, "tokens_alike_before_first_difference": same, **turns.medians()}
        point["graph_speedup"] = point["int8_graph_ms"] / point["fused_graph_ms"]
        point["encoder_speedup"] = point["int8_encoder_ms"] / point["fused_encoder_ms"]
        point["step_speedup"] = point["int8_step_ms"] / point["fused_step_ms"]
        points.append(point)
        print(f"\n{name}: decoder graph int8 {point['int8_graph_ms']:.1f} ms, fused "
              f"{point['fused_graph_ms']:.1f} ms a run ({point['graph_speedup']:.2f}x); whole step "
              f"{point['int8_step_ms']:.1f} vs {point['fused_step_ms']:.1f} ms a token "
              f"({point['step_speedup']:.2f}x); encoder graph {point['int8_encoder_ms']:.0f} vs "
              f"{point['fused_encoder_ms']:.0f} ms ({point['encoder_speedup']:.2f}x); {same} tokens alike before the "
              "first difference")
        if "fused-again" in bundles:
            point["again_graph_speedup"] = point["fused_graph_ms"] / point["fused-again_graph_ms"]
            point["again_step_speedup"] = point["fused_step_ms"] / point["fused-again_step_ms"]
            point["again_encoder_speedup"] = point["fused_encoder_ms"] / point["fused-again_encoder_ms"]
            point["again_tokens_alike"] = agreement(tokens["fused"], tokens["fused-again"])
            print(f"  the default as this checkout exports it: decoder graph {point['fused-again_graph_ms']:.1f} ms "
                  f"({point['again_graph_speedup']:.2f}x the shipped one's speed), whole step "
                  f"{point['fused-again_step_ms']:.1f} ms a token ({point['again_step_speedup']:.2f}x); encoder graph "
                  f"{point['fused-again_encoder_ms']:.0f} ms ({point['again_encoder_speedup']:.2f}x); "
                  f"{point['again_tokens_alike']} tokens alike before the first difference")
    write_result("fused_step", {"threads": THREADS, "shipped": Bundle.load(DEFAULT).manifest.dtype,
                                "block_recipes": block_recipes(bundles["fused"]), "points": points})
    assert all(p["fused_graph_ms"] > 0 for p in points)
