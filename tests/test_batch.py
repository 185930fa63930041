"""`locsum batch`: every input exactly once, in order, whatever kills the job (SIGKILL at 20 random points, then
resumed); bad lines recorded with their typed errors; refusals of a resume that would mix jobs."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import document, write_jsonl

from locsum_sdk.cli import main

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = ["--max-length", "8", "--num-beams", "1", "--batch-size", "3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(1)
    rows = [{"id": f"doc-{i}", "documents": [document(rng, rng.randint(2, 12))],
             "query": "What was decided?" if i % 5 == 0 else None} for i in range(150)]
    rows[7] = {"id": "empty", "documents": ["   \n\t"]}
    rows[20] = {"id": "not a list", "documents": 5}
    path = write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", rows)
    lines = path.read_text().splitlines()
    lines.insert(30, "{not json")
    path.write_text("\n".join(lines) + "\n")
    return path


def command(bundle: Path, corpus: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "locsum_sdk.cli", "batch", "--bundle", str(bundle), "--input", str(corpus),
            "--output", str(output), "--resume", "--quiet", *OPTIONS]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, bundle_dir, corpus) -> list[dict]:
    output = tmp_path_factory.mktemp("straight") / "out.jsonl"
    subprocess.run(command(bundle_dir, corpus, output), check=True, cwd=ROOT, timeout=300)
    return [json.loads(line) for line in output.read_text().splitlines()]


def test_every_input_once_in_order_with_typed_errors(straight):
    assert len(straight) == 151
    assert [row["id"] for row in straight[:3]] == ["doc-0", "doc-1", "doc-2"]
    errors = {row["id"]: row["error"]["type"] for row in straight if "error" in row}
    assert errors == {"empty": "EmptyInputError", "not a list": "DataError", "line-31": "DataError"}
    assert all(row["summary"] and row["warnings"] == [] for row in straight if "error" not in row)


def lines_written(output: Path) -> int:
    return output.read_bytes().count(b"\n") if output.exists() else 0


def kill_at(argv: list[str], output: Path, targets: list[int], rng: random.Random, pause: float,
            while_writing: bool = False) -> int:
    """Run the job `argv` once per target, in order, and SIGKILL its process group once `output` holds `target`
    lines (with `while_writing`, also one more than when it started) and a random pause of up to `pause` seconds
    more; the number of kills (a job that ends first is not killed)."""
    kills = 0
    for target in targets:
        job = subprocess.Popen(argv, cwd=ROOT, start_new_session=True, stderr=subprocess.DEVNULL)
        goal = max(target, lines_written(output) + 1) if while_writing else target
        deadline = time.time() + 180
        while job.poll() is None and lines_written(output) < goal and time.time() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, pause))
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            kills += 1
        job.wait()
    return kills


def test_killed_at_random_points_and_resumed_every_input_appears_exactly_once(tmp_path, bundle_dir, corpus,
                                                                              straight):
    """20 kills, each once the output holds a random number of lines and a random moment more (in a write, between
    batches, while loading), then a run to the end."""
    output, rng = tmp_path / "out.jsonl", random.Random(0)
    kills = kill_at(command(bundle_dir, corpus, output), output, sorted(rng.sample(range(1, len(straight)), 24)),
                    rng, 0.05)
    subprocess.run(command(bundle_dir, corpus, output), check=True, cwd=ROOT, timeout=300)
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert kills >= 20  # of 24 targets, one falling inside a batch already written passes without a kill
    assert rows == straight  # nothing lost, nothing twice, the same summaries


def test_a_partial_last_line_is_dropped_and_written_again(tmp_path, bundle_dir, corpus, straight):
    output = tmp_path / "out.jsonl"
    subprocess.run(command(bundle_dir, corpus, output), check=True, cwd=ROOT, timeout=300)
    lines = output.read_text().splitlines(keepends=True)
    output.write_text("".join(lines[:40]) + lines[40][:15])  # a job killed in mid-write
    subprocess.run(command(bundle_dir, corpus, output), check=True, cwd=ROOT, timeout=300)
    assert [json.loads(line) for line in output.read_text().splitlines()] == straight


def test_a_resume_that_would_mix_jobs_is_refused(tmp_path, bundle_dir, corpus, capsys):
    output = tmp_path / "out.jsonl"
    base = ["batch", "--bundle", str(bundle_dir), "--input", str(corpus), "--output", str(output), "--quiet"]
    assert main([*base, *OPTIONS]) == 0
    assert main([*base, *OPTIONS]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main([*base, "--resume", "--max-length", "9", "--num-beams", "1"]) == 2
    assert "differs from this one in its options" in capsys.readouterr().err
    changed = tmp_path / "changed.jsonl"
    changed.write_text(corpus.read_text().replace('"doc-9"', '"another"'))  # the last input written
    resumed = ["batch", "--bundle", str(bundle_dir), "--input", str(changed), "--output", str(output), "--quiet"]
    output.write_text("".join(output.read_text().splitlines(keepends=True)[:10]))
    assert main([*resumed, "--resume", *OPTIONS]) == 2
    assert "the input changed" in capsys.readouterr().err
    (tmp_path / "out.jsonl.job.json").unlink()
    assert main([*base, "--resume", *OPTIONS]) == 2
    assert "not written by `locsum batch`" in capsys.readouterr().err


def test_field_names_are_configurable(tmp_path, bundle_dir):
    data = write_jsonl(tmp_path / "in.jsonl", [{"key": "a", "text": "The council met. It approved the budget."},
                                                {"text": "The library opens in spring."}])
    output = tmp_path / "out.jsonl"
    assert main(["batch", "--bundle", str(bundle_dir), "--input", str(data), "--output", str(output), "--quiet",
                 "--documents-field", "text", "--id-field", "key", "--report", str(tmp_path / "report.json"),
                 *OPTIONS]) == 0
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [row["id"] for row in rows] == ["a", "line-2"] and all("summary" in row for row in rows)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summarized"] == 2 and report["documents_per_second"] > 0
    assert set(report["stage_seconds"]) == {"paging", "select", "encode", "decode"}


@pytest.fixture(scope="module")
def tiny_summarizer(bundle_dir):
    from locsum_sdk import Summarizer

    return Summarizer.from_pretrained(bundle_dir, threads=1)


def line_strategies():
    from hypothesis import strategies as st

    text = st.text(min_size=0, max_size=40)
    row = st.fixed_dictionaries({}, optional={"id": st.one_of(text, st.integers(), st.none()),
                                              "documents": st.one_of(text, st.lists(text, max_size=3), st.integers()),
                                              "query": st.one_of(text, st.none(), st.floats())})
    json_line = row.map(lambda value: json.dumps(value).encode())
    return st.lists(st.one_of(json_line, st.binary(max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b)),
                    min_size=1, max_size=6)


def test_any_lines_give_one_row_each(tmp_path_factory, tiny_summarizer):
    """Hostile input lines (binary, wrong types, invisible text, NaN queries): one output row per non-blank line,
    each a summary or a typed error; the job itself never fails."""
    from hypothesis import given, settings

    from locsum_sdk.batch import run_job

    @settings(max_examples=60)
    @given(line_strategies())
    def check(lines):
        directory = tmp_path_factory.mktemp("hostile")
        source = directory / "in.jsonl"
        source.write_bytes(b"\n".join(lines) + b"\n")
        report = run_job(tiny_summarizer, source, directory / "out.jsonl", progress=False,
                         overrides={"max_length": 6, "num_beams": 1})
        rows = [json.loads(line) for line in (directory / "out.jsonl").read_text(encoding="utf-8").splitlines()]
        assert len(rows) == sum(1 for line in lines if line.strip()) == report.summarized + report.failed
        assert all(isinstance(row["id"], str) and (("summary" in row) != ("error" in row)) for row in rows)

    check()


def test_jobs_on_one_output_at_once_one_writes_and_the_others_are_refused(tmp_path, bundle_dir, corpus, straight):
    output = tmp_path / "out.jsonl"
    jobs = [subprocess.Popen(command(bundle_dir, corpus, output), cwd=ROOT, stderr=subprocess.PIPE, text=True)
            for _ in range(3)]  # a cron job, a manual --resume and one thought dead, started together
    results = [(job.wait(timeout=300), job.stderr.read()) for job in jobs]
    winners = [job for job, (code, _) in zip(jobs, results) if code == 0]
    assert len(winners) == 1, results
    for code, error in results:
        if code != 0:
            assert code == 2 and "is being written by another job (process" in error and error.count("\n") == 1
    assert [json.loads(line) for line in output.read_text().splitlines()] == straight
    assert (tmp_path / "out.jsonl.lock").read_text() == ""  # released cleanly


HOLD = """
import sys, time
from pathlib import Path
from locsum_sdk.job_lock import output_lock
with output_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(300)
"""


def test_a_lock_left_by_a_killed_job_is_taken_over(tmp_path, bundle_dir, corpus, straight):
    output = tmp_path / "out.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(output)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"  # a job that holds the output
    refused = subprocess.run(command(bundle_dir, corpus, output), cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2 and f"(process {holder.pid} on " in refused.stderr  # named, refused at once
    assert not output.exists()  # before any work
    holder.kill()
    holder.wait()
    assert json.loads((tmp_path / "out.jsonl.lock").read_text())["pid"] == holder.pid  # left behind by the kill
    loud = [word for word in command(bundle_dir, corpus, output) if word != "--quiet"]  # the warning is logged
    taken = subprocess.run(loud, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert taken.returncode == 0 and f"stopped without releasing it (process {holder.pid}" in taken.stderr
    assert [json.loads(line) for line in output.read_text().splitlines()] == straight


def test_a_refused_job_names_a_holder_that_records_itself_a_moment_after_taking_the_lock(tmp_path):
    import fcntl
    import threading

    from locsum_sdk.errors import JobLockedError
    from locsum_sdk.job_lock import lock_path, output_lock

    output = tmp_path / "out.jsonl"
    holder = os.open(lock_path(output), os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # taken, not yet recorded: what a refused job can meet when both start at once
    record = json.dumps({"pid": 4321, "host": "h", "started": "s"}).encode()
    threading.Timer(0.2, os.write, (holder, record)).start()
    with pytest.raises(JobLockedError, match=r"another job \(process 4321 on h, started s\)"):
        with output_lock(output):
            pass
    os.close(holder)


def bad_lines() -> list[bytes]:
    """Lines of 25 kinds that cannot be summarized: nested past Python's recursion limit, broken, empty, huge,
    wrong types, wrong encodings."""
    deep = 100_000
    kinds = [
        b"[" * deep + b"]" * deep,
        b'{"a":' * deep + b"1" + b"}" * deep,
        b'{"documents": ' + b"[" * deep + b"]" * deep + b"}",
        b'{"id": ' + b"[" * deep + b"]" * deep + b', "documents": "The board met."}',
        b"{not json",
        b'{"documents": ["The board met."',
        b"\xff\xfe\x00garbage",
        '{"documents": ["The board met."]}'.encode("utf-16-le"),
        b"[1, 2]",
        b'"The board met."',
        b"42",
        b"null",
        b"{}",
        b'{"documents": []}',
        b'{"documents": ""}',
        b'{"documents": " \\t "}',
        b'{"documents": 5}',
        b'{"documents": [1, 2]}',
        b'{"documents": ["The board met.", null]}',
        b'{"documents": "The board met.", "query": 5}',
        b'{"documents": "The board met.", "query": NaN}',
        b'{"id": {"a": 1}, "documents": "The board met."}',
        b'{"id": ' + b"9" * 5000 + b', "documents": "The board met."}',
        b'{"documents": "' + b"word " * 400_000 + b'"}',
        b'{"documents": "\\u200b\\u200b\\u00a0"}',
    ]
    return kinds


def test_good_lines_are_written_once_and_each_bad_line_is_a_typed_error_row(tmp_path, bundle_dir):
    """120 good lines mixed with 80 bad ones of 25 kinds: one row each, in order, and exit 0; a line nested
    100,000 deep is an error row like any other (it used to stop the job, and every resume, at that line)."""
    from locsum_sdk import errors

    rng = random.Random(7)
    kinds = bad_lines()
    lines, expected = [], []
    for i in range(200):
        if i % 5 in (1, 3):
            lines.append(kinds[(i // 5 * 2 + (i % 5 == 3)) % len(kinds)])
            expected.append(None)
        else:
            lines.append(json.dumps({"id": f"good-{i}", "documents": [document(rng, rng.randint(2, 8))]}).encode())
            expected.append(f"good-{i}")
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    assert sum(e is None for e in expected) == 80 and len({*kinds}) == 25
    argv = ["batch", "--bundle", str(bundle_dir), "--input", str(source), "--output", str(output), "--quiet",
            "--max-tokens", "100000", *OPTIONS]
    assert main(argv) == 0
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 200
    for row, good in zip(rows, expected):
        if good:
            assert row["id"] == good and row["summary"]
        else:
            assert isinstance(getattr(errors, row["error"]["type"], None), type), row
    assert main([*argv, "--resume"]) == 0  # a finished job resumes to nothing more
    assert len(output.read_text(encoding="utf-8").splitlines()) == 200
