"""Train a byte-level BPE tokenizer with BART's special tokens, saved as `tokenizer.json`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from .files import write_whole

#: BART's special tokens, in id order: <s>=0, <pad>=1, </s>=2, <unk>=3, then <mask>.
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE on `texts` (an iterator is fine: it is streamed)."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike) -> Path:
    return write_whole(Path(path), lambda partial: tokenizer.save(str(partial)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", help="plain-text files to learn from")
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--output", required=True, help="where to write tokenizer.json")
    args = parser.parse_args(argv)

    def lines():
        for file in args.files:
            with open(file, encoding="utf-8") as handle:
                yield from handle

    save_tokenizer(train_tokenizer(lines(), args.vocab_size), args.output)


if __name__ == "__main__":
    main()
