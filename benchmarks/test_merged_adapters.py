"""A fine-tune whose base has no block form (float weights: an HF directory, an F16 GGUF), as the fused step writes
it: each LoRA adapter merged into the weight quantized at export (one `MatMulNBits` a projection), against the same
step with its adapters kept beside their projections (an 8-bit product of A and a Gemm each), on the same pages, in
one run: greedy, exactly 96 new tokens, 2 threads, the two bundles taking turns.

The module is the default's (its adapters, SmolLM2's shapes) with its base read as float weights: both bundles
quantize it to 4-bit blocks with zero points here, so they differ only in where the adapters run. Prints, per
input, the decoder graph's median ms a run and the whole step's ms a token for each, their ratios, and how many of
the 96 tokens the two choose alike before they first differ (the merged weights are rounded once with their
adapters, so the two are not the same model to the last bit).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from benchmarks.common import CACHE, write_result
from benchmarks.default_forms import CODE, DEFAULT
from benchmarks.graph_turns import GraphTimer
from benchmarks.test_peers import NEW, THREADS, agreement
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleNotFoundError
from locsum_sdk.exporters.rebuild import export_again
from locsum_sdk.modeling import fused_llama

ROUNDS = 2
FORMS = {"merged": True, "beside": False}


def float_base_bundle(merge: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    """The default exported again with its base quantized here instead of taken from the file's blocks, adapters
    merged or beside; once per bundle and code (in CACHE)."""
    bundle = Bundle.load(DEFAULT)
    out = CACHE / f"default_float_base_{'merged' if merge else 'beside'}"
    stamp = out.with_suffix(".json")
    key = json.dumps({"bundle": bundle.fingerprint,
                      "code": [hashlib.sha256(path.read_bytes()).hexdigest() for path in CODE]})
    if not (stamp.is_file() and json.loads(stamp.read_text()).get("key") == key and out.is_dir()):
        written = fused_llama.fused_step
        with monkeypatch.context() as patch:  # no file: every projection quantized here
            patch.setattr(fused_llama, "fused_step", lambda model, gguf=None: written(model, None, merge=merge))
            export_again(bundle, out, "blocks")
        stamp.write_text(json.dumps({"key": key}))
    return str(out)


def test_merged_adapters_against_adapters_beside(quick, monkeypatch):
    try:
        bundles = {form: float_base_bundle(merge, monkeypatch) for form, merge in FORMS.items()}
    except BundleNotFoundError as error:
        pytest.skip(f"the default's base model is not installed: {error}")
    points = []
    for name, turns in GraphTimer(monkeypatch, bundles).each_input(quick, ROUNDS):
        point = {"input": name, "new_tokens": NEW, "tokens_alike_before_first_difference":
                 agreement(turns.tokens["merged"], turns.tokens["beside"]), **turns.medians()}
        point["graph_speedup"] = point["beside_graph_ms"] / point["merged_graph_ms"]
        point["step_speedup"] = point["beside_step_ms"] / point["merged_step_ms"]
        points.append(point)
        print(f"\n{name}: decoder graph, adapters beside {point['beside_graph_ms']:.1f} ms, merged "
              f"{point['merged_graph_ms']:.1f} ms a run ({point['graph_speedup']:.2f}x); whole step "
              f"{point['beside_step_ms']:.1f} vs {point['merged_step_ms']:.1f} ms a token "
              f"({point['step_speedup']:.2f}x); {point['tokens_alike_before_first_difference']} tokens alike before "
              "the first difference")
    write_result("merged_adapters", {"threads": THREADS, "rounds": ROUNDS, "points": points})
    assert all(p["merged_graph_ms"] > 0 and p["beside_graph_ms"] > 0 for p in points)
