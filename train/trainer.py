"""One trainer for every kind, on any device and across processes: gradient accumulation, clipping, AdamW with
warmup, bf16 or fp16 autocast (fp16 with a loss scaler), TF32, gradient checkpointing, optional torch.compile,
data loading in worker processes, safetensors checkpoints with optimizer, scaler and RNG state, exact resume,
validation loss, a progress bar and a JSONL log.

Exact resume: the sample order of each epoch is a permutation seeded by (seed, epoch), noise is seeded by
(seed, epoch, index), and every process's torch RNG (dropout; CUDA's too) is saved with every checkpoint; a resumed
run continues the very same sequence of batches and random draws. Checkpoints hold CPU tensors: one written on a
GPU resumes on the CPU and back.

Across processes (`torchrun --nproc-per-node N -m train ...`): torch.distributed's DistributedDataParallel over
the kind's objective (NCCL on GPUs, gloo on CPUs). Each optimizer step takes `grad_accum x N` micro-batches of
`batch_size` in the epoch's order, micro-batch `a x N + rank` on process `rank`, and averages their gradients: the
same step as one process with `grad_accum x N` micro-batches. Process 0 alone logs, validates and writes
checkpoints (with every process's RNG state).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from locsum_sdk.errors import OptionError
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.registry import model_kind

from .batching import Batch
from .config import TrainConfig

logger = logging.getLogger("locsum_sdk.train")

OPTIMIZER_FILE = "optimizer.pt"
SCALER_FILE = "scaler.pt"
STATE_FILE = "trainer.json"
RNG_FILE = "rng.pt"
METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True)
class Processes:
    """This process's place among the training processes (one, unless launched by torchrun)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def join_processes(device: str) -> Processes:
    """torchrun's environment (WORLD_SIZE, RANK, LOCAL_RANK) -> this process in an initialized process group
    (NCCL for CUDA, gloo for the CPU); without it, the one process. A group joined here is left when the
    interpreter exits, before its teardown: a gloo worker thread still alive then aborts the process (SIGABRT,
    "terminate called without an active exception") after training has finished."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Processes()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
        atexit.register(_leave_processes)
    return Processes(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _leave_processes() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def device_type(config: TrainConfig) -> str:
    """The config's device, "cpu" or "cuda" ("auto": CUDA where torch sees a GPU), checked against this machine."""
    wanted = config.device
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise OptionError("device='cuda' but this torch sees no CUDA GPU (a CPU build, or no GPU here); use 'cpu'")
    if config.fp16 and wanted != "cuda":
        raise OptionError("fp16 autocast needs CUDA; on the CPU use bf16 (or neither)")
    return wanted


