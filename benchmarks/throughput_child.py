"""One throughput point in a process of its own:

    python -m benchmarks.throughput_child BUNDLE DATA BATCH_SIZE INPUTS MAX_LENGTH

Summarizes the first INPUTS examples of the JSON Lines file DATA with `summarize_batch`, BATCH_SIZE inputs per call
(greedy, MAX_LENGTH tokens, every step taken), after a warm-up call; prints JSON: documents/s, the peak resident set
of the process (bytes) and every summary's tokens.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main(bundle: str, data: str, batch_size: int, inputs: int, max_length: int) -> dict:
    from locsum_sdk import Summarizer
    from locsum_sdk.evaluation import read_examples

    summarizer = Summarizer.from_pretrained(bundle, threads=2)
    examples = read_examples(data, inputs)
    options = summarizer.options(num_beams=1, max_length=max_length, min_length=max_length)
    summarizer.summarize(examples[0].documents, query=examples[0].query, options=options)  # warm-up
    started, tokens = time.perf_counter(), []
    for first in range(0, len(examples), batch_size):
        chunk = examples[first : first + batch_size]
        summaries = summarizer.summarize_batch([e.documents for e in chunk], [e.query for e in chunk], options)
        tokens.extend(s.token_ids for s in summaries)
    seconds = time.perf_counter() - started
    return {"documents_per_second": len(examples) / seconds, "seconds": seconds, "tokens": tokens,
            "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


if __name__ == "__main__":
    bundle, data, *numbers = sys.argv[1:]
    print(json.dumps(main(bundle, data, *map(int, numbers))))
