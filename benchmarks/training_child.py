"""One trainer-throughput point in a process of its own:

    python -m benchmarks.training_child KIND PRECISION STEPS WORK [--quick]

Trains KIND's base config (train/configs/<kind>-base.toml; the Hierarchical Transformer's summarizer stage,
hiersumm-base) for STEPS steps from random weights of pretrain-base's shape (its [model] table), on the first
examples of QMSum train written under WORK, in PRECISION (fp32, bf16 or fp16 autocast; fp32 uses TF32 matmuls
where the config allows), validation off. `--quick` shrinks the model (d_model 256, 2 + 2 layers, 4 heads) and the
step (4 units, one micro-batch) for a CPU. Prints JSON: the device, the median tokens/s of the steps after the
first, the parameters, and peak memory (CUDA memory allocated on a GPU, the process's resident set on the CPU).
"""

from __future__ import annotations

import dataclasses
import json
import resource
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "train" / "configs"
TRAIN = ROOT.parent / "shared" / "data" / "qmsum" / "train.jsonl"
EXAMPLES = 64  # QMSum train examples the run reads (whole meetings: the real input lengths)
QUICK_MODEL = {"d_model": 256, "encoder_layers": 2, "decoder_layers": 2, "encoder_heads": 4, "decoder_heads": 4,
               "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024}
QUICK_UNITS = {"max_pages": 4, "top_k": 4, "top_paragraphs": 4}  # whichever of these the kind's units have


def config_for(kind: str, precision: str, steps: int, work: Path, quick: bool):
    import torch

    from locsum_sdk import kinds
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.registry import model_kind
    from train.__main__ import prepare_tokenizer
    from train.config import TrainConfig

    base = TrainConfig.load(CONFIGS / ("hiersumm-base.toml" if kind == "hiersumm" else f"{kind}-base.toml"))
    pretrain = TrainConfig.load(CONFIGS / "pretrain-base.toml")
    shape = {**pretrain.model, **(QUICK_MODEL if quick else {})}
    data = work / "qmsum-train.jsonl"
    if not data.is_file():
        with open(TRAIN, encoding="utf-8") as source:
            data.write_text("".join(line for _, line in zip(range(EXAMPLES), source)), encoding="utf-8")
    config = dataclasses.replace(
        base, name=f"{kind}-{precision}", output=str(work / "runs"), train_files=[str(data)], val_files=[],
        max_steps=steps, log_every=1, save_every=10**9, eval_every=10**9, bf16=precision == "bf16",
        fp16=precision == "fp16", workers=0 if quick else base.workers, tokenizer=str(work / "tokenizer.json"),
        vocab_size=pretrain.vocab_size)
    if quick:
        units = {k: v for k, v in QUICK_UNITS.items() if k in config.units}
        config = dataclasses.replace(config, grad_accum=1, units={**config.units, **units})
    _, tokenizer = prepare_tokenizer(config, [base.resolve(f) for f in base.train_files])  # the train splits
    start = work / f"random-{'quick' if quick else 'base'}"
    if not start.is_dir():
        torch.manual_seed(0)
        bart = model_kind("pagesum").model(kinds.get("pagesum").config(**{**shape,
                                                                          "vocab_size": tokenizer.get_vocab_size()}))
        bart.reset_parameters(0.02)
        save_checkpoint(bart, start, config.resolve(config.tokenizer))
    return dataclasses.replace(config, init_from=str(start))


def main(kind: str, precision: str, steps: int, work: str, quick: bool) -> dict:
    import torch

    from train.__main__ import build

    work_dir = Path(work)
    work_dir.mkdir(parents=True, exist_ok=True)
    config = config_for(kind, precision, steps, work_dir, quick)
    shutil.rmtree(config.run_dir(), ignore_errors=True)  # a fresh run: an earlier point's final checkpoint would resume
    trainer = build(config, progress=False)
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    records = trainer.train()
    rates = [r["tokens_per_s"] for r in records[1:] if "tokens_per_s" in r]
    peak = (torch.cuda.max_memory_allocated() if trainer.device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    name = torch.cuda.get_device_name() if trainer.device.type == "cuda" else "cpu"
    return {"device": name, "tokens_per_s": statistics.median(rates), "steps": len(records), "peak_bytes": peak,
            "parameters": sum(p.numel() for p in trainer.model.parameters())}


if __name__ == "__main__":
    kind, precision, steps, work, *flags = sys.argv[1:]
    print(json.dumps(main(kind, precision, int(steps), work, "--quick" in flags)))
