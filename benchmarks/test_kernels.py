"""The products a decoding step is made of, each alone: ONNX Runtime against torch, and against its own bound.

The step of `test_step_speed` (bart-base-shaped PageSum, 8 pages of 1024 tokens, 4 beams, 2 threads) spends
nearly all its bytes and FLOPs in two kinds of products:

- linear layers: constant weights, one row per page and beam (32 rows): self-attention q/k/v/out, cross-attention
  q/out and the feed-forward of all 6 layers, read once per step; and the LM head on one row per beam;
- cross-attention: per page and head, the beams' queries against the page's 1024 keys, then the probabilities
  against its values (`(N, H, K, d) @ (N, H, d, L)` and `(N, H, K, L) @ (N, H, L, d)`), once per layer.

Each runs alone, every layer on its own arrays so that they are read from memory as in a step (a step reads
about 500 MB; one layer's keys would sit in cache), as an ONNX Runtime graph (the operators the exported decoder
uses: Gemm, MatMul) and as the torch calls the reference backend makes (addmm, matmul), interleaved, on the same
numbers (outputs compared). Printed per kernel and together: the best time of each, the torch / ONNX Runtime
ratio, and each as a multiple of the kernel's bound (bytes over the bandwidth or FLOPs over the matmul throughput,
whichever is larger, both measured in this run). This is where the whole step's ratios in `test_step_speed` come
from; what the step spends beyond these kernels is self-attention, softmax, normalization and small nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from benchmarks.common import BART_BASE, RESULTS, bar_plot, write_result
from benchmarks.roofline import bandwidth_gbs, best_seconds, matmul_gflops, probe_session

torch = pytest.importorskip("torch")

THREADS, BEAMS, PAGE_TOKENS, HEAD_DIM = 2, 4, 1024, 64
SETTLE_SECONDS = 0.5


@dataclass
class Kernel:
    name: str
    bytes: float  # bytes it must read
    flops: float
    onnxruntime: Callable[[], list[np.ndarray]]
    torch: Callable[[], list[torch.Tensor]]
    seconds: dict[str, float] | None = None  # best time per system

    def bound(self, bandwidth: float, gflops: float) -> float:
        return max(self.bytes / (bandwidth * 1e9), self.flops / (gflops * 1e9))


def settled(run, repeats: int) -> float:
    """Best time of `run` once the other library's threads have stopped spinning: both keep their worker threads
    busy-waiting for a while after a call (torch's OpenMP pool for up to a few hundred ms), which would otherwise
    be charged to whichever library runs next."""
    time.sleep(SETTLE_SECONDS)
    return best_seconds(run, repeats)


def linears(rows: int, rng: np.random.Generator) -> Kernel:
    """Every linear layer of the decoder on `rows` rows, chained (each weight with its own memory, read once)."""
    from onnx import helper

    d, ffn = BART_BASE["d_model"], BART_BASE["decoder_ffn_dim"]
    shapes = [(d, d)] * 6 + [(d, ffn), (ffn, d)]  # self q, k, v, out; cross q, out; fc1; fc2 (in, out)
    weights, nodes, previous = {}, [], "x"
    for i, (fan_in, fan_out) in enumerate(shapes * BART_BASE["decoder_layers"]):
        weights[f"w{i}"] = rng.standard_normal((fan_out, fan_in), dtype=np.float32) / fan_in**0.5
        weights[f"b{i}"] = rng.standard_normal(fan_out, dtype=np.float32) * 0.02
        out = f"h{i}" if i + 1 < len(shapes) * BART_BASE["decoder_layers"] else "y"
        nodes.append(helper.make_node("Gemm", [previous, f"w{i}", f"b{i}"], [out], transB=1))
        previous = out
    x = rng.standard_normal((rows, d), dtype=np.float32)
    session = probe_session(nodes, [("x", [rows, d])], THREADS, weights)
    pairs = [(torch.from_numpy(weights[f"w{i}"]), torch.from_numpy(weights[f"b{i}"])) for i in range(len(nodes))]
    tx = torch.from_numpy(x)

    def reference():
        h = tx
        for w, b in pairs:
            h = torch.addmm(b, h, w.t())  # what nn.Linear runs on 2-D rows
        return h

    params = sum(w.size for w in weights.values())
    return Kernel(f"linear layers ({rows} rows)", params * 4.0, 2.0 * rows * params,
                  lambda: session.run(None, {"x": x}), lambda: [reference()])


def lm_head(rows: int, rng: np.random.Generator) -> Kernel:
    from onnx import helper

    d, vocab = BART_BASE["d_model"], BART_BASE["vocab_size"]
    weights = {"w": rng.standard_normal((vocab, d), dtype=np.float32) * 0.02, "b": np.zeros(vocab, np.float32)}
    x = rng.standard_normal((rows, d), dtype=np.float32)
    session = probe_session([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [("x", [rows, d])], THREADS,
                            weights)
    tw, tb, tx = torch.from_numpy(weights["w"]), torch.from_numpy(weights["b"]), torch.from_numpy(x)
    return Kernel(f"LM head ({rows} rows)", float(weights["w"].nbytes), 2.0 * rows * weights["w"].size,
                  lambda: session.run(None, {"x": x}), lambda: [torch.addmm(tb, tx, tw.t())])


def attention_products(name: str, lefts: list[np.ndarray], rights: list[np.ndarray]) -> Kernel:
    """Every layer's batched product `left @ right`, each on its own arrays; `right` is what the step streams (a
    page's keys or values), so together they are read from memory, not from cache, as in a step."""
    from onnx import helper

    nodes = [helper.make_node("MatMul", [f"a{i}", f"b{i}"], [f"y{i}"]) for i in range(len(lefts))]
    inputs = [(f"{side}{i}", list(x.shape)) for i, pair in enumerate(zip(lefts, rights)) for side, x in zip("ab", pair)]
    session = probe_session(nodes, inputs, THREADS, outputs=tuple(f"y{i}" for i in range(len(lefts))))
    feeds = {f"{side}{i}": x for i, pair in enumerate(zip(lefts, rights)) for side, x in zip("ab", pair)}
    pairs = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in zip(lefts, rights)]
    return Kernel(name, float(sum(a.nbytes + b.nbytes for a, b in zip(lefts, rights))),
                  sum(2.0 * a.size * b.shape[-1] for a, b in zip(lefts, rights)),
                  lambda: session.run(None, feeds), lambda: [a @ b for a, b in pairs])


