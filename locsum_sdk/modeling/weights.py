"""What every checkpoint loader shares, and nothing kind-specific: the checkpoint record, reading weights files and
config.json (never unpickling: safetensors or `torch.load(weights_only=True)`), HF BART names, and copying a state
dict into a model with every name and shape checked. Kind modules and `checkpoint.py` build on it; it imports none
of them.
"""

from __future__ import annotations

import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import constants as C
from ..errors import BundleError, BundleNotFoundError

CONFIG_FILE = C.CHECKPOINT_CONFIG_FILE
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
TIED_COPIES = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")


@dataclass
class Checkpoint:
    """A loaded model with the settings saved beside it."""

    model: torch.nn.Module  # a registered kind's module (`model.kind`), in eval mode
    tokenizer_file: Path | None = None  # tokenizer.json found beside the weights
    settings: dict[str, Any] = field(default_factory=dict)  # `units` and `generation` defaults, if saved
    source: dict[str, str] = field(default_factory=dict)  # a foreign model's format, family, file and licence
    model_files: list[Path] = field(default_factory=list)  # a user's model files its pretrained weights come from
    origins: dict[str, Any] = field(default_factory=dict)  # stand-in weights: state name -> `llm.source.Origin`


def load_failure(err: Exception) -> str:
    """Why a weights file did not load, in one line. torch's own message for a refused object advises loading
    with `weights_only=False`, which would run code from the file: we never do, so we never repeat it."""
    text = str(err)
    if isinstance(err, pickle.UnpicklingError) and "WeightsUnpickler error:" in text:
        detail = next((line.strip() for line in text.split("WeightsUnpickler error:", 1)[1].splitlines()
                       if line.strip()), "")
        found = re.match(r"Unsupported global: GLOBAL (\S+)", detail)
        if found:
            return (f"it holds a Python object of class {found.group(1)}, and only tensors and plain containers "
                    "are ever unpickled: an object could run code")
        return f"not a torch file of tensors: {detail or 'the unpickler refused it'}"
    lines = text.strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else 'no message'}"


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Read a safetensors file, or a torch file with `weights_only=True` (never a full unpickle)."""
    if not path.is_file():
        raise BundleNotFoundError(f"weights file {path} does not exist")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # safetensors and torch raise their own types for damaged or foreign files
        raise BundleError(f"{path} cannot be read as weights ({load_failure(err)}); restore the file") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise BundleError(f"{path} is not a state dict of tensors")
    return state


def from_hf_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF BART (+ PageSum research `lin.*`) names -> PageSum names. Tied copies must equal the shared table."""
    state = dict(state)
    if "model.shared.weight" not in state:
        for name in TIED_COPIES:
            if name in state:
                state["model.shared.weight"] = state[name]
                break
    shared = state.get("model.shared.weight")
    for name in TIED_COPIES:
        copy = state.pop(name, None)
        if copy is not None and shared is not None and not torch.equal(copy, shared):
            raise BundleError(f"{name} differs from model.shared.weight; untied BART heads are not supported")
    out = {}
    for name, tensor in state.items():
        if name == "final_logits_bias":
            out["model.final_logits_bias"] = tensor
        elif name.startswith("lin."):
            out["page_conf." + name[4:]] = tensor
        else:
            out[name] = tensor
    return out


def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str, assign: bool = False) -> None:
    """Copy `state` into `model` (or, with `assign`, make its tensors the model's own), refusing missing, unexpected
    or mis-shaped tensors."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise BundleError(f"{source}: missing tensors {missing[:8]}, unexpected tensors {unexpected[:8]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise BundleError(
                f"{source}: {name} has shape {tuple(tensor.shape)}, expected {tuple(expected[name].shape)}")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()}, strict=True, assign=assign)


def read_config(path: Path) -> dict[str, Any]:
    """A checkpoint's config.json as a JSON object, or a BundleError saying what is wrong with it."""
    try:
        config = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BundleError(f"{path} is not valid JSON ({err}); restore the checkpoint's config.json") from None
    if not isinstance(config, dict):
        raise BundleError(f"{path} holds a JSON {type(config).__name__}, not an object; restore it")
    return config


def tokenizer_beside(directory: Path) -> Path | None:
    path = directory / TOKENIZER_FILE
    return path if path.is_file() else None


@dataclass
class WeightsFile:
    """A weights file read once: its tensors, or (a file that is not a plain state dict, such as a research
    checkpoint holding its options beside the weights) the reason it could not be read as one."""

    path: Path
    state: dict[str, torch.Tensor] | None
    error: BundleError | None = None

    @classmethod
    def read(cls, path: Path) -> WeightsFile:
        try:
            return cls(path, read_state_dict(path))
        except BundleNotFoundError:
            raise
        except BundleError as err:
            return cls(path, None, err)
