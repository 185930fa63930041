"""Training configuration: a dataclass read from a TOML file in train/configs/ and stored in every checkpoint."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locsum_sdk.errors import OptionError
from locsum_sdk.validation import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_keys,
    check_mapping,
    check_str,
)

#: `$DATA` in configs, and the sets `train.release` and `train.compare` read: the folder LOCSUM_DATA names, else the
#: repository's ../shared/data
DATA = Path(os.environ.get("LOCSUM_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data").expanduser()
BASE = "base"  # a config file may name another one (relative to itself) whose values it changes
TRAINING_UNITS = ("max_pages", "keep_pages")  # `units` keys that only training reads
KEEP_PAGES = ("first", "summary")


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
    # pages a training example keeps, a training-only cap on memory, and `keep_pages`: which ones ("first", or
    # "summary": those closest to the reference summary by tf-idf, in their order; training examples only)
    generation: dict[str, Any] = field(default_factory=dict)  # saved with the model, used for ROUGE
    seed: int = 0
    first_sample: int = 0  # where in epoch 0's sample order the run starts: a later stage on the same files and seed
    # reads the samples its earlier stages did not (each stage read steps x batch_size x grad_accum of them)
    batch_size: int = 4  # samples per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    max_steps: int = 1000
    max_minutes: float | None = None  # training time budget: stop (resumably, saved) once the run has trained this
    # long in all, across resumes; the linear schedule then reaches zero at whichever of the two comes first
    lr: float = 5e-4
    lr_scale: dict[str, float] = field(default_factory=dict)  # parameter-name prefix -> multiple of the schedule's rate
    warmup_steps: int = 100
    schedule: str = "inverse_sqrt"  # or "linear" (to zero at max_steps)
    weight_decay: float = 0.01
    clip: float = 1.0
    label_smoothing: float = 0.1
    lora: dict[str, Any] = field(default_factory=dict)  # low-rank adapters on the backbone: { rank, alpha }
    trainable: list[str] = field(default_factory=list)  # glob patterns of the parameters trained (none: all)
    objective_options: dict[str, Any] = field(default_factory=dict)  # the kind's objective's own settings (DYLE:
    # loss_weights by term, hybrid)
    bf16: bool = True  # autocast matmuls to bfloat16 (CPU AMX / AVX-512 BF16, GPUs from Ampere on)
    fp16: bool = False  # CUDA only: autocast to float16 with a dynamic loss scaler (instead of bf16)
    device: str = "auto"  # "cpu", "cuda" or "auto" (cuda where torch sees a GPU)
    tf32: bool = True  # CUDA: TF32 tensor-core matmuls for float32 work
    gradient_checkpointing: bool = False  # encoders keep each layer's input alone and recompute it in backward
    compile: bool = False  # torch.compile the model (its forward; the objective's other calls run eagerly)
    workers: int = 0  # data-loading worker processes (batches are built in order whatever their number)
    segment_tokens: int = 448  # "denoise": tokens per pretraining segment
    max_target_tokens: int = 256  # "summarize": summary tokens kept, eos included (cut at a sentence end)
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
        """The `PagingOptions` of `units` (without the training-only `max_pages` and `keep_pages`)."""
        return {k: v for k, v in self.units.items() if k not in TRAINING_UNITS}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        check_keys("training config", values, [f.name for f in dataclasses.fields(cls)], error=OptionError)
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                   and f.name not in values]
        if missing:
            raise OptionError(f"training config has no {missing}; every config names them (see train/configs/)")
        config = cls(**values)
        _check_fields(config)
        return config

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> TrainConfig:
        """The config of a TOML file: with `base = "other.toml"`, that file's values, which this one's replace
        (tables, such as [model], key by key)."""
        return cls.from_dict({**read_values(Path(path)), **overrides})

    def resolve(self, path: str) -> Path:
        """Paths in configs are relative to the repository; `$DATA` is `DATA`."""
        text = path.replace("$DATA", str(DATA))
        candidate = Path(text).expanduser()
        return candidate if candidate.is_absolute() else Path(__file__).resolve().parents[1] / candidate


def read_values(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's values over those of its `base` (and its base's, in turn)."""
    path = path.resolve()
    if path in seen:
        raise OptionError(f"{path.name}: its bases lead back to it ({' -> '.join(p.name for p in (*seen, path))})")
    values = tomllib.loads(path.read_text())
    if BASE not in values:
        return values
    base = values.pop(BASE)
    check_str(BASE, base)
    inherited = read_values(path.parent / base, (*seen, path))
    merged = {key: {**inherited[key], **value} if isinstance(value, dict) and isinstance(inherited.get(key), dict)
              else value for key, value in values.items()}
    return {**inherited, **merged}


