"""The torch side of each kind, registered under the kind's name (the runtime side is `locsum_sdk.kinds`).

A kind's entry says which module class it builds from a `BartConfig`, how weights a source format lacks are filled
in, which graphs it exports (wrapper modules, example inputs; names and axes come from the runtime declaration) and
which `locsum`-domain function each graph must hold, how its custom ops export, and the objective it trains with
(cross-entropy unless it says otherwise). A kind's modeling module also registers the loaders of the weights-file
formats it owns (its research checkpoints): `checkpoint.py` only detects a file's format and calls the loader
registered for it.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..configs.llama import LlamaConfig
from ..configs.model import BartConfig
from ..errors import BundleError, OptionError
from .objectives import cross_entropy
from .weights import Checkpoint, WeightsFile, load_into

State = dict[str, torch.Tensor]
Objective = Callable[[nn.Module, Any, Any], tuple]


@dataclass(frozen=True)
class ModelKind:
    """A kind's modeling and export, as the torch side knows it."""

    name: str
    model: Callable[[BartConfig], nn.Module]  # the module of this kind (it has `.kind` and `.config`)
    complete: Callable[[BartConfig, State, str], State]  # fill what a source lacks (e.g. a new head), or refuse
    graphs: Callable[[nn.Module], dict[str, Any]]  # graph name -> `graphs.GraphSpec`, in export order
    functions: dict[str, str]  # graph name -> the locsum-domain function the exported graph must hold
    register_symbolics: Callable[[int], None]  # make its custom ops export as locsum-domain functions
    formats: tuple[str, ...] = field(default=())  # source formats it loads, besides our own checkpoints
    objective: Objective = cross_entropy  # (module, batch, training config) -> (loss, plain NLL[, parts]) in training
    llama_functions: dict[str, str] | None = None  # `functions` on a Llama backbone, where they differ

    def functions_of(self, model: nn.Module) -> dict[str, str]:
        """The locsum-domain function each of `model`'s graphs must hold, on its backbone."""
        on_llama = isinstance(model.config, LlamaConfig) and self.llama_functions is not None
        return self.llama_functions if on_llama else self.functions


MODEL_KINDS: dict[str, ModelKind] = {}


def register(kind: ModelKind) -> ModelKind:
    if kind.name in MODEL_KINDS:
        raise ValueError(f"model kind {kind.name!r} is registered twice")
    MODEL_KINDS[kind.name] = kind
    return kind


def model_kind(name: object) -> ModelKind:
    if not isinstance(name, str) or name not in MODEL_KINDS:
        raise OptionError(f"kind {name!r} has no model here; known kinds are {sorted(MODEL_KINDS)}")
    return MODEL_KINDS[name]


def build(kind: str, config: BartConfig, state: State, source: str, assign: bool = False) -> nn.Module:
    """A model of `kind` with `state`'s weights (completed by the kind), every name and shape checked. With
    `assign`, the model is made without weights of its own and holds `state`'s tensors themselves (no copy: one
    model's memory where a copy would need two); the state must then hold every tensor of the model, buffers
    included, and no two of its names may be one tensor."""
    entry = model_kind(kind)
    with torch.device("meta") if assign else contextlib.nullcontext():
        model = entry.model(config)
    load_into(model, entry.complete(config, state, source), source, assign=assign)
    return model.eval()


@dataclass(frozen=True)
class Loader:
    """The loader of one weights-file format: `claims(file)` says whether a file read once (`WeightsFile`) is in
    this format; `load(file, config_path, kind)` returns the checkpoint as `kind` (None: the format's own kind)."""

    format: str
    claims: Callable[[WeightsFile], bool]
    load: Callable[[WeightsFile, Any, str | None], Checkpoint]
    fallback: bool = False  # asked only when no other loader claims the file (a plain HF-named state dict)


LOADERS: dict[str, Loader] = {}


def register_loader(loader: Loader) -> Loader:
    if loader.format in LOADERS:
        raise ValueError(f"weights format {loader.format!r} is registered twice")
    LOADERS[loader.format] = loader
    return loader


def file_loader(file: WeightsFile) -> Loader:
    """The registered loader that claims `file`: a specific format first, a fallback last."""
    for loader in sorted(LOADERS.values(), key=lambda entry: entry.fallback):
        if loader.claims(file):
            return loader
    reason = f" ({file.error})" if file.error else ""
    raise BundleError(f"{file.path} is in no weights format this locsum reads{reason}; formats: {sorted(LOADERS)}")


def _register_all() -> None:
    """Every runtime kind's torch side is `locsum_sdk.modeling.<kind>`, with a `register_model_kind()`."""
    from .. import kinds

    for name in kinds.names():
        importlib.import_module(f"{__package__}.{name}").register_model_kind()


def check_formats(kind: str, source_format: str) -> None:
    entry = model_kind(kind)
    if source_format != "locsum" and source_format not in entry.formats:
        raise BundleError(
            f"a {source_format} checkpoint cannot be loaded as {kind}; {kind} loads our checkpoints and "
            f"{list(entry.formats)}"
        )


_register_all()
