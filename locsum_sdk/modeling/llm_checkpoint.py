"""A user's LLM (an HF directory or a GGUF file of the Llama family, read by `locsum_sdk.llm`) as a checkpoint of a
kind on the Llama backbone, untrained in the kind's own parts (PageSum's page confidence at zero, so pages weigh
equally; HierEncDec adds none): zero-shot, each unit read in the model's own chat template with the instruction
recorded in the model settings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..base_model import saved_tokenizer
from ..errors import BundleError
from ..llm import Instruction, framed_config, read_llm, zero_shot_decoding
from . import registry
from .llama_config import LlamaConfig
from .weights import Checkpoint

DEFAULT_KIND = "hierencdec"  # the default bundle's kind: every document (or page) read alone, one summary over all
FORMAT = "llm"  # the source format kinds list when they run on a user's LLM


def backbone_state(tensors, config: LlamaConfig, source: str) -> dict[str, torch.Tensor]:
    """HF Llama tensors (name without `model.` -> float32 array) as the backbone's state under `model.`; a tied
    model's LM head, where the file holds one, must be the embedding."""
    state = {f"model.{name}": torch.from_numpy(array) for name, array in tensors}
    head = state.pop("model.lm_head.weight", None)
    if config.tie_embeddings:
        if head is not None and not torch.equal(head, state.get("model.embed_tokens.weight", head)):
            raise BundleError(f"{source}: lm_head differs from the token embedding, but the config ties them")
    elif head is None:
        raise BundleError(f"{source}: the config unties the LM head, but the weights hold no lm_head")
    else:
        state["model.lm_head.weight"] = head
    return state


def load_llm(path: str | os.PathLike, kind: str | None = None,
             instruction: Instruction | None = None) -> Checkpoint:
    """The LLM at `path` as a checkpoint of `kind` (default hierencdec), framed by its chat template."""
    kind = kind or DEFAULT_KIND
    registry.check_formats(kind, FORMAT)
    source = read_llm(path)
    fields: dict[str, Any] = framed_config(source, instruction)
    config = LlamaConfig(**fields)
    model = registry.build(kind, config, backbone_state(source.tensors(), config, str(path)), str(path))
    tokenizer = Path(path) / "tokenizer.json" if source.format == "hf" else saved_tokenizer(source.tokenizer)
    described = {"model_format": source.format, "model_family": source.family, "model_file": source.path.name,
                 "model_license": source.license or "unknown: see the model's own card"}
    return Checkpoint(model, tokenizer, {"generation": zero_shot_decoding(config.max_positions)}, described,
                      list(source.files))


def load_base_model(path: str | os.PathLike, kind: str) -> Checkpoint:
    """The base model's GGUF (`base_model.read_base`, in the default bundle's fixed frame) as a checkpoint of
    `kind`, for fine-tuning as the default bundle was."""
    from ..base_model import read_base

    registry.check_formats(kind, FORMAT)
    base = read_base(path)
    config = LlamaConfig(**base.config)
    model = registry.build(kind, config, backbone_state(base.weights.items(), config, str(path)), str(path))
    return Checkpoint(model, saved_tokenizer(base.tokenizer))