def check_adapter_fields(lora: Any, trainable: Any) -> None:
    """The config's `lora` table and `trainable` list have their types."""
    if not isinstance(lora, dict) or (lora and "rank" not in lora) or set(lora) - {"rank", "alpha"}:
        raise OptionError(f"lora={lora!r}: a table {{ rank = R, alpha = A }} (alpha defaults to 2R), or none")
    if lora and (isinstance(lora["rank"], bool) or not isinstance(lora["rank"], int) or lora["rank"] < 1
                 or isinstance(lora.get("alpha", 1.0), bool) or not isinstance(lora.get("alpha", 1.0), (int, float))
                 or not 0 < lora.get("alpha", 1.0) < float("inf")):
        raise OptionError(f"lora={lora!r}: rank is a positive integer and alpha a positive number")
    if not isinstance(trainable, list) or not all(isinstance(p, str) and p for p in trainable):
        raise OptionError(f"trainable={trainable!r}: a list of parameter-name patterns, e.g. [\"*.lora_a\", "
                          "\"*.lora_b\"]")


def _check_fields(config: TrainConfig) -> None:
    """Each field has its type and range: a TOML typo stops the run here, before anything loads."""
    check_str("name", config.name)
    if not config.name.strip() or Path(config.name).name != config.name or config.name in (".", ".."):
        raise OptionError(f"name={config.name!r}: the run's directory name, one path component (no '/')")
    check_choice("objective", config.objective, ("denoise", "summarize"))
    check_choice("schedule", config.schedule, ("inverse_sqrt", "linear"))
    for name in ("tokenizer", "kind", "output"):
        check_str(name, getattr(config, name))
    check_str("init_from", config.init_from, optional=True)
    for name in ("train_files", "val_files"):
        files = getattr(config, name)
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise OptionError(f"{name}={files!r}: a list of JSON Lines paths, e.g. [\"$DATA/qmsum/train.jsonl\"]")
    if not config.train_files:
        raise OptionError("train_files is empty: name at least one JSON Lines file of training examples")
    for name in ("model", "units", "generation", "objective_options"):
        check_mapping(name, getattr(config, name))
    check_int("units.max_pages", config.units.get("max_pages"), 1, optional=True)
    check_choice("units.keep_pages", config.units.get("keep_pages", "first"), KEEP_PAGES)
    check_adapter_fields(config.lora, config.trainable)
    if not isinstance(config.lr_scale, dict):
        raise OptionError(f"lr_scale={config.lr_scale!r}: a table of parameter-name prefixes and scales, e.g. "
                          '{ "extractor.classifier." = 100.0 }')
    bad = {prefix: scale for prefix, scale in config.lr_scale.items()
           if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf}
    if bad:
        raise OptionError(f"lr_scale {bad}: each scale is a positive, finite number")
    for name in ("batch_size", "grad_accum", "max_steps", "log_every", "save_every", "keep_checkpoints",
                 "segment_tokens", "max_target_tokens"):
        check_int(name, getattr(config, name), 1)
    for name in ("seed", "first_sample", "warmup_steps", "eval_every", "val_examples"):
        check_int(name, getattr(config, name), 0)
    check_int("vocab_size", config.vocab_size, 261)  # the byte alphabet and five specials
    check_float("weight_decay", config.weight_decay, 0.0)
    check_float("max_minutes", config.max_minutes, 0.0, optional=True)
    if config.max_minutes == 0:
        raise OptionError("max_minutes=0 leaves no time to train; give a positive number of minutes or leave it out")
    check_float("label_smoothing", config.label_smoothing, 0.0, 0.99)
    for name in ("lr", "clip"):  # clip 0 would zero every gradient, not turn clipping off
        value = getattr(config, name)
        check_float(name, value, 0.0)
        if value == 0:
            raise OptionError(f"{name}=0 is not accepted; {name} must be a finite number > 0")
    for name in ("bf16", "fp16", "tf32", "gradient_checkpointing", "compile"):
        check_bool(name, getattr(config, name))
    check_choice("device", config.device, ("auto", "cpu", "cuda"))
    check_int("workers", config.workers, 0)
    if config.bf16 and config.fp16:
        raise OptionError("bf16 and fp16 are both true; choose one autocast precision (fp16 needs CUDA)")
