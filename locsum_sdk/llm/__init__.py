"""The LLM a user already has, read as a locality-aware summarizer's backbone: Llama-family models (Llama, Mistral,
Qwen2 and any registered family whose block is the same) from an HF directory or a llama.cpp GGUF file.

A family of LLMs is not a kind: `families` maps each architecture's config to the backbone's settings and refuses
what differs; `hf_directory` and `gguf_model` read one format each (weights one tensor at a time, the tokenizer,
the chat template); `prompt` makes the frame around each unit from the model's own chat template. No torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import BundleError, BundleNotFoundError
from .families import FAMILIES, ForeignModelError
from .hf_directory import is_llm_directory, read_directory
from .prompt import Instruction, chat_frame
from .source import LLMSource

__all__ = ["FAMILIES", "ForeignModelError", "Instruction", "LLMSource", "framed_config", "is_gguf", "is_llm",
           "read_llm", "zero_shot_decoding"]

#: Decoding defaults of a zero-shot LLM bundle: the default bundle's that need no word lists of its own (greedy, a
#: repeated token's probability lowered, no trigram of word starts written twice, ending on a whole sentence).
ZERO_SHOT_DECODING = {"num_beams": 1, "max_length": 256, "repetition_penalty": 1.3, "no_repeat_ngram_size": 3,
                      "ngram_word_starts": True, "whole_sentences": True}


def zero_shot_decoding(positions: int) -> dict[str, Any]:
    """ZERO_SHOT_DECODING for a model of `positions` positions (a summary of at most half of them)."""
    return {**ZERO_SHOT_DECODING, "max_length": min(ZERO_SHOT_DECODING["max_length"], positions // 2)}


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether the file starts with GGUF's magic."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


def is_llm(path: str | os.PathLike) -> bool:
    """Whether `path` is a GGUF file or an HF directory of a registered family."""
    path = Path(path)
    return is_gguf(path) if path.is_file() else path.is_dir() and is_llm_directory(path)


def read_llm(path: str | os.PathLike) -> LLMSource:
    """The LLM at `path`: an HF directory or a GGUF file (by its magic, not its name)."""
    from .gguf_model import read_gguf

    path = Path(path)
    if path.is_file():
        if not is_gguf(path):
            raise BundleError(f"{path} is not a GGUF file (its first bytes are not GGUF's magic)")
        return read_gguf(path)
    if path.is_dir():
        return read_directory(path)
    raise BundleNotFoundError(f"{path} does not exist")


def framed_config(source: LLMSource, instruction: Instruction | None = None) -> dict[str, Any]:
    """The source's LlamaConfig fields with the frame of its own chat template (or the instruction's) around each
    unit (`prompt`)."""
    instruction = instruction or Instruction()
    template = instruction.chat_template or source.chat_template
    if not template:
        raise BundleError(f"{source.path} has no chat template; the units are read in the model's own template, so "
                          "export an instruction-tuned model, or give one (--chat-template FILE)")
    frame = chat_frame(template, source.tokenizer, instruction, source.special_strings,
                       source.config["eos_token_id"], str(source.path))
    return {**source.config, **frame, "instruction": instruction.summarize, "question": instruction.question}
