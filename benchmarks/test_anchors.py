"""Speed against what users would run instead, on plain BART (one page, where PageSum reduces to BART).

bart-base-shaped random weights, a 1024-token input, greedy and 4-beam decoding of exactly 64 (and, in full
mode, 256) new tokens, the same options everywhere, 2 threads. Systems: our ONNX Runtime backend (float32 and
int8 bundles exported from the same HF directory), HF `generate` (torch), and, from their own environment
(benchmarks/anchors/env.py), optimum's `ORTModelForSeq2SeqLM` with IO binding and CTranslate2 float32 and int8
converted from the same weights. Runs are interleaved after a warm-up; tokens/s and ratios are printed and
written to benchmarks/results/anchors.json.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import BART_BASE, CACHE, current_bundle, export_bundle, write_result

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

HF_DIR = CACHE / "hf-bart-base"


def hf_bart_base() -> Path:
    """A bart-base-shaped HF BART with random weights and a word-level tokenizer (CTranslate2 needs one)."""
    if not (HF_DIR / "tokenizer.json").is_file():
        from tokenizers import Tokenizer, models

        config = transformers.BartConfig(
            vocab_size=BART_BASE["vocab_size"], d_model=768, encoder_layers=6, decoder_layers=6,
            encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
            max_position_embeddings=1024, forced_eos_token_id=None,
        )
        torch.manual_seed(0)
        transformers.BartForConditionalGeneration(config).save_pretrained(HF_DIR)
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{f"t{i}": i for i in range(4, config.vocab_size)}}
        fast = transformers.PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
            bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        )
        fast.save_pretrained(HF_DIR)
        config_file = HF_DIR / "config.json"  # the anchors run transformers 4.x, which takes torch_dtype
        values = json.loads(config_file.read_text())
        values["torch_dtype"] = values.pop("dtype", None) or "float32"
        values.update(normalize_before=False, add_final_layer_norm=False, normalize_embedding=True,
                      static_position_embeddings=False, add_bias_logits=False)  # BART's legacy keys (CTranslate2)
        config_file.write_text(json.dumps(values, indent=2))
        tokenizer_config = HF_DIR / "tokenizer_config.json"  # and knows the fast tokenizer by its 4.x name
        values = json.loads(tokenizer_config.read_text())
        values["tokenizer_class"] = "PreTrainedTokenizerFast"
        tokenizer_config.write_text(json.dumps(values, indent=2))
    return HF_DIR


def bundle(quantize: str | None) -> Path:
    path = CACHE / f"hf-bart-base-bundle-{quantize or 'float32'}"
    if not current_bundle(path):
        export_bundle(hf_bart_base(), path, tokenizer=HF_DIR / "tokenizer.json", quantize=quantize)
    return path


def locsum_system(path: Path):
    from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend
    from locsum_sdk.bundle import Bundle
    from locsum_sdk.generation import GenerationOptions, generate
    from locsum_sdk.unit_batch import UnitBatch
    from locsum_sdk.units import Unit

    backend = OnnxRuntimeBackend(Bundle.load(path, verify=False), threads=2)

    def run(ids, beams, new):
        start = time.perf_counter()
        batch = UnitBatch.from_units([[Unit(0, 0, 0, "", tuple(ids))]], pad=1)
        session = backend.start(batch, beams, unit_batch_size=1)
        try:
            options = GenerationOptions(num_beams=beams, max_length=new + 1, min_length=new + 1)
            tokens = generate(session, 1, options, start=2, eos=2, pad=1)[0].token_ids
        finally:
            session.close()
        return time.perf_counter() - start, tokens

    return run


def hf_system():
    model = transformers.BartForConditionalGeneration.from_pretrained(hf_bart_base()).eval()

    def run(ids, beams, new):
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), num_beams=beams, max_length=new + 1, min_length=new + 1,
                                 do_sample=False)
        return time.perf_counter() - start, out[0, 1:].tolist()

    return run


class AnchorProcess:
    """A system served by benchmarks/anchors/serve.py in the anchors environment."""

    def __init__(self, system: str, ids: list[int]):
        from benchmarks.anchors import env

        ids_file = CACHE / "anchor-ids.json"
        ids_file.write_text(json.dumps(ids))
        serve = Path(__file__).resolve().parent / "anchors" / "serve.py"
        self.process = subprocess.Popen(
            [str(env.python()), str(serve), "--system", system, "--model-dir", str(hf_bart_base()),
             "--work", str(CACHE / "anchors"), "--ids", str(ids_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert json.loads(self.process.stdout.readline())["ready"]

    def __call__(self, ids, beams, new):
        self.process.stdin.write(f"{beams} {new}\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        return answer["seconds"], answer["token_ids"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def test_plain_bart_vs_anchors(benchmark, request, quick):
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    ids = [0, *rng.integers(5, BART_BASE["vocab_size"], 1022).tolist(), 2]
    systems = {"locsum-ort": locsum_system(bundle(None)), "locsum-ort-int8": locsum_system(bundle("int8")),
               "hf-generate": hf_system()}
    anchors = [] if request.config.getoption("--skip-anchors") else ["optimum", "ct2-float32", "ct2-int8"]
    for name in anchors:
        systems[name] = AnchorProcess(name, ids)
    cases = [(beams, new) for new in ((64,) if quick else (64, 256)) for beams in (1, 4)]
    rows = []

    def run():
        for beams, new in cases:
            for system in systems.values():
                system(ids, beams, 2)  # warm-up
            seconds = {name: [] for name in systems}
            tokens = {}
            for _ in range(1 if quick else 2):
                for name, system in systems.items():
                    elapsed, tokens[name] = system(ids, beams, new)
                    seconds[name].append(elapsed)
            best = {name: min(v) for name, v in seconds.items()}
            row = {"beams": beams, "new_tokens": new, **{f"{n}_tokens_per_s": new / s for n, s in best.items()},
                   "identical_to_hf": {n: t == tokens["hf-generate"] for n, t in tokens.items()}}
            for other in systems:
                if other != "locsum-ort":
                    row[f"locsum-ort_speedup_vs_{other}"] = best[other] / best["locsum-ort"]
            if "ct2-int8" in best:
                row["locsum-ort-int8_time_over_ct2-int8"] = best["locsum-ort-int8"] / best["ct2-int8"]
            rows.append(row)

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        for system in systems.values():
            if isinstance(system, AnchorProcess):
                system.close()
    print()
    for r in rows:
        speeds = ", ".join(f"{n} {r[f'{n}_tokens_per_s']:.1f}" for n in systems)
        ratios = ", ".join(f"{k.split('_vs_')[-1]} {v:.2f}x" for k, v in r.items() if "_speedup_vs_" in k)
        print(f"{r['beams']} beam(s), {r['new_tokens']} tokens: tok/s {speeds}; locsum-ort speed-up vs {ratios}; "
              f"identical to HF: {r['identical_to_hf']}")
    settings = {"threads": 2, "input_tokens": len(ids), "model": "bart-base shape, random weights"}
    benchmark.extra_info.update({"rows": rows, **settings})
    write_result("anchors", {"rows": rows, **settings})
    assert all(r["identical_to_hf"]["locsum-ort"] for r in rows)
