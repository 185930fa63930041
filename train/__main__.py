"""python -m train --config train/configs/NAME.toml [--device auto|cpu|cuda] [--max-steps N] [--quiet]

Trains (or resumes) the run the config describes; checkpoints and metrics.jsonl go to <output>/<name>.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from locsum_sdk import kinds
from locsum_sdk.constants import COMMON_WORDS_FILE, WORDS_FILE
from locsum_sdk.errors import LocsumError
from locsum_sdk.keywords import common_words
from locsum_sdk.modeling.checkpoint import load_checkpoint
from locsum_sdk.modeling.registry import model_kind
from locsum_sdk.tokenizer_file import read_tokenizer
from locsum_sdk.units import SpecialTokens
from locsum_sdk.words import WordList, words_of

from .adapters import freeze, with_adapters
from .config import TrainConfig
from .data import check_data, read_jsonl, segments, unique_documents
from .files import write_whole
from .kinds import check_objective_options, denoising_set, prepare_model, training_set
from .tokenizer import SPECIAL_TOKENS, save_tokenizer, train_tokenizer
from .trainer import Trainer

logger = logging.getLogger("locsum_sdk.train")


def tokenizer_texts(files: list[Path]):
    """Train documents, summaries and queries (train splits only)."""
    yield from unique_documents(files)
    for path in files:
        for example in read_jsonl(path, require_summary=False):
            if example.summary:
                yield example.summary
            if example.query:
                yield example.query


def prepare_tokenizer(config: TrainConfig, files: list[Path]):
    path = config.resolve(config.tokenizer)
    if not path.is_file():
        logger.info("training a %d-token tokenizer on %s", config.vocab_size, [f.name for f in files])
        save_tokenizer(train_tokenizer(tokenizer_texts(files), config.vocab_size), path)
    return path, read_tokenizer(path)


def training_words(config: TrainConfig, files: list[Path]) -> Path:
    """The words of the train splits' text (`tokenizer_texts`), written once to the run's `words.txt`: the word list
    checkpoints and bundles carry for the `known_words` option."""
    path = config.run_dir() / WORDS_FILE
    if not path.is_file():
        write_whole(path, WordList(words_of(tokenizer_texts(files))).write)
    return path


def training_common_words(config: TrainConfig, files: list[Path]) -> Path:
    """The words most of the train splits' inputs hold (`locsum_sdk.keywords.common_words`), written once to the
    run's `common_words.txt`: the list checkpoints and bundles carry for the `keywords` option."""
    path = config.run_dir() / COMMON_WORDS_FILE
    if not path.is_file():
        inputs = ("\n".join(example.documents) for file in files for example in read_jsonl(file, require_summary=False))
        write_whole(path, common_words(inputs).write)
    return path


def starting_model(config: TrainConfig, tokenizer):
    """The model a run of `config` starts from: `init_from` (or fresh weights), as the kind prepares it."""
    torch.manual_seed(config.seed)
    if config.init_from:
        model = load_checkpoint(config.resolve(config.init_from), kind=config.kind).model  # e.g. BART -> hierencdec
    else:
        model_config = kinds.get(config.kind).config(**{**config.model, "vocab_size": tokenizer.get_vocab_size()})
        model = model_kind(config.kind).model(model_config)
        model.reset_parameters(0.02)
    model = prepare_model(config.kind, model, config)
    if config.lora:
        model = with_adapters(model, config.lora)
    freeze(model, config.trainable)
    return model


def training_pager(config: TrainConfig, tokenizer, model):
    """The pager training reads `config`'s examples with: its kind's units over the model's special tokens."""
    kind = kinds.get(config.kind)
    return kind.pager(tokenizer, SpecialTokens(**model.config.special_tokens()), kind.unit_options(**config.paging()))


def build(config: TrainConfig, progress: bool = True) -> Trainer:
    check_objective_options(config.kind, config.objective_options)
    files = [config.resolve(f) for f in config.train_files]
    val_files = [config.resolve(f) for f in config.val_files]
    check_data(files + val_files, require_summary=config.objective != "denoise")
    tokenizer_file, tokenizer = prepare_tokenizer(config, files)
    model = starting_model(config, tokenizer)
    cfg = model.config
    special = SpecialTokens(**cfg.special_tokens())
    if config.objective == "denoise":
        mask_id = tokenizer.token_to_id(SPECIAL_TOKENS[-1])
        train_set = denoising_set(config.kind, segments(unique_documents(files), tokenizer, config.segment_tokens),
                                  special, mask_id, config.seed, config)
        val_set = denoising_set(config.kind, segments(unique_documents(val_files), tokenizer, config.segment_tokens),
                                special, mask_id, config.seed + 1, config) if val_files else None
    else:
        pager = training_pager(config, tokenizer, model)
        train_set = training_set(config.kind, files, pager, tokenizer, config, "train")
        val_set = training_set(config.kind, val_files, pager, tokenizer, config, "val") if val_files else None
        return Trainer(config, model, train_set, val_set, tokenizer_file, progress, tokenizer,
                       training_words(config, files), training_common_words(config, files))
    return Trainer(config, model, train_set, val_set, tokenizer_file, progress, tokenizer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"),
                        help="where to train, over the config's device (auto: CUDA where torch sees a GPU); a run "
                             "resumes on any device")
    parser.add_argument("--max-steps", type=int, help="stop (resumably) after this many steps in all")
    parser.add_argument("--max-minutes", type=float,
                        help="the training time budget, over the config's: stop (resumably) once the run has trained "
                             "this long in all")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        overrides = {name: value for name, value in (("device", args.device), ("max_minutes", args.max_minutes))
                     if value is not None}
        config = TrainConfig.load(args.config, **overrides)
        trainer = build(config, progress=not args.quiet)
        logger.info("%s: %d training samples, %.1fM parameters on %s", config.name, len(trainer.train_set),
                    sum(p.numel() for p in trainer.model.parameters()) / 1e6, trainer.device)
        trainer.train(args.max_steps)
    except (LocsumError, OSError) as err:
        print(f"python -m train: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
