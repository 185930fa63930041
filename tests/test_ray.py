"""`locsum batch --engine ray`: a local Ray cluster of 2 workers writes the output the local engine writes; a job
killed at 3 random points and resumed on Ray holds every input exactly once; a worker killed mid-job is restarted."""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import document, write_jsonl
from test_batch import OPTIONS, corpus, kill_at, lines_written, straight  # noqa: F401  (module fixtures)

from locsum_sdk.batch import Fields, read_line
from locsum_sdk.cli import main

pytest.importorskip("ray", reason="Ray is not installed: pip install 'locsum[ray]'")

ROOT = Path(__file__).resolve().parents[1]
RAY = ["--engine", "ray", "--workers", "2", "--threads", "1"]


def command(bundle: Path, corpus: Path, output: Path) -> list[str]:  # noqa: F811
    return [sys.executable, "-m", "locsum_sdk.cli", "batch", "--bundle", str(bundle), "--input", str(corpus),
            "--output", str(output), "--resume", "--quiet", *OPTIONS, *RAY]


def rows_of(output: Path) -> list[dict]:
    return [json.loads(line) for line in output.read_text().splitlines()]


@pytest.fixture(scope="module")
def long_job(tmp_path_factory, bundle_dir) -> tuple[Path, list[dict]]:
    """A corpus long enough for kills to land while the workers write (440 inputs), and the local engine's output."""
    rng = random.Random(2)
    directory = tmp_path_factory.mktemp("long")
    source = write_jsonl(directory / "corpus.jsonl", [{"id": f"doc-{i}", "documents": [document(rng, 6)]}
                                                       for i in range(440)])
    output = directory / "local.jsonl"
    assert main(["batch", "--bundle", str(bundle_dir), "--input", str(source), "--output", str(output), "--quiet",
                 *OPTIONS]) == 0
    return source, rows_of(output)


def test_two_ray_workers_write_what_the_local_engine_writes(tmp_path, bundle_dir, corpus, straight):  # noqa: F811
    output = tmp_path / "out.jsonl"
    report = tmp_path / "report.json"
    assert main(["batch", "--bundle", str(bundle_dir), "--input", str(corpus), "--output", str(output), "--quiet",
                 "--report", str(report), *OPTIONS, *RAY]) == 0
    assert rows_of(output) == straight
    counts = json.loads(report.read_text())
    assert (counts["summarized"], counts["failed"]) == (148, 3) and counts["stage_seconds"]["decode"] > 0


def test_killed_on_ray_at_random_points_and_resumed_every_input_appears_exactly_once(tmp_path, bundle_dir,
                                                                                     long_job):
    """2 kills of the job's process group (the driver, its local Ray cluster and workers), each once the workers
    have written what this run adds (at least one batch, up to a random number of lines) and a random moment
    more, then a run to the end; on Ray throughout (each kill costs a cluster's start and its workers' loads, so
    the twenty kills at every kind of point are the local engine's, tests/test_batch.py)."""
    source, local = long_job
    output, rng = tmp_path / "out.jsonl", random.Random(1)
    kills = kill_at(command(bundle_dir, source, output), output, sorted(rng.sample(range(1, len(local) - 40), 3)),
                    rng, 0.03, while_writing=True)
    subprocess.run(command(bundle_dir, source, output), check=True, cwd=ROOT, timeout=600, start_new_session=True)
    assert kills >= 2
    assert rows_of(output) == local


def worker_processes(session: int) -> list[int]:
    """The Ray summarizer workers started by the job whose session is `session`."""
    listing = subprocess.run(["ps", "-eo", "pid=,sid=,args="], capture_output=True, text=True, check=True).stdout
    return [int(pid) for pid, sid, *args in (line.split(None, 2) for line in listing.splitlines())
            if int(sid) == session and args and args[0].startswith("ray::SummarizerWorker")]


def test_a_worker_killed_mid_job_is_restarted_and_the_output_is_whole(tmp_path, bundle_dir, long_job):
    """SIGKILL of one worker once 60 of 440 lines are written: Ray starts it again and runs its batch again (without
    restarts the job stops with the worker's error); the job ends with every input once."""
    source, local = long_job
    output = tmp_path / "out.jsonl"
    job = subprocess.Popen(command(bundle_dir, source, output), cwd=ROOT, start_new_session=True,
                           stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while job.poll() is None and lines_written(output) < 60 and time.time() < deadline:
            time.sleep(0.005)
        workers = worker_processes(job.pid)
        assert len(workers) == 2 and job.poll() is None
        os.kill(workers[0], signal.SIGKILL)
        assert job.wait(timeout=300) == 0
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert rows_of(output) == local


def test_ray_options_are_checked(tmp_path, bundle_dir, corpus, capsys):  # noqa: F811
    base = ["batch", "--bundle", str(bundle_dir), "--input", str(corpus), "--output", str(tmp_path / "o.jsonl"),
            "--quiet", *OPTIONS]
    assert main([*base, "--workers", "2"]) == 2
    assert "--engine ray" in capsys.readouterr().err
    assert main([*base, "--engine", "ray", "--workers", "64", "--threads", "1"]) == 2
    assert "CPUs" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()
    assert main([*base, "--engine", "ray", "--workers", "0"]) == 2
    assert "workers" in capsys.readouterr().err
    assert main([*base, "--gpus-per-worker", "1"]) == 2
    assert "--engine ray" in capsys.readouterr().err
    assert main([*base, "--engine", "ray", "--gpus-per-worker", "-1"]) == 2
    assert "gpus" in capsys.readouterr().err
    assert main([*base, "--engine", "ray", "--workers", "1", "--device", "cuda"]) == 2  # no GPU in this cluster
    assert "GPUs" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()


def test_a_worker_loads_the_bundle_from_its_files_and_leaves_none_behind(bundle_dir, tmp_path, monkeypatch):
    from locsum_sdk.errors import BundleError, BundleIntegrityError
    from locsum_sdk.ray_engine import SummarizerWorker, bundle_files

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    files = bundle_files(bundle_dir)
    worker = SummarizerWorker(files, {"threads": 1})
    lines = [read_line(b'{"id": "a", "documents": ["The council met. It approved the budget."]}', 1, Fields())]
    rows, stages = worker.summarize(lines, {"max_length": 6})
    assert rows[0]["id"] == "a" and rows[0]["summary"] and stages["encode"] > 0
    assert list(tmp_path.iterdir()) == []  # read, then removed
    damaged = {**files, "decoder.onnx": files["decoder.onnx"][:-10]}
    with pytest.raises(BundleIntegrityError):
        SummarizerWorker(damaged, {"threads": 1})
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "nested" / "inner").mkdir(parents=True)
    with pytest.raises(BundleError, match="flat"):
        bundle_files(tmp_path / "nested")
