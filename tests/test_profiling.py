"""`locsum bench` and `locsum_sdk.profiling`: points measured in fresh processes, lengths parsed, memory fitted."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from locsum_sdk.cli import main
from locsum_sdk.errors import BackendError, BundleError, OptionError
from locsum_sdk.profiling import Point, linear_fit, parse_lengths, read_trace, text_of_tokens


def test_lengths_accept_thousands_and_refuse_nonsense():
    assert parse_lengths("2000, 8k,0.5k") == [2000, 8000, 500]
    for bad in ("", "abc", "0", "2k,x"):
        with pytest.raises(OptionError):
            parse_lengths(bad)


def test_filler_text_has_about_the_asked_tokens(tokenizer):
    for tokens in (200, 3000):
        counted = len(tokenizer.encode(" " + text_of_tokens(tokenizer, tokens), add_special_tokens=False).ids)
        assert abs(counted - tokens) <= 0.1 * tokens


def test_filler_text_refuses_a_tokenizer_that_does_not_split_words():
    from tokenizers import Tokenizer, models

    whole = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))  # no pre-tokenizer: a text is one token
    with pytest.raises(BundleError, match="does not split English words"):
        text_of_tokens(whole, 1000)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux /proc")
def test_peak_memory_of_a_fresh_process_is_its_own():
    """A point's process is started from a larger one (a benchmark run); its peak must not include the parent's."""
    parent = np.ones(600 * 2**20 // 8)  # 600 MB resident in this process when the child is started
    code = "from locsum_sdk.profiling import peak_rss_mb; print(peak_rss_mb())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert parent.sum() > 0 and float(child.stdout) < 300


def test_linear_fit_recovers_a_line():
    points = [Point(t, t, 1, 1, 100.0 + 0.5 * t, 90.0, 0.0, 0.0, []) for t in (1000, 2000, 4000)]
    slope, intercept = linear_fit(points)
    assert slope == pytest.approx(500.0) and intercept == pytest.approx(100.0)
    assert linear_fit(points[:1]) is None


def test_bench_measures_each_length_in_its_own_process(bundle_dir, capsys):
    assert main(["bench", "--bundle", str(bundle_dir), "--tokens", "150,600", "--steps", "3", "--threads", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    small, large = report["points"]
    assert small["target_tokens"] == 150 and large["target_tokens"] == 600
    assert small["steps"] == large["steps"] == 3
    assert large["pages"] > small["pages"] >= 1
    assert large["peak_rss_mb"] >= large["loaded_rss_mb"] > 0 and report["mb_per_1k_tokens"] is not None


def test_bench_refuses_bad_options(bundle_dir, capsys):
    assert main(["bench", "--bundle", str(bundle_dir), "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_trace_is_summed_by_operator_per_run(tmp_path):
    def node(op, micros):
        return {"cat": "Node", "name": f"{op}_token_{micros}_kernel_time", "dur": micros, "args": {"op_name": op}}

    events = [{"cat": "Session", "name": "model_run", "dur": 1000},
              {"cat": "Session", "name": "model_run", "dur": 3000}]
    events += [node("MatMul", 600), node("MatMul", 400), node("Add", 100), node("MatMul", 800)]
    events += [{"cat": "Node", "name": "MatMul_fence_before", "dur": 5, "args": {"op_name": "MatMul"}}]
    events += [node("If", 550), node("Scan", 540)]  # control flow: the time of nodes listed themselves
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(events))
    profile = read_trace("decoder", trace)
    assert (profile.runs, profile.run_ms, profile.kernel_ms) == (2, pytest.approx(2.0), pytest.approx(0.95))
    assert [(o.name, o.calls, o.ms) for o in profile.ops] == [("MatMul", 1.5, pytest.approx(0.9)),
                                                               ("Add", 0.5, pytest.approx(0.05))]
    by_node = read_trace("decoder", trace, by_node=True)
    names = ["MatMul_token_800", "MatMul_token_600", "MatMul_token_400", "Add_token_100"]
    assert [o.name for o in by_node.ops] == names
    trace.write_text(json.dumps(events[2:]))
    with pytest.raises(BackendError, match="no run"):
        read_trace("decoder", trace)


def test_profile_traces_every_run_of_both_graphs(bundle_dir, capsys):
    assert main(["profile", "--bundle", str(bundle_dir), "--tokens", "600", "--steps", "3", "--threads", "1",
                 "--json"]) == 0
    profile = json.loads(capsys.readouterr().out)
    encoder, decoder = profile["graphs"]
    assert (encoder["graph"], decoder["graph"]) == ("encoder", "decoder")
    decoding = profile["decoding"]
    assert decoding["steps"] == decoder["runs"] == 3 and decoding["step_ms"] >= decoding["outside_ms"] >= 0
    assert decoding["outside_ms"] == pytest.approx(max(decoding["step_ms"] - decoder["run_ms"], 0))
    assert decoding["untraced_step_ms"] > 0  # the same summary with tracing off, measured beside it
    assert decoder["runs"] == 3 and encoder["runs"] >= 1
    for graph in (encoder, decoder):
        ms = [o["ms"] for o in graph["ops"]]
        assert ms == sorted(ms, reverse=True) and 0 < graph["kernel_ms"] <= graph["run_ms"]
        assert {"MatMul", "Softmax"} <= {o["name"] for o in graph["ops"]}
    assert main(["profile", "--bundle", str(bundle_dir), "--tokens", "300", "--steps", "2", "--threads", "1",
                 "--nodes", "--top", "3"]) == 0
    table = capsys.readouterr().out
    assert "decoder: 2 runs" in table and table.count(" others ") == 2 and "operator runs a run" in table
    assert "decoding: 2 steps" in table and "outside the decoder graph" in table
    assert re.search(r"untraced: \d+\.\d\d ms a step", table)
    rows = [line.split() for line in table.splitlines() if line.startswith("  ") and " others " not in line]
    nodes = [row for row in rows if row[0] != "node"]
    assert len(nodes) == 6 and all(float(row[1]) == 1.0 for row in nodes), table  # top 3 nodes of each graph
    assert main(["profile", "--bundle", str(bundle_dir), "--tokens", "2k,8k"]) == 2
    assert "one input length" in capsys.readouterr().err


def test_steps_are_counted_where_they_run_not_from_the_tokens_kept(bundle_dir):
    """A summary can keep fewer tokens than it decoded (`whole_sentences`, `known_words` cut its end): the step time
    divides by the backend's steps."""
    from locsum_sdk import Summarizer
    from locsum_sdk.profiling import counted_steps, step_ms

    summarizer = Summarizer.from_pretrained(bundle_dir, threads=1)
    with counted_steps(summarizer) as run:
        summary = summarizer.summarize("The board met on Monday. It approved the budget.", max_length=6,
                                       min_length=6)
    assert run[0] == 5 and step_ms(summary, run[0]) == pytest.approx(1000 * summary.timings["decode"] / 5)
    assert "start" not in vars(summarizer.backend)  # the backend's own method again
    summarizer.summarize("The board met.", max_length=4)
    assert run[0] == 5  # counted within the block only
