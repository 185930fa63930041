"""Training data by kind: `train/kinds/<kind>.py`, for a kind that needs more than its units and a summary (DYLE's
oracle snippets and extractor chunks), defines `training_set(paths, pager, tokenizer, config, split)`; every other
kind trains on `SummarizationSet`. A data set gives `get`, `example`, `collate` and `inference_units`."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Sequence

from locsum_sdk.units import Pager

from ..config import TrainConfig
from ..data import SummarizationSet


def training_set(kind: str, paths: Sequence[Path], pager: Pager, tokenizer, config: TrainConfig, split: str):
    """The data set of `kind` over `paths` (`split`: "train" or "val", kept apart in any cache)."""
    if importlib.util.find_spec(f"{__name__}.{kind}") is not None:
        return importlib.import_module(f"{__name__}.{kind}").training_set(paths, pager, tokenizer, config, split)
    return SummarizationSet(paths, pager, tokenizer, config.max_target_tokens, config.units.get("max_pages"))
