"""Load any supported checkpoint: detect its format and call the loader registered for it.

Directories: our own checkpoint (`config.json` with a `kind`, `model.safetensors`), an HF directory of a
Llama-family LLM (`llm_checkpoint`) and an HF BART directory (`config.json` + `model.safetensors` or
`pytorch_model.bin`). Files: a GGUF (by its magic) is an LLM (`llm_checkpoint`); other weights files are read once, then
handed to the loader whose format claims them; each kind's modeling module registers the formats it owns
(`registry.register_loader`): PageSum's research state dict (HF BART keys with `lin.weight [1, d]`, `lin.bias
[1]`), DYLE's research files (`rag.*`), the Hierarchical Transformer's research checkpoints. Nothing is ever
unpickled: safetensors or `torch.load(weights_only=True)` only (`weights.py`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from .. import kinds
from ..configs.model import BartConfig
from ..constants import COMMON_WORDS_FILE, WORDS_FILE
from ..errors import BundleError, BundleNotFoundError, OptionError
from ..limits import split_legacy_units
from . import registry
from .weights import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    Checkpoint,
    WeightsFile,
    from_hf_names,
    read_config,
    read_state_dict,
    tokenizer_beside,
)


def load_locsum(directory: Path, kind: str | None = None) -> Checkpoint:
    """Our checkpoint directory, as the kind it was saved as, or as `kind` (its weights adapted by that kind)."""
    config = read_config(directory / CONFIG_FILE)
    saved = config.get("kind")
    if not isinstance(saved, str) or saved not in registry.MODEL_KINDS:
        raise BundleError(f"{directory} holds a {saved!r} checkpoint; this locsum loads {sorted(registry.MODEL_KINDS)}")
    kind = kind or saved
    if "model" not in config:
        raise BundleError(f"{directory / CONFIG_FILE} has no 'model' settings; restore it")
    state = checkpoint_state(directory, config)
    model = registry.build(kind, kinds.get(saved).model_config(config["model"]), state, str(directory))
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


OVER = "over"  # config.json key of a checkpoint that holds only its changes over another one (`save_checkpoint`)


def checkpoint_state(directory: Path, config: dict[str, Any] | None = None, seen: tuple[Path, ...] = ()
                     ) -> dict[str, torch.Tensor]:
    """The weights of our checkpoint at `directory`: its own tensors over those of the checkpoint it names as
    `over` (and that one's, in turn), when it holds only its changes."""
    config = read_config(directory / CONFIG_FILE) if config is None else config
    state = read_state_dict(directory / WEIGHTS_FILE)
    over = config.get(OVER)
    if over is None:
        return state
    if not isinstance(over, str):
        raise BundleError(f"{directory / CONFIG_FILE}: {OVER!r} must name a checkpoint directory")
    base = Path(over)
    if base.resolve() in seen or base.resolve() == directory.resolve():
        raise BundleError(f"{directory}: the checkpoints it holds changes over lead back to it")
    if not (base / CONFIG_FILE).is_file():
        raise BundleNotFoundError(f"{directory} holds only its changes over {base}, which is missing; restore it or "
                                  "save the checkpoint whole")
    return {**checkpoint_state(base, None, (*seen, directory.resolve())), **state}


def load_hf_bart(directory: Path, kind: str = "pagesum") -> Checkpoint:
    """An HF BART directory as a model of `kind` (which fills in what BART lacks)."""
    registry.check_formats(kind, "hf-bart")
    config = BartConfig.from_hf(read_config(directory / CONFIG_FILE))
    for name in (WEIGHTS_FILE, "pytorch_model.bin"):
        if (directory / name).is_file():
            state = from_hf_names(read_state_dict(directory / name))
            return Checkpoint(registry.build(kind, config, state, str(directory)), tokenizer_beside(directory))
    raise BundleNotFoundError(f"{directory} has a config.json but neither {WEIGHTS_FILE} nor pytorch_model.bin")


def detect_format(path: Path) -> str:
    """The format of a checkpoint directory: "locsum" (ours), "llm" (an HF Llama-family model) or "hf-bart"."""
    from ..llm import is_llm

    if not (path / CONFIG_FILE).is_file():
        raise BundleNotFoundError(f"{path} is neither a weights file nor a directory with {CONFIG_FILE}")
    if "kind" in read_config(path / CONFIG_FILE):
        return "locsum"
    return "llm" if is_llm(path) else "hf-bart"


def load_checkpoint(path: str | os.PathLike, config: str | os.PathLike | None = None,
                    kind: str | None = None, instruction: Any = None) -> Checkpoint:
    """Load any supported checkpoint as a model in eval mode.

    Args:
        config: HF config.json for a bare research state dict file.
        kind: the kind to load the checkpoint as (None: the kind our checkpoints were saved as, "pagesum" for
            foreign ones: HF BART, research state dicts; "hierencdec" for an LLM); the kind completes or drops
            weights as it needs.
        instruction: an LLM's `llm.Instruction` (what each unit's turn asks); refused for other checkpoints.
    """
    from ..llm import is_gguf
    from .llm_checkpoint import load_llm

    path = Path(path)
    if not path.exists():
        raise BundleNotFoundError(f"checkpoint {path} does not exist")
    if path.is_file() and is_gguf(path):
        return load_llm(path, kind, instruction)
    found = "file" if path.is_file() else detect_format(path)
    if instruction is not None and found != "llm":
        raise OptionError(f"{path} is not an LLM (an HF Llama-family directory or a GGUF file); an instruction "
                          "frames an LLM's units only")
    if found == "file":
        file = WeightsFile.read(path)
        return registry.file_loader(file).load(file, Path(config) if config else None, kind)
    if found == "locsum":
        return load_locsum(path, kind)
    if found == "llm":
        return load_llm(path, kind, instruction)
    return load_hf_bart(path, kind or "pagesum")


def save_checkpoint(model: torch.nn.Module, directory: str | os.PathLike,
                    tokenizer_file: str | os.PathLike | None = None, words_file: str | os.PathLike | None = None,
                    common_words_file: str | os.PathLike | None = None, over: str | os.PathLike | None = None,
                    **settings: Any) -> Path:
    """Write our checkpoint format: config.json (kind, model config, settings) + model.safetensors, and copies of
    the tokenizer and the word list (`locsum_sdk.words`) when given. With `over` (a checkpoint of ours), only the
    tensors that differ from its weights, or that it lacks, are written (a fine-tune of a few adapters writes
    megabytes, not the whole model); loading reads the rest from it."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    extra = {}
    if over is not None:
        base = checkpoint_state(Path(over))
        state = {k: v for k, v in state.items()
                 if k not in base or base[k].shape != v.shape or not torch.equal(base[k].to(v.dtype), v)}
        extra = {OVER: str(Path(over).resolve())}
    save_file(state, str(directory / WEIGHTS_FILE))
    config = {"kind": model.kind, "model": model.config.to_dict(), **extra, **settings}
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    if tokenizer_file is not None:
        (directory / TOKENIZER_FILE).write_bytes(Path(tokenizer_file).read_bytes())
    for file, name in ((words_file, WORDS_FILE), (common_words_file, COMMON_WORDS_FILE)):
        if file is not None:
            (directory / name).write_bytes(Path(file).read_bytes())
    return directory
