"""Checkpoint loaders: one per source format, each mapping names onto ours and checking every name and shape.

Sources: our own checkpoint directory (`config.json` with a `kind`, `model.safetensors`), an HF BART directory
(`config.json` + `model.safetensors` or `pytorch_model.bin`), the PageSum research state dict (HF BART keys
with `lin.weight [1, d]`, `lin.bias [1]`) and DYLE's research files (`rag.*` generator weights, a RoBERTa retriever
beside them; `locsum_sdk.modeling.dyle.load_research`). Nothing is ever unpickled: `torch.load(weights_only=True)`
only.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import constants as C
from .. import kinds
from ..errors import BundleError, BundleNotFoundError
from ..limits import split_legacy_units
from . import registry
from .config import BartConfig

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


def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Copy `state` into `model`, refusing missing, unexpected or mis-shaped tensors."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise BundleError(f"{source}: missing tensors {missing[:8]}, unexpected tensors {unexpected[:8]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise BundleError(
                f"{source}: {name} has shape {tuple(tensor.shape)}, expected {tuple(expected[name].shape)}")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()}, strict=True)


def build(kind: str, config: BartConfig, state: dict[str, torch.Tensor], source: str) -> torch.nn.Module:
    return registry.build(kind, config, state, source, load_into)


def read_config(path: Path) -> dict[str, Any]:
    """A checkpoint's config.json as a JSON object, or a BundleError saying what is wrong with it."""
    try:
        config = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BundleError(f"{path} is not valid JSON ({err}); restore the checkpoint's config.json") from None
    if not isinstance(config, dict):
        raise BundleError(f"{path} holds a JSON {type(config).__name__}, not an object; restore it")
    return config


def load_locsum(directory: Path, kind: str | None = None) -> Checkpoint:
    """Our checkpoint directory, as the kind it was saved as, or as `kind` (its weights adapted by that kind)."""
    config = read_config(directory / CONFIG_FILE)
    saved = config.get("kind")
    if not isinstance(saved, str) or saved not in registry.MODEL_KINDS:
        raise BundleError(f"{directory} holds a {saved!r} checkpoint; this locsum loads {sorted(registry.MODEL_KINDS)}")
    kind = kind or saved
    if "model" not in config:
        raise BundleError(f"{directory / CONFIG_FILE} has no 'model' settings; restore it")
    state = read_state_dict(directory / WEIGHTS_FILE)
    model = build(kind, kinds.get(saved).config.from_dict(config["model"]), state, str(directory))
    settings = {k: config[k] for k in ("units", "limits", "generation") if k in config}
    for key, value in settings.items():
        if not isinstance(value, dict):
            raise BundleError(f"{directory / CONFIG_FILE}: '{key}' must be an object, got {type(value).__name__}")
    if "units" in settings:
        settings["units"], legacy = split_legacy_units(settings["units"])
        settings["limits"] = {**legacy, **settings.get("limits", {})}
    if kind != saved and settings.pop("units", None) is not None:
        logging.getLogger("locsum_sdk").info("%s: %s unit options left out (loaded as %s)", directory, saved, kind)
    return Checkpoint(model, tokenizer_beside(directory), settings)


def load_hf_bart(directory: Path, kind: str = "pagesum") -> Checkpoint:
    """An HF BART directory as a model of `kind` (which fills in what BART lacks)."""
    registry.check_formats(kind, "hf-bart")
    config = BartConfig.from_hf(read_config(directory / CONFIG_FILE))
    for name in (WEIGHTS_FILE, "pytorch_model.bin"):
        if (directory / name).is_file():
            state = from_hf_names(read_state_dict(directory / name))
            return Checkpoint(build(kind, config, state, str(directory)), tokenizer_beside(directory))
    raise BundleNotFoundError(f"{directory} has a config.json but neither {WEIGHTS_FILE} nor pytorch_model.bin")


def load_research_state_dict(path: Path, config_path: Path | None = None, kind: str | None = None) -> Checkpoint:
    """A research weights file: the Hierarchical Transformer's (`{'model', 'opt', ...}`, as hiersumm), DYLE's
    (`rag.*` weights, as dyle) or PageSum's (HF BART names and `lin.*`, as `kind`, default pagesum); a BART
    config.json is `config_path` or sits beside the file."""
    try:
        state = read_state_dict(path)
    except BundleError:  # a hiersumm research file holds its options (an argparse.Namespace) beside the weights
        from .hiersumm_research import load_research as load_hiersumm

        return load_hiersumm(path, kind)
    if any(name.startswith("rag.") for name in state):
        from .dyle import load_research

        return load_research(path, state, config_path, kind)
    kind = kind or "pagesum"
    registry.check_formats(kind, "pagesum-research")
    config_path = config_path or path.parent / CONFIG_FILE
    if not config_path.is_file():
        raise BundleNotFoundError(f"{path} needs an HF BART config.json: pass one, or put it beside the file")
    config = BartConfig.from_hf(read_config(config_path))
    model = build(kind, config, from_hf_names(state), str(path))
    return Checkpoint(model, tokenizer_beside(path.parent))


def tokenizer_beside(directory: Path) -> Path | None:
    path = directory / TOKENIZER_FILE
    return path if path.is_file() else None


LOADERS: dict[str, Callable[..., Checkpoint]] = {
    "locsum": load_locsum,
    "hf-bart": load_hf_bart,
    "pagesum-research": load_research_state_dict,
}


def detect_format(path: Path) -> str:
    """Name the loader for `path` (a directory or a weights file)."""
    if path.is_file():
        return "pagesum-research"
    if not (path / CONFIG_FILE).is_file():
        raise BundleNotFoundError(f"{path} is neither a weights file nor a directory with {CONFIG_FILE}")
    return "locsum" if "kind" in read_config(path / CONFIG_FILE) else "hf-bart"


def load_checkpoint(path: str | os.PathLike, config: str | os.PathLike | None = None,
                    kind: str | None = None) -> Checkpoint:
    """Load any supported checkpoint as a model in eval mode.

    Args:
        config: HF config.json for a bare research state dict file.
        kind: the kind to load the checkpoint as (None: the kind our checkpoints were saved as, "pagesum" for
            foreign ones: HF BART, research state dicts); the kind completes or drops weights as it needs.
    """
    path = Path(path)
    if not path.exists():
        raise BundleNotFoundError(f"checkpoint {path} does not exist")
    source = detect_format(path)
    if source == "locsum":
        return load_locsum(path, kind)
    if source == "pagesum-research":
        return load_research_state_dict(path, Path(config) if config else None, kind)
    return LOADERS[source](path, kind or "pagesum")


def save_checkpoint(model: torch.nn.Module, directory: str | os.PathLike,
                    tokenizer_file: str | os.PathLike | None = None, **settings: Any) -> Path:
    """Write our checkpoint format: config.json (kind, model config, settings) + model.safetensors."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(directory / WEIGHTS_FILE))
    config = {"kind": model.kind, "model": model.config.to_dict(), **settings}
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    if tokenizer_file is not None:
        (directory / TOKENIZER_FILE).write_bytes(Path(tokenizer_file).read_bytes())
    return directory
