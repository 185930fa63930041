"""Training configuration: a dataclass read from a TOML file in train/configs/ and stored in every checkpoint."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locsum_sdk.errors import OptionError
from locsum_sdk.validation import check_keys

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@dataclass(frozen=True)
class TrainConfig:
    name: str  # run name: checkpoints go to <output>/<name>
    objective: str  # "denoise" (BART pretraining) or "summarize" (fine-tuning)
    model: dict[str, Any]  # BartConfig fields (ignored when init_from is set)
    tokenizer: str  # tokenizer.json (trained first if it does not exist)
    train_files: list[str]  # JSON Lines files (train splits only)
    val_files: list[str] = field(default_factory=list)
    init_from: str | None = None  # checkpoint directory to start from (fine-tuning)
    kind: str = "pagesum"  # the model kind trained (a registered kind)
    output: str = "~/.cache/locsum/runs"
    units: dict[str, Any] = field(default_factory=dict)  # PagingOptions for "summarize", plus `max_pages`: the
    # pages a training example keeps (its first ones), a training-only cap on memory
    generation: dict[str, Any] = field(default_factory=dict)  # saved with the model, used for ROUGE
    seed: int = 0
    batch_size: int = 4  # samples per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    max_steps: int = 1000
    lr: float = 5e-4
    lr_scale: dict[str, float] = field(default_factory=dict)  # parameter-name prefix -> multiple of the schedule's rate
    warmup_steps: int = 100
    schedule: str = "inverse_sqrt"  # or "linear" (to zero at max_steps)
    weight_decay: float = 0.01
    clip: float = 1.0
    label_smoothing: float = 0.1
    objective_options: dict[str, Any] = field(default_factory=dict)  # the kind's objective's own settings (DYLE:
    # loss_weights by term, hybrid)
    bf16: bool = True  # autocast matmuls to bfloat16 (CPU AMX / AVX-512 BF16)
    segment_tokens: int = 448  # "denoise": tokens per pretraining segment
    max_target_tokens: int = 256  # "summarize": summary tokens kept
    vocab_size: int = 8192  # when the tokenizer has to be trained
    log_every: int = 10
    eval_every: int = 200
    save_every: int = 100
    val_examples: int = 32  # validation loss / ROUGE subset
    keep_checkpoints: int = 2

    def run_dir(self) -> Path:
        return Path(self.output).expanduser() / self.name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def paging(self) -> dict[str, Any]:
        """The `PagingOptions` of `units` (without the training-only `max_pages`)."""
        return {k: v for k, v in self.units.items() if k != "max_pages"}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        check_keys("training config", values, [f.name for f in dataclasses.fields(cls)], error=OptionError)
        config = cls(**values)
        if config.objective not in ("denoise", "summarize"):
            raise ValueError(f"objective={config.objective!r}: use 'denoise' or 'summarize'")
        if config.schedule not in ("inverse_sqrt", "linear"):
            raise ValueError(f"schedule={config.schedule!r}: use 'inverse_sqrt' or 'linear'")
        if not isinstance(config.lr_scale, dict):
            raise OptionError(f"lr_scale={config.lr_scale!r}: a table of parameter-name prefixes and scales, e.g. "
                              '{ "extractor.classifier." = 100.0 }')
        bad = {prefix: scale for prefix, scale in config.lr_scale.items()
               if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf}
        if bad:
            raise OptionError(f"lr_scale {bad}: each scale is a positive, finite number")
        return config

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> TrainConfig:
        values = tomllib.loads(Path(path).read_text())
        return cls.from_dict({**values, **overrides})

    def resolve(self, path: str) -> Path:
        """Paths in configs are relative to the repository; `$DATA` is ../shared/data."""
        text = path.replace("$DATA", str(DATA))
        candidate = Path(text).expanduser()
        return candidate if candidate.is_absolute() else Path(__file__).resolve().parents[1] / candidate
