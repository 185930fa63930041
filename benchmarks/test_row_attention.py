"""The default's step reads every page through one GroupQueryAttention a layer (`fused_unit_rows`): how that
operator's time on the CPU depends on the query heads it serves.

One operator alone, as the step calls it: R rows (one per page) of `SEEN` tokens each in a buffer of `BUFFER`, one
new token a row, rotary inside, the scores written (`qk_output`), past and present bound to the same buffers (as
the backend binds them, so nothing is copied), 2 threads; the pages' keys and values in int8 with per-channel
scales (what the default ships) and in float32. Each at the default's heads (9 query heads over 3 KV heads, 64
wide) and with one query head per KV head (3 over 3: a third of the queries, the same keys and values read), the
forms in turns. Prints ms a call (the best of `REPEATS`) and the 9-head / 3-head ratio: near 3 where the kernel goes
over a KV head's rows once for each query head that reads them, near 1 where it reads them once for the group.

Beside them, what reading each KV head's rows once for its 3 query heads could take with stock operators: the 3
queries of a group (quantized per call, `DynamicQuantizeLinear`) against int8 keys stored transposed
(`MatMulIntegerToFloat`), a float32 softmax, and the int8 values cast to float32 for a `MatMul`: the attention alone
(no rotary, no summary positions, no document weights, the rows not written), so a bound on what such a step would
gain, printed as its time over GroupQueryAttention's at 9 heads over int8 rows.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from benchmarks.common import write_result
from benchmarks.roofline import best_seconds, cpu_session
from locsum_sdk.modeling.onnx_builder import MS, GraphBuilder

ort = pytest.importorskip("onnxruntime")

KV_HEADS, HEAD_DIM, THREADS = 3, 64, 2
SEEN, BUFFER = 512, 768  # a page's tokens, and its row with the summary's room (the default's 256 tokens)
REPEATS, ROUNDS = 200, 3


def attention_graph(heads: int, rows: int, int8: bool) -> bytes:
    """The operator alone, written as the step writes it (`GraphBuilder`): outputs out, pk_out, pv_out, scores."""
    g = GraphBuilder("row_attention")
    cache = "int8" if int8 else "float32"
    attributes: dict = {"num_heads": heads, "kv_num_heads": KV_HEADS, "do_rotary": 1, "qk_output": 1}
    scales = []
    if int8:
        scales = ["", "", "", *(g.const(np.full((1, KV_HEADS, 1, HEAD_DIM), 0.05, np.float32), name)
                                for name in ("k_scale", "v_scale"))]
        attributes.update(k_quant_type="PER_CHANNEL", v_quant_type="PER_CHANNEL", kv_cache_bit_width=8)
    g.op("GroupQueryAttention", "qkv", "", "", "pk", "pv", "seen", "total", "cos", "sin", *scales, outputs=4,
         domain=MS, **attributes)
    g.nodes[-1].output[:] = ["out", "pk_out", "pv_out", "scores"]
    model = g.model([("qkv", "float32", [rows, 1, (heads + 2 * KV_HEADS) * HEAD_DIM]),
                     *((name, cache, [rows, KV_HEADS, BUFFER, HEAD_DIM]) for name in ("pk", "pv")),
                     ("seen", "int32", [rows]), ("total", "int32", [1]),
                     *((name, "float32", [BUFFER, HEAD_DIM // 2]) for name in ("cos", "sin"))],
                    [("out", "float32", None), ("pk_out", cache, None), ("pv_out", cache, None),
                     ("scores", "float32", None)])
    return model.SerializeToString()


def group_reading_graph(rows: int) -> bytes:
    """The 3 queries of each KV head against its int8 rows, read once (see the module docstring): output out."""
    g = GraphBuilder("group_reading")
    codes, scale, zero = g.op("DynamicQuantizeLinear", "queries", outputs=3)
    scores = g.op("MatMulIntegerToFloat", codes, "keys", scale, g.const(np.float32(0.05), "k_scale"), zero, domain=MS)
    weights = g.op("Softmax", scores, axis=-1)  # (rows, KV, 3, SEEN)
    g.op("MatMul", weights, g.op("Cast", "values", to=onnx.TensorProto.FLOAT), name="out")
    model = g.model([("queries", "float32", [rows, KV_HEADS, 3, HEAD_DIM]),
                     ("keys", "int8", [rows, KV_HEADS, HEAD_DIM, SEEN]),
                     ("values", "int8", [rows, KV_HEADS, SEEN, HEAD_DIM])],
                    [("out", "float32", [rows, KV_HEADS, 3, HEAD_DIM])])
    return model.SerializeToString()


def timed_group_reading(rows: int) -> float:
    """Seconds a call of `group_reading_graph`, the best of REPEATS."""
    session = cpu_session(group_reading_graph(rows), THREADS)
    rng = np.random.default_rng(0)
    feeds = {"queries": rng.standard_normal((rows, KV_HEADS, 3, HEAD_DIM)).astype(np.float32),
             "keys": rng.integers(-100, 100, (rows, KV_HEADS, HEAD_DIM, SEEN)).astype(np.int8),
             "values": rng.integers(-100, 100, (rows, KV_HEADS, SEEN, HEAD_DIM)).astype(np.int8)}
    return best_seconds(lambda: session.run(None, feeds), REPEATS)


def timed_call(heads: int, rows: int, int8: bool) -> float:
    """Seconds a call, the best of REPEATS, past and present bound to one buffer each."""
    session = cpu_session(attention_graph(heads, rows, int8), THREADS)
    rng = np.random.default_rng(0)
    shape = (rows, KV_HEADS, BUFFER, HEAD_DIM)
    caches = [rng.integers(-100, 100, shape).astype(np.int8) if int8 else rng.standard_normal(shape).astype(np.float32)
              for _ in range(2)]
    key, value = (ort.OrtValue.ortvalue_from_numpy(cache) for cache in caches)
    binding = session.io_binding()
    feeds = {"qkv": rng.standard_normal((rows, 1, (heads + 2 * KV_HEADS) * HEAD_DIM)).astype(np.float32),
             "seen": np.full(rows, SEEN, np.int32), "total": np.array([SEEN + 1], np.int32),
             "cos": np.ones((BUFFER, HEAD_DIM // 2), np.float32), "sin": np.zeros((BUFFER, HEAD_DIM // 2), np.float32)}
    for name, array in feeds.items():
        binding.bind_cpu_input(name, array)
    binding.bind_ortvalue_input("pk", key)
    binding.bind_ortvalue_input("pv", value)
    binding.bind_ortvalue_output("pk_out", key)  # written in place, one new token a row (the same slot each call)
    binding.bind_ortvalue_output("pv_out", value)
    binding.bind_output("out")
    binding.bind_output("scores")
    return best_seconds(lambda: session.run_with_iobinding(binding), REPEATS)


def test_row_attention_time_by_query_heads(benchmark, quick):
    points = [4] if quick else [4, 17]  # the demo's 4 pages, and 8k tokens' 17
    forms = [(cache, heads) for cache in ("int8", "float32") for heads in (9, 3)]
    results = {}

    def run():
        for rows in points:
            times: dict[str, list[float]] = {f"{cache}/{heads}": [] for cache, heads in forms}
            times["grouped"] = []
            for index in range(1 if quick else ROUNDS):
                for cache, heads in forms if index % 2 == 0 else forms[::-1]:
                    times[f"{cache}/{heads}"].append(timed_call(heads, rows, cache == "int8"))
                times["grouped"].append(timed_group_reading(rows))
            results[rows] = {key: 1000 * min(values) for key, values in times.items()}

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\nGroupQueryAttention alone, {SEEN} tokens a row in a buffer of {BUFFER}, {THREADS} threads, ms a call:")
    for rows, ms in results.items():
        ratios = {cache: ms[f"{cache}/9"] / ms[f"{cache}/3"] for cache in ("int8", "float32")}
        print(f"  {rows:2d} rows: " + ", ".join(f"{key} heads {value:.3f}" for key, value in ms.items() if "/" in key)
              + "; 9 / 3 query heads: " + ", ".join(f"{cache} {ratio:.2f}x" for cache, ratio in ratios.items())
              + f"; each KV head read once (the attention alone) {ms['grouped']:.3f}, "
              f"{ms['grouped'] / ms['int8/9']:.2f}x GroupQueryAttention's time at 9 heads over int8 rows")
    write_result("row_attention", {"seen": SEEN, "buffer": BUFFER, "threads": THREADS,
                                   "ms": {str(rows): ms for rows, ms in results.items()}})
