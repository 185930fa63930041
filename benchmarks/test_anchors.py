"""Speed against what users would run instead, on plain BART (one page, where PageSum reduces to BART).

bart-base-shaped random weights, a 1024-token input, greedy and 4-beam decoding of exactly 64 (and, in full
mode, 256) tokens, the same options everywhere, 2 threads: our ONNX Runtime backend against HF `generate`
(torch). Runs are interleaved after a warm-up; tokens/s and the ratio are printed and written to
benchmarks/results/anchors.json. Tokens must be identical (greedy and beam search have HF's semantics).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from benchmarks.common import BART_BASE, CACHE, write_result

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


def hf_bart_base():
    """A bart-base-shaped HF BART with random weights and our bundle exported from the same directory."""
    directory, bundle = CACHE / "hf-bart-base", CACHE / "hf-bart-base-bundle"
    if not (directory / "config.json").is_file():
        config = transformers.BartConfig(
            vocab_size=BART_BASE["vocab_size"], d_model=768, encoder_layers=6, decoder_layers=6,
            encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
            max_position_embeddings=1024, forced_eos_token_id=None,
        )
        torch.manual_seed(0)
        transformers.BartForConditionalGeneration(config).save_pretrained(directory)
    if not (bundle / "manifest.json").is_file():
        from locsum_sdk.exporters.onnx import export_onnx

        export_onnx(directory, bundle, tokenizer=CACHE / "tokenizer.json", force=True)
    model = transformers.BartForConditionalGeneration.from_pretrained(directory).eval()
    return model, bundle


def ours(backend, ids: list[int], options) -> list[int]:
    from locsum_sdk.backends.base import UnitBatch
    from locsum_sdk.generation import generate
    from locsum_sdk.units import Unit

    batch = UnitBatch.from_units([[Unit(0, 0, 0, "", tuple(ids))]], pad=1)
    session = backend.start(batch, options.num_beams, unit_batch_size=1)
    try:
        return generate(session, 1, options, start=2, eos=2, pad=1)[0].token_ids
    finally:
        session.close()


def test_plain_bart_vs_hf_generate(benchmark, bart_base, quick):
    from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend
    from locsum_sdk.bundle import Bundle
    from locsum_sdk.generation import GenerationOptions

    torch.set_num_threads(2)
    hf, bundle = hf_bart_base()
    backend = OnnxRuntimeBackend(Bundle.load(bundle, verify=False), threads=2)
    rng = np.random.default_rng(0)
    ids = [0, *rng.integers(5, BART_BASE["vocab_size"], 1022).tolist(), 2]
    cases = [(beams, new) for new in ((64,) if quick else (64, 256)) for beams in (1, 4)]
    rows = []

    def run():
        for beams, new in cases:
            options = GenerationOptions(num_beams=beams, max_length=new + 1, min_length=new + 1)
            hf_kwargs = dict(num_beams=beams, max_length=new + 1, min_length=new + 1, do_sample=False)
            ours(backend, ids, GenerationOptions(num_beams=beams, max_length=3))  # warm-up
            hf.generate(torch.tensor([ids]), **{**hf_kwargs, "max_length": 3, "min_length": 3})
            times = {"locsum-onnxruntime": [], "hf-generate": []}
            for _ in range(1 if quick else 2):
                start = time.perf_counter()
                mine = ours(backend, ids, options)
                times["locsum-onnxruntime"].append(time.perf_counter() - start)
                start = time.perf_counter()
                with torch.inference_mode():
                    theirs = hf.generate(torch.tensor([ids]), **hf_kwargs)[0, 1:].tolist()
                times["hf-generate"].append(time.perf_counter() - start)
            best = {k: min(v) for k, v in times.items()}
            rows.append({"beams": beams, "new_tokens": new, "identical_tokens": mine == theirs,
                         **{f"{k}_tokens_per_s": new / v for k, v in best.items()},
                         "ratio_vs_hf": best["hf-generate"] / best["locsum-onnxruntime"]})

    benchmark.pedantic(run, rounds=1, iterations=1)
    print("\nbeams  tokens  locsum-ORT tok/s  HF generate tok/s  ratio  identical")
    for r in rows:
        print(f"{r['beams']:5d}  {r['new_tokens']:6d}  {r['locsum-onnxruntime_tokens_per_s']:16.1f}  "
              f"{r['hf-generate_tokens_per_s']:17.1f}  {r['ratio_vs_hf']:5.2f}  {r['identical_tokens']}")
    settings = {"threads": 2, "input_tokens": len(ids), "dtype": "float32", "model": "bart-base shape, random"}
    benchmark.extra_info.update({"rows": rows, **settings})
    write_result("anchors", {"rows": rows, **settings})
    assert all(r["identical_tokens"] for r in rows)
