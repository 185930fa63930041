"""A corpus of 100,000 synthetic documents (one bad line in 1,000) streamed through `locsum batch` with a tiny
bundle: the job's resident memory sampled twice a second against the documents written. Memory must stay flat: the
largest sample after the first fifth of the corpus within 5% (and 8 MB) of the largest before it. Table in
benchmarks/results/corpus_memory.json, plot in corpus_memory.png. `--quick`: 10,000 documents.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS, line_plot, tiny_pagesum, write_result
from locsum_sdk.profiling import filler_text

ROOT = Path(__file__).resolve().parents[1]


def write_corpus(path: Path, count: int) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            if i % 1000 == 999:
                handle.write("{not json\n")
                continue
            documents = [filler_text(rng.randrange(10**9), rng.randint(2, 12)) for _ in range(rng.randint(1, 3))]
            handle.write(json.dumps({"id": f"doc-{i}", "documents": documents}) + "\n")


def resident_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None


def lines_in(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def test_a_large_corpus_streams_with_flat_memory(tmp_path, quick):
    count = 10_000 if quick else 100_000
    bundle = tiny_pagesum()
    corpus, output = tmp_path / "corpus.jsonl", tmp_path / "out.jsonl"
    write_corpus(corpus, count)
    job = subprocess.Popen([sys.executable, "-m", "locsum_sdk.cli", "batch", "--bundle", str(bundle), "--input",
                            str(corpus), "--output", str(output), "--quiet", "--threads", "1"], cwd=ROOT)
    samples, started = [], time.perf_counter()
    while job.poll() is None:
        rss = resident_mb(job.pid)
        if rss is not None:
            samples.append((lines_in(output), rss))
        time.sleep(0.5)
    seconds = time.perf_counter() - started
    assert job.returncode == 0
    assert lines_in(output) == count
    early = max(rss for done, rss in samples if done <= count // 5)
    late = max(rss for done, rss in samples if done > count // 5)
    print(f"\n{count} documents in {seconds:.0f} s ({count / seconds:.0f}/s): resident memory at most "
          f"{early:.0f} MB in the first fifth, {late:.0f} MB after it ({late / early:.3f}x)")
    write_result("corpus_memory", {"documents": count, "seconds": seconds, "early_max_mb": early,
                                   "late_max_mb": late, "samples": samples[:: max(1, len(samples) // 400)]})
    line_plot({"locsum batch": samples}, RESULTS / "corpus_memory.png", "documents written", "resident MB",
              f"{count:,} documents through locsum batch (tiny bundle)")
    assert late <= max(early * 1.05, early + 8)
