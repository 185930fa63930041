"""A llama.cpp GGUF file of a Llama-family LLM: its metadata read as the HF config it was converted from (so one
family class maps both formats), its tokenizer and chat template from the metadata, its tensors dequantized one at a
time (`ggml_blocks`) under HF Llama's names.

llama.cpp stores the query and key rows of a `llama` architecture's attention permuted into interleaved rotary pairs;
they are read back in HF's order (`unpermute`). Qwen2 files keep HF's order. Rotary frequency factors stored as a
tensor (`rope_freqs.weight`, how llama.cpp keeps Llama 3.1's scaling) become the backbone's `rope_divisors`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BundleError
from ..gguf_file import GGUFFile
from .families import ForeignModelError, family
from .gguf_tokenizer import gguf_tokenizer
from .source import LLMSource, Origin

#: GGUF tensor names of one layer -> HF Llama names (without `model.`).
LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_TENSORS = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}
ROPE_FREQS = "rope_freqs.weight"  # rotary frequency divisors, read into the config rather than the weights
PERMUTED = ("llama",)  # architectures whose query/key rows llama.cpp permutes


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's reordering of a query or key projection (out, in) or bias (out,): GGUF stores each head's
    rows as interleaved (even, odd) rotary pairs; HF Llama rotates the two halves of a head."""
    rows = weight.shape[0] // heads // 2
    return weight.reshape(heads, rows, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def hf_config(reader: GGUFFile) -> dict[str, Any]:
    """The HF-style config of a GGUF file's metadata (`model_type` is its architecture)."""
    arch = reader.field("general.architecture")
    meta = reader.metadata

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    heads = get("attention.head_count")
    hf: dict[str, Any] = {
        "model_type": arch,
        "vocab_size": len(meta.get("tokenizer.ggml.tokens", ())) or get("vocab_size"),
        "hidden_size": get("embedding_length"), "num_hidden_layers": get("block_count"),
        "num_attention_heads": heads, "num_key_value_heads": get("attention.head_count_kv", heads),
        "intermediate_size": get("feed_forward_length"), "rms_norm_eps": get("attention.layer_norm_rms_epsilon"),
        "max_position_embeddings": get("context_length"), "rope_theta": get("rope.freq_base", 10000.0),
        "tie_word_embeddings": "output.weight" not in reader.tensors,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
    }
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        if not isinstance(hf[key], int):
            raise BundleError(f"{reader.path}: GGUF metadata for {key} ({arch}.*) is missing")
    key_length, value_length = get("attention.key_length"), get("attention.value_length")
    if key_length is not None:
        if value_length is not None and value_length != key_length:
            raise ForeignModelError(f"{reader.path}: keys of {key_length} and values of {value_length} per head; the "
                                    "Llama family's are the same size")
        hf["head_dim"] = key_length
    if get("expert_count"):
        hf["num_local_experts"] = get("expert_count")
    scaling = get("rope.scaling.type")
    if scaling not in (None, "none"):
        hf["rope_scaling"] = {"rope_type": scaling, "factor": get("rope.scaling.factor")}
    if get("attention.sliding_window"):
        hf.update(sliding_window=get("attention.sliding_window"), use_sliding_window=True)
    if ROPE_FREQS in reader.tensors:
        hf["rope_divisors"] = reader.array(ROPE_FREQS).reshape(-1).tolist()
    return hf


def _hf_name(name: str, path: Path) -> tuple[str, str | None]:
    """A GGUF tensor name -> (HF name without `model.`, its permuted part or None)."""
    parts = name.split(".")
    if len(parts) == 2 and parts[0] in GLOBAL_TENSORS and parts[1] == "weight":
        return f"{GLOBAL_TENSORS[parts[0]]}.weight", None
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in LAYER_TENSORS \
            and parts[3] in ("weight", "bias"):
        return f"layers.{int(parts[1])}.{LAYER_TENSORS[parts[2]]}.{parts[3]}", parts[2]
    raise ForeignModelError(f"{path}: tensor {name!r} has no place in a Llama-family block")


def oriented_tensors(reader: GGUFFile, names: Collection[str] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the file (or those in `names`) as float32 by its GGUF name, query and key rows in HF order,
    one at a time."""
    arch = reader.field("general.architecture")
    heads = {"attn_q": reader.metadata.get(f"{arch}.attention.head_count"),
             "attn_k": reader.metadata.get(f"{arch}.attention.head_count_kv",
                                           reader.metadata.get(f"{arch}.attention.head_count"))}
    for name in reader.tensors:
        if names is not None and name not in names:
            continue
        array = reader.array(name)
        part = name.split(".")[2] if name.startswith("blk.") and name.count(".") >= 3 else None
        if arch in PERMUTED and part in heads:
            array = np.ascontiguousarray(unpermute(array, int(heads[part])))
        yield name, array
        del array  # before the next tensor is read: one at a time


def read_gguf(path: Path) -> LLMSource:
    """The LLM in the GGUF file `path` (BundleError or ForeignModelError naming what is not read, before any tensor
    is dequantized)."""
    reader = GGUFFile(path)
    hf = hf_config(reader)
    chosen = family(hf["model_type"], str(path))
    config = chosen.fields(hf, str(path))
    origins = {_hf_name(name, path)[0]: Origin(path, name, info.shape) for name, info in reader.tensors.items()
               if name != ROPE_FREQS}  # a tensor with no place in the block is refused here, before any work
    layer0 = {name.split(".", 2)[2] for name in reader.tensors if name.startswith("blk.0.")}
    config.update(attention_bias="attn_q.bias" in layer0, output_bias="attn_output.bias" in layer0,
                  mlp_bias="ffn_gate.bias" in layer0)
    tokenizer = gguf_tokenizer(reader.metadata, str(path))
    vocab = config["vocab_size"]
    for key in ("bos_token_id", "eos_token_id"):
        if not isinstance(hf[key], int) or not 0 <= hf[key] < vocab:
            raise BundleError(f"{path}: tokenizer.ggml.{key.removesuffix('_token_id')}_token_id is missing or not a "
                              "token id")
        config[key] = hf[key]
    config["pad_token_id"] = hf["pad_token_id"] if isinstance(hf["pad_token_id"], int) else hf["eos_token_id"]
    tokens = reader.metadata["tokenizer.ggml.tokens"]
    strings = {"bos_token": tokens[config["bos_token_id"]], "eos_token": tokens[config["eos_token_id"]]}

    hf_names = {origin.name: name for name, origin in origins.items()}

    def tensors() -> Iterator[tuple[str, np.ndarray]]:
        for name, array in oriented_tensors(reader, hf_names):
            yield hf_names[name], array
    licence = reader.metadata.get("general.license")
    return LLMSource(path, "gguf", chosen.names[0], config, tokenizer, reader.metadata.get("tokenizer.chat_template"),
                     strings, [path], tensors, origins, licence if isinstance(licence, str) else None)
