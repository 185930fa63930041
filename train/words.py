"""python -m train.words --config train/configs/NAME.toml CHECKPOINT [CHECKPOINT ...]

Writes the run's word list (the words of its train splits' text, as training writes it beside every checkpoint)
into checkpoints saved before runs wrote one, so that their bundles carry it for the `known_words` option.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from locsum_sdk.constants import CHECKPOINT_CONFIG_FILE, WORDS_FILE

from .__main__ import training_words
from .config import TrainConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("checkpoints", nargs="+", type=Path)
    args = parser.parse_args(argv)
    config = TrainConfig.load(args.config)
    if config.objective != "summarize":
        parser.error(f"{args.config} trains the {config.objective} objective; only summarizers carry a word list")
    missing = [str(c) for c in args.checkpoints if not (c / CHECKPOINT_CONFIG_FILE).is_file()]
    if missing:
        parser.error(f"not checkpoint directories: {missing}")
    words = training_words(config, [config.resolve(f) for f in config.train_files])
    for checkpoint in args.checkpoints:
        shutil.copyfile(words, checkpoint / WORDS_FILE)
        print(f"wrote {checkpoint / WORDS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
