"""A call's measured working memory beside its estimate, in a fresh process (`measure_case_in_fresh_process`).

A case names a bundle and the shape of a call: each input's documents (in words of filler text), its query, the
beams, the decoding length and the encoder's micro-batch. The child process loads the bundle and runs one tiny
call first, so the runtime's one-time allocations (thread pools, kernel tables, the allocator's first chunks)
count as part of the loaded model, as they do for a model that has served a call; then it resets the peak
resident set (Linux `clear_refs`), runs the case with every decoding step taken (min_length = max_length) and
reports the peak above the resident set before the call, beside the estimate the call was checked against
(`Summarizer.estimate_memory`, with the selection stage's largest run for kinds that have one).
"""

from __future__ import annotations

import gc
import json
import random
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from .errors import BackendError
from .profiling import WORDS, rss_mb

MB = 2**20


@dataclass(frozen=True)
class Case:
    """The shape of one call."""

    bundle: str
    documents: list[list[int]]  # per input, the words of each of its documents
    query_words: int = 0  # words of each input's query (0: none)
    num_beams: int = 1
    max_length: int = 8  # every step is taken
    unit_batch_size: int = 4
    threads: int = 2
    seed: int = 0


@dataclass
class Measured:
    """One case's measured peak beside its estimate, in bytes."""

    case: Case
    measured: int  # peak resident set above the one before the call
    estimate: int  # what the call was checked against (`Summarizer.estimate_memory(...).total`)
    described: str  # the estimate's parts
    units: list[int] = field(default_factory=list)  # units summarized per input
    length: int = 0  # tokens of the longest unit

    @property
    def ratio(self) -> float:
        """estimate / measured."""
        return self.estimate / max(1, self.measured)


def document(rng: random.Random, words: int) -> str:
    """`words` words of filler sentences."""
    out, left = [], words
    while left > 0:
        size = min(left, rng.randint(6, 18))
        out.append(" ".join(rng.choice(WORDS) for _ in range(size)).capitalize() + ".")
        left -= size
    return " ".join(out)


def _peak_bytes() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))


def _reset_peak() -> bool:
    """Reset this process's peak resident set to its current size (Linux 4.0+); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def measure_case(case: Case) -> Measured:
    """Run `case` in this process (a fresh one: see `measure_case_in_fresh_process`)."""
    from .summarizer import Summarizer

    summarizer = Summarizer.from_pretrained(case.bundle, threads=case.threads, unit_batch_size=case.unit_batch_size,
                                            verify=False)
    summarizer.summarize("The board met on Monday and agreed on the budget.", max_length=2, min_length=0,
                         num_beams=1)
    rng = random.Random(case.seed)
    inputs = [[document(rng, words) for words in docs] for docs in case.documents]
    queries = [document(rng, case.query_words) if case.query_words else None for _ in inputs]
    total_words = sum(sum(docs) for docs in case.documents)
    options = summarizer.options(num_beams=case.num_beams, max_length=case.max_length, min_length=case.max_length,
                                 max_tokens=max(summarizer.limits.max_tokens, 4 * total_words))
    gc.collect()
    if not _reset_peak():
        raise BackendError("this system cannot reset a process's peak memory (/proc/self/clear_refs); the probe "
                           "needs Linux 4.0 or later")
    before = int(rss_mb() * MB)
    summaries = summarizer.summarize_batch(inputs, queries, options)
    measured = _peak_bytes() - before
    items = [s.units for s in summaries]
    selection = 0
    if summarizer.kind.selection is not None:
        pager = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options.units,
                                      options.limits.max_tokens)
        for docs, query in zip(inputs, queries):
            units = pager.pages(docs, pager.query_ids(query))
            selection = max(selection, summarizer.selection_memory(units, query, options.units))
    estimate = summarizer.estimate_memory(items, options.generation, selection)
    return Measured(case, measured, estimate.total, estimate.describe(), [len(u) for u in items],
                    max(len(u.token_ids) for units in items for u in units))


def measure_case_in_fresh_process(case: Case, timeout: float = 600) -> Measured:
    """`measure_case` in a new Python process, so that nothing else this process holds counts."""
    command = [sys.executable, "-m", "locsum_sdk.memory_probe", json.dumps(asdict(case))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise BackendError(f"the memory case failed in its process:\n{done.stderr.strip()[-2000:]}")
    values = json.loads(done.stdout.strip().splitlines()[-1])
    return Measured(**{**values, "case": Case(**values["case"])})


def main() -> None:
    case = Case(**json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(asdict(measure_case(case))) + "\n")  # the one line the parent reads


if __name__ == "__main__":
    main()
