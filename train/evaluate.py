"""ROUGE evaluation of a bundle or checkpoint and the baselines (same as `locsum eval`).

    python -m train.evaluate --bundle DIR --data FILE.jsonl [--limit N] [--output outputs.jsonl]

The metrics and baselines live in `locsum_sdk.evaluation`, so an installed `locsum eval` has them too.
"""

import sys

from locsum_sdk.cli import main

if __name__ == "__main__":
    sys.exit(main(["eval", *sys.argv[1:]]))
