"""Tiny GGUF files of the base model's layout, written as llama.cpp writes them: query/key rows permuted into
interleaved rotary pairs, projections in Q4_1, the token embedding in Q8_0, norms in float32, a byte-level BPE
vocabulary with its merges and control tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TINY = dict(vocab_size=0, d_model=64, layers=2, heads=4, kv_heads=2, ffn_dim=96, rope_base=10000.0, rms_eps=1e-5,
            max_positions=256)


#: A chat template of the tiny vocabulary's special tokens (ChatML's layout, `<s>` and `</s>` as its markers).
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
                 "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's reordering of an HF query/key projection (what `llm.gguf_model.unpermute` undoes)."""
    rows = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, rows, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def tokenizer_parts(tokenizer_file: Path) -> tuple[list[str], list[str], list[int]]:
    """tokens, merges and llama.cpp token types (3: control) of a byte-level BPE tokenizer.json."""
    spec = json.loads(Path(tokenizer_file).read_text())
    vocab = spec["model"]["vocab"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    special = {added["content"] for added in spec["added_tokens"] if added["special"]}
    return tokens, merges, [3 if token in special else 1 for token in tokens]


def random_weights(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """HF Llama weights (float32, names without `model.`) of `config`, scaled so every layer matters."""
    rng = np.random.default_rng(seed)
    d, hd, ffn = config["d_model"], config["d_model"] // config["heads"], config["ffn_dim"]
    normal = lambda *shape: rng.normal(0.0, 0.08, size=shape).astype(np.float32)  # noqa: E731
    weights = {"embed_tokens.weight": normal(config["vocab_size"], d),
               "norm.weight": (1 + normal(d)).astype(np.float32)}
    for i in range(config["layers"]):
        weights.update({
            f"layers.{i}.input_layernorm.weight": (1 + normal(d)).astype(np.float32),
            f"layers.{i}.post_attention_layernorm.weight": (1 + normal(d)).astype(np.float32),
            f"layers.{i}.self_attn.q_proj.weight": normal(config["heads"] * hd, d),
            f"layers.{i}.self_attn.k_proj.weight": normal(config["kv_heads"] * hd, d),
            f"layers.{i}.self_attn.v_proj.weight": normal(config["kv_heads"] * hd, d),
            f"layers.{i}.self_attn.o_proj.weight": normal(d, config["heads"] * hd),
            f"layers.{i}.mlp.gate_proj.weight": normal(ffn, d),
            f"layers.{i}.mlp.up_proj.weight": normal(ffn, d),
            f"layers.{i}.mlp.down_proj.weight": normal(d, ffn),
        })
    return weights


_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
          "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


#: Where each K-quant and IQ4 type keeps its float16 (super-)block scales, and the range drawn for them (a real
#: model's magnitudes).
K_SCALES = {"Q2_K": ((80, 82), 1e-3), "Q3_K": ((108,), 5e-4), "Q4_K": ((0, 2), 2e-4), "Q5_K": ((0, 2), 1e-4),
            "Q6_K": ((208,), 2e-5), "IQ4_NL": ((0,), 1e-3), "IQ4_XS": ((0,), 5e-5)}


def random_blocks(kind: str, rows: int, columns: int, rng: np.random.Generator) -> np.ndarray:
    """Valid bytes (rows, bytes a row) of a K-quant or IQ4 tensor, which gguf-py cannot quantize: random codes and
    sub-block scales, each (super-)block's float16 scales drawn from `K_SCALES`."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    values, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType[kind]]
    raw = rng.integers(0, 256, size=(rows * columns // values, nbytes), dtype=np.uint8)
    starts, scale = K_SCALES[kind]
    for start in starts:
        raw[:, start:start + 2] = rng.uniform(scale / 2, scale, size=(len(raw), 1)).astype("<f2").view(np.uint8)
    return raw.reshape(rows, -1)


def add_shape(writer, config: dict) -> None:
    """The `llama.*` hyperparameters of `config` (`TINY`'s keys) on a `gguf.GGUFWriter`."""
    writer.add_block_count(config["layers"])
    writer.add_context_length(config["max_positions"])
    writer.add_embedding_length(config["d_model"])
    writer.add_feed_forward_length(config["ffn_dim"])
    writer.add_head_count(config["heads"])
    writer.add_head_count_kv(config["kv_heads"])
    writer.add_rope_freq_base(config["rope_base"])
    writer.add_layer_norm_rms_eps(config["rms_eps"])


def add_tokenizer(writer, fields: dict) -> None:
    """A byte-level BPE tokenizer's GGUF fields (by their GGUF keys, as `GGUFFile.metadata` reads them; the
    pre-tokenizer, padding id and chat template only where given) on a `gguf.GGUFWriter`."""
    writer.add_tokenizer_model(fields["tokenizer.ggml.model"])
    if fields.get("tokenizer.ggml.pre") is not None:
        writer.add_tokenizer_pre(fields["tokenizer.ggml.pre"])
    writer.add_token_list(fields["tokenizer.ggml.tokens"])
    writer.add_token_merges(fields["tokenizer.ggml.merges"])
    writer.add_token_types(fields["tokenizer.ggml.token_type"])
    writer.add_bos_token_id(fields["tokenizer.ggml.bos_token_id"])
    writer.add_eos_token_id(fields["tokenizer.ggml.eos_token_id"])
    if fields.get("tokenizer.ggml.padding_token_id") is not None:
        writer.add_pad_token_id(fields["tokenizer.ggml.padding_token_id"])
    if fields.get("tokenizer.chat_template") is not None:
        writer.add_chat_template(fields["tokenizer.chat_template"])


def write_gguf(path: Path, tokenizer_file: Path, seed: int = 0, chat_template: str | None = CHAT_TEMPLATE,
               embedding: str = "Q8_0", projections: str | dict[str, str] = "Q4_1",
               **changes) -> tuple[Path, dict, dict]:
    """A tiny Llama GGUF at `path` with the vocabulary of `tokenizer_file` and `chat_template`, its token embedding
    in the ggml type `embedding`, its projections in `projections` (one type, or a type by GGUF role such as
    "ffn_down", the others Q4_1) -> (path, config, the HF weights it was made from, before quantization). A K-quant
    or IQ4 projection holds `random_blocks` (K-quants and IQ4_XS need rows of whole 256s: d_model=256, ffn_dim=256
    or more), which the weights returned do not describe."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    tokens, merges, types = tokenizer_parts(tokenizer_file)
    config = {**TINY, "vocab_size": len(tokens), **changes}
    weights = random_weights(config, seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    add_shape(writer, config)
    add_tokenizer(writer, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
                           "tokenizer.ggml.merges": merges, "tokenizer.ggml.token_type": types,
                           "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 2,
                           "tokenizer.ggml.padding_token_id": 1, "tokenizer.chat_template": chat_template})

    rng = np.random.default_rng(seed)

    def add(name: str, array: np.ndarray, kind) -> None:
        if kind == Q.F32:
            writer.add_tensor(name, array)
        elif kind.name in K_SCALES:
            writer.add_tensor(name, random_blocks(kind.name, *array.shape, rng), raw_dtype=kind)
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)

    types = projections if isinstance(projections, dict) else {theirs: projections for theirs in _NAMES.values()}

    add("token_embd.weight", weights["embed_tokens.weight"], Q[embedding])
    for i in range(config["layers"]):
        for ours, theirs in _NAMES.items():
            array = weights[f"layers.{i}.{ours}.weight"]
            if theirs == "attn_q":
                array = permute(array, config["heads"])
            elif theirs == "attn_k":
                array = permute(array, config["kv_heads"])
            add(f"blk.{i}.{theirs}.weight", array, Q.F32 if array.ndim == 1 else Q[types.get(theirs, "Q4_1")])
    add("output_norm.weight", weights["norm.weight"], Q.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    config.update(bos_token_id=0, eos_token_id=2, pad_token_id=1)
    return path, config, weights


def adapted_llm(path: Path, rank: int = 4, alpha: float = 8.0, std: float = 0.02, seed: int = 0):
    """The zero-shot HierEncDec of the GGUF at `path` with LoRA adapters of `rank` on every projection, their B
    random (`std`; A keeps its random start): a stand-in for a fine-tune -> (the loaded LLM, its module)."""
    import dataclasses

    import torch

    from locsum_sdk.modeling.llm_checkpoint import load_llm
    from locsum_sdk.modeling.lora import add_adapters

    loaded = load_llm(path)
    net = loaded.model
    add_adapters(net.model.layers, rank, alpha)
    net.config = net.model.config = dataclasses.replace(net.model.config, lora_rank=rank, lora_alpha=alpha)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in net.named_parameters():
            if "lora_b" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return loaded, net


def install_wheel(site: Path, files: dict[str, Path], wheel: str, version: str) -> None:
    """An installed distribution in the directory `site` (what pip leaves there): its dist-info and `files` (path
    inside the distribution -> file copied there)."""
    import shutil

    info = site / f"{wheel.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {wheel}\nVersion: {version}\n")
    for inside, source in files.items():
        (site / inside).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, site / inside)
