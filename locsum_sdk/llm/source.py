"""A user's LLM as read from its files, before any frame or bundle: its family's backbone settings, its tokenizer,
its chat template, its licence and its weights, one tensor at a time under HF Llama's names (no `model.` prefix)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Origin:
    """Where one weight is stored: its file, its name there (as `base_weights.source_arrays` yields it) and its shape
    as read (HF order: (out, in))."""

    file: Path
    name: str
    shape: tuple[int, ...]


@dataclass
class LLMSource:
    """What a reader (`hf_directory`, `gguf_model`) found."""

    path: Path  # the HF directory or the GGUF file
    format: str  # "hf" or "gguf"
    family: str  # the registered family's name (`families.FAMILIES`)
    config: dict[str, Any]  # LlamaConfig fields: shape, rotary settings, biases, head, special ids (no frame yet)
    tokenizer: Any  # tokenizers.Tokenizer, special tokens' strings read as their ids (for the frame)
    chat_template: str | None
    special_strings: dict[str, str]  # bos_token, eos_token: what a chat template reads
    files: list[Path]  # the weights files, in the order tensors are read
    read: Callable[[], Iterator[tuple[str, np.ndarray]]]  # every tensor as float32 under HF Llama's names
    origins: dict[str, Origin]  # every tensor's place, by HF Llama name, read from the files' headers alone
    license: str | None = None
    notes: list[str] = field(default_factory=list)  # what was mapped that a user should know (a window, a head)

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """Every weight, one at a time: (HF Llama name without `model.`, float32 array (out, in))."""
        return self.read()
