"""One load of the default bundle in a fresh process for `test_load.py`: its kept graphs with or without the weights
as the kernels pre-pack them (`optimized_graphs.PREPACKED`), then a summary of the given text.

    python -m benchmarks.load_child prepacked|plain THREADS TEXT_FILE [HOLD_SECONDS]

Prints one JSON line: the load's seconds, this process's private (anonymous) and file-backed resident memory in MiB
after the load and after the summary, and the summary's tokens; then, given HOLD_SECONDS, stays that long with its
bundle loaded (for its proportional share of memory read beside another one's, `test_load.py`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from locsum_sdk.backends import optimized_graphs


def resident() -> dict[str, float]:
    """RssAnon and RssFile of /proc/self/status, in MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssFile"):
            fields[name] = int(value.split()[0]) / 1024
    return fields


def main() -> None:
    form, threads, text_file = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    optimized_graphs.PREPACKED = form == "prepacked"
    from locsum_sdk import Summarizer

    start = time.perf_counter()
    summarizer = Summarizer.from_pretrained(threads=threads)
    loaded, after_load = time.perf_counter() - start, resident()
    summary = summarizer.summarize(text_file.read_text(encoding="utf-8"), num_beams=1, max_length=32)
    print(json.dumps({"load_s": loaded, "after_load": after_load, "after_summary": resident(),
                      "tokens": list(summary.token_ids)}), flush=True)
    if len(sys.argv) > 4:
        time.sleep(float(sys.argv[4]))


if __name__ == "__main__":
    main()
