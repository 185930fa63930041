"""One process of `test_shared_machine.py`: loads the default bundle (its threads from $LOCSUM_THREADS, else every
usable CPU), prints `ready`, waits for a line on stdin (so that every process summarizes at the same time), then
summarizes the text the parent names and prints one JSON line: the summary's seconds and its tokens.

    python -m benchmarks.shared_machine_child TEXT_FILE
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from locsum_sdk import Summarizer

OPTIONS = {"num_beams": 2, "max_length": 96}


def main() -> None:
    text = Path(sys.argv[1]).read_text(encoding="utf-8")
    summarizer = Summarizer.from_pretrained()
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    summary = summarizer.summarize(text, **OPTIONS)
    print(json.dumps({"seconds": time.perf_counter() - started, "threads": summarizer.backend.threads,
                      "token_ids": summary.token_ids}), flush=True)


if __name__ == "__main__":
    main()