def test_step_kernels_onnxruntime_vs_torch(benchmark, quick):
    torch.set_num_threads(THREADS)
    pages, rounds, repeats = (4, 1, 3) if quick else (8, 3, 5)
    rng = np.random.default_rng(0)
    heads = BART_BASE["decoder_heads"]
    layers = BART_BASE["decoder_layers"]

    def per_layer(*shape, probabilities=False):
        arrays = [rng.random(shape, dtype=np.float32) if probabilities else rng.standard_normal(shape, dtype=np.float32)
                  for _ in range(layers)]
        return [a / a.sum(-1, keepdims=True) for a in arrays] if probabilities else arrays

    kernels = [
        linears(pages * BEAMS, rng),
        lm_head(BEAMS, rng),
        attention_products("cross-attention scores", per_layer(pages, heads, BEAMS, HEAD_DIM),
                           per_layer(pages, heads, HEAD_DIM, PAGE_TOKENS)),
        attention_products("cross-attention values", per_layer(pages, heads, BEAMS, PAGE_TOKENS, probabilities=True),
                           per_layer(pages, heads, PAGE_TOKENS, HEAD_DIM)),
    ]
    for kernel in kernels:
        with torch.inference_mode():
            for got, expected in zip(kernel.onnxruntime(), kernel.torch(), strict=True):
                np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)

    def run():
        with torch.inference_mode():
            for _ in range(rounds):  # alternated, so a slow spell of the machine hits both libraries
                for kernel in kernels:
                    times = {name: settled(getattr(kernel, name), repeats) for name in ("onnxruntime", "torch")}
                    kernel.seconds = {k: min(v, (kernel.seconds or times)[k]) for k, v in times.items()}

    benchmark.pedantic(run, rounds=1, iterations=1)
    bandwidth, gflops = bandwidth_gbs(THREADS), matmul_gflops(THREADS)
    rows, step = [], {"onnxruntime": 0.0, "torch": 0.0, "bound": 0.0}
    print(f"\nmachine: {bandwidth:.1f} GB/s read, {gflops:.0f} GFLOP/s float32 matmul ({THREADS} threads); "
          f"{pages} pages x {PAGE_TOKENS} tokens, {BEAMS} beams")
    print(f"{'kernel, per step':34} {'onnxruntime ms':>15} {'torch ms':>9} {'torch/ort':>9} "
          f"{'ort x bound':>11} {'torch x bound':>13}")
    for k in kernels:
        bound = k.bound(bandwidth, gflops)
        ort_s, torch_s = k.seconds["onnxruntime"], k.seconds["torch"]
        print(f"{k.name:34} {1000 * ort_s:>15.2f} {1000 * torch_s:>9.2f} {torch_s / ort_s:>9.2f} "
              f"{ort_s / bound:>11.2f} {torch_s / bound:>13.2f}")
        rows.append({"kernel": k.name, "bytes": k.bytes, "flops": k.flops,
                     "onnxruntime_ms": 1000 * ort_s, "torch_ms": 1000 * torch_s, "bound_ms": 1000 * bound})
        for name, seconds in (("onnxruntime", ort_s), ("torch", torch_s), ("bound", bound)):
            step[name] += seconds
    print(f"{'all of them':34} {1000 * step['onnxruntime']:>15.2f} {1000 * step['torch']:>9.2f} "
          f"{step['torch'] / step['onnxruntime']:>9.2f} {step['onnxruntime'] / step['bound']:>11.2f} "
          f"{step['torch'] / step['bound']:>13.2f}")
    info = {"pages": pages, "page_tokens": PAGE_TOKENS, "beams": BEAMS, "threads": THREADS, "dtype": "float32",
            "rounds": rounds, "repeats": repeats, "bandwidth_gbs": bandwidth, "matmul_gflops": gflops,
            "kernels": rows, "per_step_ms": {k: 1000 * v for k, v in step.items()}}
    benchmark.extra_info.update(info)
    write_result("kernels", info)
    label = lambda kernel: kernel.split(" (")[0].replace(" ", "\n", 1)  # noqa: E731
    groups = {label(r["kernel"]): {name: r[f"{name}_ms"] for name in ("onnxruntime", "torch", "bound")} for r in rows}
    bar_plot(groups, RESULTS / "kernels.png", "ms per decoding step",
             f"Step kernels, {pages} pages x {PAGE_TOKENS} tokens, {BEAMS} beams, {THREADS} threads")