def to_device(value: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Every tensor of a batch (in dataclass fields, lists, tuples and dicts) on `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=non_blocking)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: to_device(getattr(value, f.name), device, non_blocking)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device, non_blocking) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device, non_blocking) for k, v in value.items()}
    return value


class Objective(torch.nn.Module):
    """The kind's objective as a module, so that DistributedDataParallel sees every parameter the objective uses,
    whichever of the model's methods it calls."""

    def __init__(self, model: torch.nn.Module, objective: Callable, config: TrainConfig):
        super().__init__()
        self.model, self.objective, self.config = model, objective, config

    def forward(self, batch: Any):
        return self.objective(self.model, batch, self.config)


class Chunks(torch.utils.data.Dataset):
    """The micro-batches of one epoch, built on demand (in worker processes when `workers` > 0), in order."""

    def __init__(self, chunks: Sequence[np.ndarray], make: Callable[[np.ndarray], Any]):
        self.chunks, self.make = chunks, make

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, index: int) -> Any:
        return self.make(self.chunks[index])


@dataclass
class Position:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    cursor: int = 0  # samples of this epoch already used
    seconds: float = 0.0  # time spent in training steps, across resumes (`TrainConfig.max_minutes`)


def learning_rate(config: TrainConfig, step: int, seconds: float = 0.0) -> float:
    """The rate of optimizer step `step`, `seconds` into the run's training time. "linear" warms up, then falls to
    zero at `max_steps` or at `max_minutes`, whichever the run reaches first."""
    warm = max(1, config.warmup_steps)
    if config.schedule == "linear":
        if step < warm:
            return config.lr * (step + 1) / warm
        left = (config.max_steps - step) / max(1, config.max_steps - warm)
        if config.max_minutes is not None:
            left = min(left, 1.0 - seconds / (60.0 * config.max_minutes))
        return config.lr * max(0.0, left)
    return config.lr * min((step + 1) / warm, math.sqrt(warm / (step + 1)))


def optimizer_for(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW without weight decay on biases and norms. A parameter whose name starts with a prefix of
    `config.lr_scale` learns at the schedule's rate times that prefix's scale (the longest prefix that matches)."""
    names = [name for name, _ in model.named_parameters()]
    unused = sorted(prefix for prefix in config.lr_scale if not any(name.startswith(prefix) for name in names))
    if unused:
        raise OptionError(f"lr_scale names {unused}, which start no parameter of this model; parameters start with "
                          f"{sorted({name.split('.')[0] for name in names})}")
    groups: dict[tuple[bool, float], list[torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:  # frozen (`TrainConfig.trainable`)
            continue
        decays = not (param.ndim < 2 or "layer_norm" in name or "layernorm" in name)
        matches = [prefix for prefix in config.lr_scale if name.startswith(prefix)]
        scale = float(config.lr_scale[max(matches, key=len)]) if matches else 1.0
        groups.setdefault((decays, scale), []).append(param)
    # unscaled groups first, decaying then not: the order of the checkpoints written before lr_scale, which resume
    order = sorted(groups, key=lambda key: (key[1] != 1.0, not key[0], key[1]))
    return torch.optim.AdamW([{"params": groups[key], "weight_decay": config.weight_decay if key[0] else 0.0,
                               "lr_scale": key[1]} for key in order],
                             lr=config.lr, betas=(0.9, 0.98), eps=1e-6)


class Trainer:
    def __init__(self, config: TrainConfig, model: torch.nn.Module, train_set, val_set=None,
                 tokenizer_file: Path | None = None, progress: bool = True, tokenizer=None,
                 words_file: Path | None = None, common_words_file: Path | None = None):
        kind = device_type(config)
        self.processes = join_processes(kind)
        self.device = torch.device(f"cuda:{self.processes.local_rank}" if kind == "cuda" else "cpu")  # a GPU each
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.backends.cuda.matmul.allow_tf32 = config.tf32
            torch.backends.cudnn.allow_tf32 = config.tf32
        self.config, self.model, self.train_set, self.val_set = config, model.to(self.device), train_set, val_set
        self.tokenizer_file, self.tokenizer, self.words_file = tokenizer_file, tokenizer, words_file
        self.common_words_file = common_words_file
        self.progress = progress and self.processes.main
        if config.gradient_checkpointing:
            for module in model.modules():
                if hasattr(module, "checkpoint_layers"):
                    module.checkpoint_layers = True
        self.optimizer = optimizer_for(model, config)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.fp16)
        self.objective = Objective(torch.compile(model) if config.compile else model,
                                   model_kind(model.kind).objective, config)
        self.step_module: torch.nn.Module = self.objective
        if self.processes.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.step_module = DistributedDataParallel(self.objective, device_ids=ids, find_unused_parameters=True)
        self.hardware = (torch.cuda.get_device_name(self.device) if self.device.type == "cuda"
                         else f"cpu, {torch.get_num_threads()} threads")  # logged with every step
        if config.first_sample >= len(train_set):
            raise OptionError(f"first_sample={config.first_sample} is past the {len(train_set)} training samples; "
                              "give a smaller start or leave it out")
        self.position = Position(cursor=config.first_sample)
        self.run_dir = config.run_dir()
        self.checkpoints = self.run_dir / "checkpoints"
        cfg = model.config
        self.pad, self.start = cfg.pad_token_id, cfg.decoder_start_token_id

    # ---- data -------------------------------------------------------------------------------------------
    def batches(self) -> Iterator[tuple[int, int, Batch]]:
        """This process's micro-batches from the current position on, forever, epoch after epoch: each step of
        the epoch's order holds one micro-batch per process (see the module docstring)."""
        size, world, rank = self.config.batch_size, self.processes.world, self.processes.rank
        epoch, cursor = self.position.epoch, self.position.cursor
        while True:
            order = np.random.default_rng([self.config.seed, epoch]).permutation(len(self.train_set))
            starts = range(cursor, len(order) - size * world + 1, size * world)
            chunks = [order[start + rank * size : start + (rank + 1) * size] for start in starts]
            for start, batch in zip(starts, self._load(chunks, epoch)):
                yield epoch, start + size * world, to_device(batch, self.device, non_blocking=True)
            epoch, cursor = epoch + 1, 0

    def _load(self, chunks: Sequence[np.ndarray], epoch: int) -> Iterator[Batch]:
        def make(chunk: np.ndarray) -> Batch:
            return self.train_set.collate([self.train_set.get(int(i), epoch) for i in chunk], self.pad, self.start)

        if not self.config.workers:
            return map(make, chunks)
        # the loader's own generator seeds its workers: the global RNG (dropout) draws the same with or without them
        seeds = torch.Generator().manual_seed(self.config.seed * 1_000_003 + epoch)
        loader = torch.utils.data.DataLoader(Chunks(chunks, make), batch_size=None, shuffle=False,
                                             num_workers=self.config.workers, generator=seeds,
                                             pin_memory=self.device.type == "cuda")
        return iter(loader)

    def autocast(self):
        dtype = torch.float16 if self.config.fp16 else torch.bfloat16
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.config.bf16 or self.config.fp16)

    def loss(self, batch: Batch, module: torch.nn.Module | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The model kind's objective on one batch: (loss, plain NLL, named parts of the loss (may be empty))."""
        with self.autocast():
            loss, nll, *parts = (module or self.objective)(batch)
        return loss, nll, (parts[0] if parts else {})

    def _mean(self, values: list[float]) -> float:
        """The mean over this step's micro-batches of every process."""
        total = torch.tensor([float(np.sum(values)), float(len(values))], dtype=torch.float64,
                             device=self.device)  # NCCL reduces device tensors alone
        if self.processes.world > 1:
            import torch.distributed as dist

            dist.all_reduce(total)
        return float(total[0] / total[1])

    # ---- loop -------------------------------------------------------------------------------------------
    def train(self, max_steps: int | None = None) -> list[dict]:
        """Train until `max_steps` (default: the config's), resuming from the latest checkpoint if any."""
        config = self.config
        stop = min(max_steps or config.max_steps, config.max_steps)
        self.resume()
        if self.position.step >= stop:
            return []
        batches = self.batches()
        records, window_tokens, window_start = [], 0, time.perf_counter()
        bar = tqdm(total=stop, initial=self.position.step, disable=not self.progress, desc=config.name, unit="step")
        self.step_module.train()
        seconds = self._training_seconds()
        while self.position.step < stop and not self._out_of_time(seconds):
            step, started = self.position.step, time.perf_counter()
            rate = learning_rate(config, step, seconds)
            for group in self.optimizer.param_groups:
                group["lr"] = rate * group.get("lr_scale", 1.0)  # older runs' groups lack it
            losses, nlls, parts = [], [], {}
            for micro in range(config.grad_accum):
                epoch, cursor, batch = next(batches)
                last = micro == config.grad_accum - 1
                sync = contextlib.nullcontext() if last or self.processes.world == 1 else self.step_module.no_sync()
                with sync:
                    loss, nll, named = self.loss(batch, self.step_module)
                    self.scaler.scale(loss / config.grad_accum).backward()
                losses.append(loss.item())
                nlls.append(nll.item())
                for name, value in named.items():
                    parts.setdefault(name, []).append(float(value))
                window_tokens += batch.tokens
            self.scaler.unscale_(self.optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            spent = time.perf_counter() - started
            self.position = Position(step + 1, epoch, cursor, self.position.seconds + spent)
            seconds = self._training_seconds()
            record = {"step": step + 1, "epoch": epoch, "loss": self._mean(losses), "nll": self._mean(nlls),
                      "lr": rate, "grad_norm": float(grad_norm), "seconds": spent, "device": self.hardware,
                      **{f"loss_{name}": self._mean(values) for name, values in sorted(parts.items())}}
            if (step + 1) % config.log_every == 0:
                elapsed = time.perf_counter() - window_start
                record["tokens_per_s"] = self._mean([window_tokens]) * self.processes.world / elapsed
                window_tokens, window_start = 0, time.perf_counter()
            if (self.processes.main and self.val_set is not None and config.eval_every
                    and (step + 1) % config.eval_every == 0):
                record.update(self.validate())
                self.step_module.train()
            if self.processes.main:
                self._log(record)
            records.append(record)
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}")
            if (step + 1) % config.save_every == 0 or step + 1 == stop or self._out_of_time(seconds):
                self.save()
        bar.close()
        return records

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Mean token NLL on the first `val_examples` validation samples; for summarization also their ROUGE
        (generation with the config's decoding options, torch reference backend)."""
        self.model.eval()
        count = min(self.config.val_examples, len(self.val_set))
        samples = [self.val_set.get(index) for index in range(count)]
        batches = [to_device(self.val_set.collate([s], self.pad, self.start), self.device) for s in samples]
        nll = float(np.mean([self.loss(batch)[1].item() for batch in batches]))
        if self.config.objective != "summarize" or self.tokenizer is None:
            return {"val_nll": nll}
        from locsum_sdk.backends.torch import generate_from_ids
        from locsum_sdk.evaluation import rouge_scores
        from locsum_sdk.generation import GenerationOptions

        options = GenerationOptions(**self.config.generation)
        hypotheses = [generate_from_ids(self.model, [self.val_set.inference_units(self.model, s)], options,
                                        device=str(self.device))[0] for s in samples]
        predictions = [self.tokenizer.decode(h.token_ids, skip_special_tokens=True) for h in hypotheses]
        references = [self.val_set.example(index).summary for index in range(count)]
        rows = rouge_scores(predictions, references)
        return {"val_nll": nll, **{f"val_{m}": float(np.mean([r[m] for r in rows])) for m in rows[0]}}

    def _training_seconds(self) -> float:
        """The run's training time at the position, process 0's (every process then agrees on the rate and on the
        time budget's end): one collective a step, and only under a budget."""
        if self.config.max_minutes is None or self.processes.world == 1:  # nothing for processes to agree on
            return self.position.seconds
        import torch.distributed as dist

        seconds = torch.tensor([self.position.seconds], dtype=torch.float64, device=self.device)
        dist.broadcast(seconds, 0)
        return float(seconds[0])

    def _out_of_time(self, seconds: float) -> bool:
        return self.config.max_minutes is not None and seconds >= 60.0 * self.config.max_minutes

    # ---- checkpoints ------------------------------------------------------------------------------------
    def _log(self, record: dict) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / METRICS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def _rng_states(self) -> list[dict[str, Any]]:
        """Every process's RNG state (CPU, and CUDA where used), gathered in rank order."""
        state = {"torch": torch.get_rng_state(),
                 "cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None}
        if self.processes.world == 1:
            return [state]
        import torch.distributed as dist

        states: list[Any] = [None] * self.processes.world
        dist.all_gather_object(states, state)
        return states

    def save(self) -> Path:
        """Write a checkpoint atomically (process 0): a loadable model directory plus optimizer, loss scaler,
        position and every process's RNG state, all on the CPU. A run that trains part of a model started from
        `init_from` (`trainable`) writes only what differs from it (`save_checkpoint(over=...)`)."""
        states = self._rng_states()  # every process takes part; process 0 writes
        final = self.checkpoints / f"step-{self.position.step:07d}"
        if not self.processes.main:
            self._barrier()
            return final
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        work = self.checkpoints / f".{final.name}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        over = self.config.resolve(self.config.init_from) if self.config.init_from and self.config.trainable else None
        save_checkpoint(self.model, work, self.tokenizer_file, self.words_file, self.common_words_file, over=over,
                        units=self.config.paging(), generation=self.config.generation, training=self.config.to_dict())
        for name, source in getattr(self.train_set, "checkpoint_files", {}).items():
            shutil.copyfile(source, work / name)
        torch.save(to_device(self.optimizer.state_dict(), torch.device("cpu")), work / OPTIMIZER_FILE)
        if self.config.fp16:
            torch.save(self.scaler.state_dict(), work / SCALER_FILE)
        torch.save({"ranks": states}, work / RNG_FILE)
        (work / STATE_FILE).write_text(json.dumps(self.position.__dict__))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(work, final)
        for old in sorted(self.checkpoints.glob("step-*"))[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)
        self._barrier()
        return final

    def _barrier(self) -> None:
        if self.processes.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def latest(self) -> Path | None:
        found = sorted(self.checkpoints.glob("step-*")) if self.checkpoints.is_dir() else []
        return found[-1] if found else None

    def resume(self) -> None:
        """Restore model, optimizer, position and RNG from the latest checkpoint; drop log lines past it (all of
        them where there is none: a run cut before its first checkpoint starts over)."""
        latest = self.latest()
        if latest is None:
            self._keep_log(0)
            return
        from locsum_sdk.modeling.checkpoint import checkpoint_state
        from locsum_sdk.modeling.weights import load_into

        load_into(self.model, checkpoint_state(latest), str(latest))
        # map to the CPU first: a checkpoint written on a GPU resumes on the CPU and back (load_state_dict moves
        # the optimizer's state to each parameter's device)
        self.optimizer.load_state_dict(torch.load(latest / OPTIMIZER_FILE, map_location="cpu", weights_only=True))
        if self.config.fp16 and (latest / SCALER_FILE).is_file():
            self.scaler.load_state_dict(torch.load(latest / SCALER_FILE, weights_only=True))
        self._restore_rng(torch.load(latest / RNG_FILE, map_location="cpu", weights_only=True), latest)
        self.position = Position(**json.loads((latest / STATE_FILE).read_text()))
        self._keep_log(self.position.step)
        logger.info("resumed %s at step %d", self.config.name, self.position.step)

    def _keep_log(self, step: int) -> None:
        """Drop the metrics log's lines past `step`: steps a cut run took after its last checkpoint are taken again."""
        log = self.run_dir / METRICS_FILE
        if log.is_file() and self.processes.main:
            kept = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= step]
            log.write_text("".join(line + "\n" for line in kept))

    def _restore_rng(self, saved: dict[str, Any], where: Path) -> None:
        """This process's RNG state from a checkpoint (one written before process counts were saved holds the one
        process's CPU state)."""
        states = saved.get("ranks", [{"torch": saved.get("torch"), "cuda": None}])
        if len(states) != self.processes.world:
            logger.warning("%s was written by %d processes, this run has %d: dropout draws restart from the "
                           "checkpoint's first process's state", where, len(states), self.processes.world)
        state = states[self.processes.rank if len(states) == self.processes.world else 0]
        torch.set_rng_state(state["torch"])
        if state.get("cuda") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda"], self.device)
