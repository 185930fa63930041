"""Processes sharing one machine, as `$LOCSUM_THREADS` is for: P processes (one a pair of CPUs, at least 2) each
summarize the example meeting's first 50 lines with the default bundle at the same moment (2 beams, 96 tokens),
each on every usable CPU (no $LOCSUM_THREADS: the default) against each on its share of them ($LOCSUM_THREADS =
CPUs / P), in turns, 3 rounds; and one process alone on every CPU. Prints the median time of the slowest process
of each arrangement and the ratio of the two shared ones, and whether every process wrote the same tokens."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import write_result
from locsum_sdk.base_model import base_file
from locsum_sdk.errors import BundleNotFoundError
from locsum_sdk.threads import THREADS_ENV, usable_cpus

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 3


def run_together(processes: int, threads: int | None, text: Path) -> list[dict]:
    """`processes` children summarizing at once, each on `threads` threads (None: the default): their reports."""
    env = {k: v for k, v in os.environ.items() if k != THREADS_ENV}
    if threads is not None:
        env[THREADS_ENV] = str(threads)
    children = [subprocess.Popen([sys.executable, "-m", "benchmarks.shared_machine_child", str(text)], cwd=ROOT,
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(processes)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready"
        for child in children:  # every one loaded: start them together
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = [json.loads(child.stdout.readline()) for child in children]
        for child in children:
            assert child.wait(timeout=60) == 0
        return reports
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()


def test_processes_sharing_a_machine(tmp_path):
    try:
        base_file()
    except BundleNotFoundError as error:
        pytest.skip(f"the default's base model is not installed: {error}")
    cpus = usable_cpus()
    processes = max(2, cpus // 2)
    share = max(1, cpus // processes)
    lines = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8").splitlines()
    text = tmp_path / "meeting.txt"
    text.write_text("\n".join(lines[:50]), encoding="utf-8")
    every_cpu, shared = f"{processes} processes on every CPU", f"{processes} processes on {share} each"
    arrangements = {every_cpu: (processes, None), shared: (processes, share), "1 process alone": (1, None)}
    seconds: dict[str, list[float]] = {name: [] for name in arrangements}
    tokens = set()
    for _ in range(ROUNDS):
        for name, (count, threads) in arrangements.items():
            reports = run_together(count, threads, text)
            assert {report["threads"] for report in reports} == {threads or cpus}  # what each process ran on
            seconds[name].append(max(report["seconds"] for report in reports))
            tokens.update(tuple(report["token_ids"]) for report in reports)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    every, each = medians[every_cpu], medians[shared]
    print(f"\n{cpus} CPUs, the slowest process's summary, median of {ROUNDS} rounds: "
          + ", ".join(f"{name} {value:.2f} s" for name, value in medians.items())
          + f"; each on its share {every / each:.2f}x faster than each on every CPU; the same tokens: "
          f"{len(tokens) == 1}")
    write_result("shared_machine", {"cpus": cpus, "processes": processes, "share": share, "rounds": ROUNDS,
                                    "seconds": seconds, "ratio": every / each, "same_tokens": len(tokens) == 1})
    assert len(tokens) == 1
