"""Scale-out: `locsum batch` over the first 200 Multi-News test inputs with the shipped default bundle (greedy, 64
tokens), on Ray with 1 and 2 workers of 1 thread each, and on the local engine with every core, in one run. The
figure is the job's own documents/s (its report: from the first batch read to the last line written; starting Ray
and loading the actors come before it), and each output must equal the 1-worker run's. Table in
benchmarks/results/ray_scaling.json. Target: 2 workers at least 1.6x one worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import write_result

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "multinews" / "test.jsonl"
INPUTS = 200
OPTIONS = ["--num-beams", "1", "--max-length", "64", "--batch-size", "4", "--quiet"]
RUNS = {"ray, 1 worker x 1 thread": ["--engine", "ray", "--workers", "1", "--threads", "1"],
        "ray, 2 workers x 1 thread": ["--engine", "ray", "--workers", "2", "--threads", "1"],
        "local, 1 process x all cores": ["--engine", "local"]}


def job(corpus: Path, output: Path, flags: list[str]) -> dict:
    report = output.with_suffix(".report.json")
    subprocess.run([sys.executable, "-m", "locsum_sdk.cli", "batch", "--input", str(corpus), "--output", str(output),
                    "--report", str(report), *OPTIONS, *flags], check=True, cwd=ROOT, timeout=3600,
                   start_new_session=True)
    return json.loads(report.read_text())


def test_two_workers_against_one(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'locsum[ray]'")
    if not DATA.is_file():
        pytest.skip(f"{DATA} is not here (../shared/data)")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(DATA.read_text().splitlines(keepends=True)[:INPUTS]))
    results, outputs = {}, {}
    for name, flags in RUNS.items():
        output = tmp_path / f"{len(results)}.jsonl"
        results[name] = job(corpus, output, flags)
        outputs[name] = output.read_text()
    base = results["ray, 1 worker x 1 thread"]["documents_per_second"]
    table = {name: {"documents_per_second": r["documents_per_second"], "speedup": r["documents_per_second"] / base,
                    "same_output": outputs[name] == outputs["ray, 1 worker x 1 thread"]}
             for name, r in results.items()}
    for name, row in table.items():
        print(f"\n{name}: {row['documents_per_second']:.2f} documents/s ({row['speedup']:.2f}x), "
              f"same output {row['same_output']}")
    write_result("ray_scaling", {"inputs": INPUTS, "options": OPTIONS, "runs": table})
    assert all(row["same_output"] for row in table.values())
