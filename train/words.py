"""python -m train.words --config train/configs/NAME.toml CHECKPOINT_OR_DIR [CHECKPOINT_OR_DIR ...]

Writes the run's word lists, as training writes them beside every checkpoint, into checkpoints saved before runs
wrote them, so that their bundles carry them: `words.txt` (the words of its train splits' text) for the
`known_words` option and `common_words.txt` (the words most of its train inputs hold) for `keywords`. A directory
that is not a checkpoint gets `common_words.txt` alone, for `locsum export --bundle DIR --common-words FILE`.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from locsum_sdk.constants import CHECKPOINT_CONFIG_FILE, COMMON_WORDS_FILE, WORDS_FILE

from .__main__ import training_common_words, training_words
from .config import TrainConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("checkpoints", nargs="+", type=Path)
    args = parser.parse_args(argv)
    config = TrainConfig.load(args.config)
    if config.objective != "summarize":
        parser.error(f"{args.config} trains the {config.objective} objective; only summarizers carry a word list")
    missing = [str(c) for c in args.checkpoints if not c.is_dir()]
    if missing:
        parser.error(f"not directories: {missing}")
    files = [config.resolve(f) for f in config.train_files]
    words, common = training_words(config, files), training_common_words(config, files)
    for directory in args.checkpoints:
        lists = [(common, COMMON_WORDS_FILE)]
        if (directory / CHECKPOINT_CONFIG_FILE).is_file():
            lists.append((words, WORDS_FILE))
        for source, name in lists:
            shutil.copyfile(source, directory / name)
            print(f"wrote {directory / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
