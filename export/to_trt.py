"""Build TensorRT engines for an exported bundle (same as `locsum export --trt`).

    python export/to_trt.py --bundle BUNDLE [--output DIR] [--fp16] [--max-batch B --max-units U
        --max-unit-len L --max-beams K --max-steps T] [--dim NAME=MAX] [--dry-run] [--force]

Needs an NVIDIA GPU, CUDA and `pip install 'locsum[gpu]'`; `--dry-run` works on any machine.
"""

import sys

from locsum_sdk.cli import main

if __name__ == "__main__":
    sys.exit(main(["export", "--trt", *sys.argv[1:]]))
