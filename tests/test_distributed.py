"""Training across processes with torch.distributed (gloo, 2 CPU processes under torchrun): the same loss curve as
one process taking the same micro-batches (tolerance: 1e-3 relative per step over 50 steps; the only difference
is the order of float additions in the gradient all-reduce), and an exact resume after the job is killed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_UNITS, tiny_config, training_rows, write_jsonl

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parents[1]
STEPS = 50
SCRIPT = """
import json, sys
from train.__main__ import build
from train.config import TrainConfig
build(TrainConfig.from_dict(json.loads(open(sys.argv[1]).read())), progress=False).train()
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", training_rows())


def config(tmp_path: Path, data: Path, tokenizer_file: Path, name: str, **changes) -> Path:
    model = {k: v for k, v in tiny_config(400).to_dict().items() if k != "vocab_size"}
    model.update(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)  # the same draws in 1 or 2 processes
    values = dict(name=name, objective="summarize", tokenizer=str(tokenizer_file), train_files=[str(data)],
                  val_files=[], model=model, output=str(tmp_path), units=TINY_UNITS, batch_size=2, grad_accum=2,
                  max_steps=STEPS, lr=1e-3, warmup_steps=5, max_target_tokens=24, log_every=1, eval_every=0,
                  save_every=STEPS, bf16=False, device="cpu", generation={"num_beams": 1, "max_length": 6})
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**values, **changes}))
    return path


def launch(path: Path, processes: int, script: str = SCRIPT) -> subprocess.Popen:
    command = [sys.executable, "-c", script, str(path)]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
                   "--master-port", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                   "--monitor-interval", "0.5", "--", *command[1:]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def run(path: Path, processes: int) -> list[dict]:
    job = launch(path, processes)
    out, err = job.communicate(timeout=600)
    assert job.returncode == 0, err[-3000:]
    return metrics(path)


def metrics(path: Path) -> list[dict]:
    name = json.loads(path.read_text())["name"]
    return [json.loads(line) for line in (path.parent / name / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, data, tokenizer_file):
    tmp = tmp_path_factory.mktemp("ddp")
    return run(config(tmp, data, tokenizer_file, "two", grad_accum=1), 2)


def test_two_processes_follow_one_with_the_same_micro_batches(tmp_path, data, tokenizer_file, two_processes):
    one = run(config(tmp_path, data, tokenizer_file, "one", grad_accum=2), 1)
    assert [r["step"] for r in two_processes] == [r["step"] for r in one] == list(range(1, STEPS + 1))
    for a, b in zip(one, two_processes):
        assert abs(a["loss"] - b["loss"]) <= 1e-3 * abs(a["loss"]), (a["step"], a["loss"], b["loss"])
    assert two_processes[-1]["loss"] < two_processes[0]["loss"]  # it learns


def test_a_killed_job_resumes_exactly(tmp_path, data, tokenizer_file, two_processes):
    path = config(tmp_path, data, tokenizer_file, "killed", grad_accum=1, save_every=5)
    job = launch(path, 2)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.time() + 300
    while not (checkpoints.is_dir() and any(p.name >= "step-0000020" for p in checkpoints.glob("step-*"))):
        assert job.poll() is None, job.communicate()[1][-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    resumed = run(path, 2)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in resumed] == [r["loss"] for r in two_processes]


def test_two_processes_end_a_time_budget_at_the_same_step(tmp_path, data, tokenizer_file):
    """Each process times its own steps; process 0's time decides for both, so neither waits alone in a
    collective the other has left (the job would hang) and one checkpoint holds the last step."""
    steps = 10**6  # the time budget, 0.12 s of steps, ends the run on any machine
    path = config(tmp_path, data, tokenizer_file, "timed", grad_accum=1, max_steps=steps, save_every=steps,
                  max_minutes=0.002)
    records = run(path, 2)
    last = records[-1]["step"]
    assert [r["step"] for r in records] == list(range(1, last + 1))
    assert [p.name for p in (tmp_path / "timed" / "checkpoints").iterdir()] == [f"step-{last:07d}"]
    state = json.loads((tmp_path / "timed" / "checkpoints" / f"step-{last:07d}" / "trainer.json").read_text())
    assert state["seconds"] >= 0.12


def test_a_process_leaves_its_group_before_the_interpreter_exits(tmp_path):
    """A gloo group still alive at the interpreter's teardown can abort a finished process (SIGABRT): the group
    `join_processes` made is destroyed by an exit handler, which runs before one registered earlier."""
    script = ("import atexit, os, sys, torch.distributed as dist\n"
              "from pathlib import Path\n"
              "record = Path(sys.argv[1]) / f\"rank-{os.environ['RANK']}.txt\"\n"
              "atexit.register(lambda: record.write_text(record.read_text() + f'left: {not dist.is_initialized()}'))\n"
              "from train.trainer import join_processes\n"
              "record.write_text(f'world: {join_processes(\"cpu\").world}\\n')\n")
    job = launch(tmp_path, 2, script)
    _, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    records = [(tmp_path / f"rank-{rank}.txt").read_text() for rank in range(2)]  # a file each: no interleaving
    assert records == ["world: 2\nleft: True"] * 2
