"""Training by kind: `train/kinds/<kind>.py`, for a kind that needs more than its units and a summary (DYLE's
oracle snippets and extractor chunks), defines `training_set(paths, pager, tokenizer, config, split)` and may define
`prepare_model(model, config)` (e.g. an extractor from another pretrained encoder),
`denoising_set(segments, special, mask_id, seed, config)` (the "denoise" objective's data laid out as the kind reads
its input) and `selection_report(summarizer, data, limit)` (how its selection stage ranks, for the model card),
and names the `objective_options` it reads in `OBJECTIVE_OPTIONS` (a kind without them accepts none); every other
kind trains on `SummarizationSet` and `DenoisingSet`. A data set gives `get`, `example`, `collate` and
`inference_units`."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path

from locsum_sdk.errors import OptionError
from locsum_sdk.units import Pager
from locsum_sdk.validation import check_keys

from ..config import TrainConfig
from ..data import SummarizationSet
from ..noise import DenoisingSet


def _hook(kind: str, name: str) -> Callable | None:
    """`train/kinds/<kind>.py`'s function `name`, or None where the kind has no such module or function."""
    if importlib.util.find_spec(f"{__name__}.{kind}") is None:
        return None
    return getattr(importlib.import_module(f"{__name__}.{kind}"), name, None)


def check_objective_options(kind: str, options: dict) -> None:
    """`options` names nothing `kind` does not read (`OBJECTIVE_OPTIONS` of its training module): a typo fails
    before any model or data is loaded instead of training without the setting."""
    known = _hook(kind, "OBJECTIVE_OPTIONS") or ()
    check_keys(f"objective_options of kind {kind!r}", options, known, error=OptionError)


def training_set(kind: str, paths: Sequence[Path], pager: Pager, tokenizer, config: TrainConfig, split: str):
    """The data set of `kind` over `paths` (`split`: "train" or "val", kept apart in any cache)."""
    own = _hook(kind, "training_set")
    keep = config.units.get("keep_pages", "first")
    if own is not None:
        if keep != "first":
            raise OptionError(f"units.keep_pages={keep!r}: {kind} chooses the units a training example keeps its own "
                              "way; leave keep_pages out")
        return own(paths, pager, tokenizer, config, split)
    return SummarizationSet(paths, pager, tokenizer, config.max_target_tokens, config.units.get("max_pages"),
                            keep if split == "train" else "first")


def denoising_set(kind: str, segments: list, special, mask_id: int, seed: int, config: TrainConfig):
    """The "denoise" objective's data for `kind`: BART's noise over `segments`, one unit per segment unless the kind
    lays its input out otherwise."""
    own = _hook(kind, "denoising_set")
    if own is not None:
        return own(segments, special, mask_id, seed, config)
    return DenoisingSet(segments, special.bos, special.eos, mask_id, seed)


def prepare_model(kind: str, model, config: TrainConfig):
    """The model as `kind`'s training module prepares it before training (unchanged for most kinds)."""
    own = _hook(kind, "prepare_model")
    return model if own is None else own(model, config)


def selection_report(kind: str, summarizer, data: Path, limit: int | None) -> dict | None:
    """How `kind`'s selection stage ranks the units of `data` for the model card: {"title", "cutoff" (a label
    pattern such as "R@{}"), "report": {ranking: {cutoff: mean, low, high, examples}}}; None for kinds without one."""
    own = _hook(kind, "selection_report")
    return None if own is None else own(summarizer, data, limit)
