"""One trainer for every kind: gradient accumulation, clipping, AdamW with warmup, bf16 autocast, safetensors
checkpoints with optimizer and RNG state, exact resume, validation loss, a progress bar and a JSONL log.

Exact resume: the sample order of each epoch is a permutation seeded by (seed, epoch), noise is seeded by
(seed, epoch, index), and the torch RNG (dropout) is saved with every checkpoint; a resumed run continues the
very same sequence of batches and random draws.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
STATE_FILE = "trainer.json"
RNG_FILE = "rng.pt"
METRICS_FILE = "metrics.jsonl"


@dataclass
class Position:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    cursor: int = 0  # samples of this epoch already used


def learning_rate(config: TrainConfig, step: int) -> float:
    warm = max(1, config.warmup_steps)
    if config.schedule == "linear":
        if step < warm:
            return config.lr * (step + 1) / warm
        return config.lr * max(0.0, (config.max_steps - step) / max(1, config.max_steps - warm))
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
                 tokenizer_file: Path | None = None, progress: bool = True, tokenizer=None):
        self.config, self.model, self.train_set, self.val_set = config, model, train_set, val_set
        self.tokenizer_file, self.progress, self.tokenizer = tokenizer_file, progress, tokenizer
        self.optimizer = optimizer_for(model, config)
        self.objective = model_kind(model.kind).objective
        self.position = Position()
        self.run_dir = config.run_dir()
        self.checkpoints = self.run_dir / "checkpoints"
        cfg = model.config
        self.pad, self.start = cfg.pad_token_id, cfg.decoder_start_token_id

    # ---- data -------------------------------------------------------------------------------------------
    def batches(self) -> Iterator[tuple[int, int, Batch]]:
        """Batches from the current position on, forever, epoch after epoch."""
        size, epoch, cursor = self.config.batch_size, self.position.epoch, self.position.cursor
        while True:
            order = np.random.default_rng([self.config.seed, epoch]).permutation(len(self.train_set))
            while cursor + size <= len(order):
                samples = [self.train_set.get(int(i), epoch) for i in order[cursor : cursor + size]]
                cursor += size
                yield epoch, cursor, self.train_set.collate(samples, self.pad, self.start)
            epoch, cursor = epoch + 1, 0

    def loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The model kind's objective on one batch: (loss, plain NLL, named parts of the loss (may be empty))."""
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.config.bf16):
            loss, nll, *parts = self.objective(self.model, batch, self.config)
        return loss, nll, (parts[0] if parts else {})

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
        self.model.train()
        while self.position.step < stop:
            step, started = self.position.step, time.perf_counter()
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate(config, step) * group.get("lr_scale", 1.0)  # older runs' groups lack it
            losses, nlls, parts = [], [], {}
            for _ in range(config.grad_accum):
                epoch, cursor, batch = next(batches)
                loss, nll, named = self.loss(batch)
                (loss / config.grad_accum).backward()
                losses.append(loss.item())
                nlls.append(nll.item())
                for name, value in named.items():
                    parts.setdefault(name, []).append(float(value))
                window_tokens += batch.tokens
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.position = Position(step + 1, epoch, cursor)
            record = {"step": step + 1, "epoch": epoch, "loss": float(np.mean(losses)), "nll": float(np.mean(nlls)),
                      "lr": learning_rate(config, step), "grad_norm": float(grad_norm),
                      "seconds": time.perf_counter() - started,
                      **{f"loss_{name}": float(np.mean(values)) for name, values in parts.items()}}
            if (step + 1) % config.log_every == 0:
                elapsed = time.perf_counter() - window_start
                record["tokens_per_s"] = window_tokens / elapsed
                window_tokens, window_start = 0, time.perf_counter()
            if self.val_set is not None and config.eval_every and (step + 1) % config.eval_every == 0:
                record.update(self.validate())
                self.model.train()
            self._log(record)
            records.append(record)
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}")
            if (step + 1) % config.save_every == 0 or step + 1 == stop:
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
        nll = float(np.mean([self.loss(self.val_set.collate([s], self.pad, self.start))[1].item()
                             for s in samples]))
        if self.config.objective != "summarize" or self.tokenizer is None:
            return {"val_nll": nll}
        from locsum_sdk.backends.torch import generate_from_ids
        from locsum_sdk.evaluation import rouge_scores
        from locsum_sdk.generation import GenerationOptions

        options = GenerationOptions(**self.config.generation)
        hypotheses = [generate_from_ids(self.model, [self.val_set.inference_units(self.model, s)], options)[0]
                      for s in samples]
        predictions = [self.tokenizer.decode(h.token_ids, skip_special_tokens=True) for h in hypotheses]
        references = [self.val_set.example(index).summary for index in range(count)]
        rows = rouge_scores(predictions, references)
        return {"val_nll": nll, **{f"val_{m}": float(np.mean([r[m] for r in rows])) for m in rows[0]}}

    # ---- checkpoints ------------------------------------------------------------------------------------
    def _log(self, record: dict) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / METRICS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def save(self) -> Path:
        """Write a checkpoint atomically: a loadable model directory plus optimizer, position and RNG."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        final = self.checkpoints / f"step-{self.position.step:07d}"
        work = self.checkpoints / f".{final.name}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        save_checkpoint(self.model, work, self.tokenizer_file, units=self.config.paging(),
                        generation=self.config.generation, training=self.config.to_dict())
        for name, source in getattr(self.train_set, "checkpoint_files", {}).items():
            shutil.copyfile(source, work / name)
        torch.save(self.optimizer.state_dict(), work / OPTIMIZER_FILE)
        torch.save({"torch": torch.get_rng_state()}, work / RNG_FILE)
        (work / STATE_FILE).write_text(json.dumps(self.position.__dict__))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(work, final)
        for old in sorted(self.checkpoints.glob("step-*"))[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)
        return final

    def latest(self) -> Path | None:
        found = sorted(self.checkpoints.glob("step-*")) if self.checkpoints.is_dir() else []
        return found[-1] if found else None

    def resume(self) -> None:
        """Restore model, optimizer, position and RNG from the latest checkpoint; drop log lines past it."""
        latest = self.latest()
        if latest is None:
            return
        from locsum_sdk.modeling.checkpoint import WEIGHTS_FILE, load_into, read_state_dict

        load_into(self.model, read_state_dict(latest / WEIGHTS_FILE), str(latest))
        self.optimizer.load_state_dict(torch.load(latest / OPTIMIZER_FILE, weights_only=True))
        torch.set_rng_state(torch.load(latest / RNG_FILE, weights_only=True)["torch"])
        self.position = Position(**json.loads((latest / STATE_FILE).read_text()))
        log = self.run_dir / METRICS_FILE
        if log.is_file():
            kept = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= self.position.step]
            log.write_text("".join(line + "\n" for line in kept))
        logger.info("resumed %s at step %d", self.config.name, self.position.step)
