"""This machine's limits, measured inside the run, and the lower bound of one decoding step.

Bandwidth: ONNX Runtime multiplying a row vector by a 512 MB float32 matrix, the way a decoding step streams its
weights (a ReduceSum over the same bytes read under half as fast here, bounded by the reduction, not by
memory, which would have made every bound too loose). Matmul throughput: ONNX Runtime multiplying two
1024 x 1024 float32 matrices, the second a constant weight (prepacked, as the model's layers are). A step must
at least read the decoder's weights once (the LM head reads the whole embedding table) and the cross
keys/values of every unit; its bound is that many bytes over the bandwidth, or its FLOPs over the matmul
throughput, whichever is larger.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


def cpu_session(model: bytes, threads: int):
    """An ONNX Runtime session of the serialized `model` on the CPU, `threads` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def probe_session(nodes, inputs, threads: int, weights: dict[str, np.ndarray] | None = None,
                  outputs: tuple[str, ...] = ("y",)):
    """An ONNX Runtime session of `nodes`: float32 inputs (name, shape), constant `weights`, float32 `outputs`."""
    from onnx import TensorProto, helper, numpy_helper

    value = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    graph = helper.make_graph(nodes, "probe", [value(n, s) for n, s in inputs], [value(n, None) for n in outputs],
                              initializer=[numpy_helper.from_array(w, n) for n, w in (weights or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return cpu_session(model.SerializeToString(), threads)


def best_seconds(run, repeats: int) -> float:
    """The fastest of `repeats` timed calls of `run`, after one untimed call."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def bandwidth_gbs(threads: int = 2, megabytes: int = 512, rows: int = 4096) -> float:
    from onnx import helper

    matrix = np.ones((rows, megabytes * 2**20 // 4 // rows), dtype=np.float32)
    vector = np.ones((1, rows), dtype=np.float32)
    session = probe_session([helper.make_node("MatMul", ["x", "w"], ["y"])],
                            [("x", list(vector.shape)), ("w", list(matrix.shape))], threads)
    return matrix.nbytes / best_seconds(lambda: session.run(None, {"x": vector, "w": matrix}), 5) / 1e9


def matmul_gflops(threads: int = 2, size: int = 1024) -> float:
    """Square float32 MatMul with the right-hand matrix a constant weight, prepacked as the model's layers are."""
    from onnx import helper

    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    session = probe_session([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [size, size])], threads, {"b": a})
    return 2 * size**3 / best_seconds(lambda: session.run(None, {"a": a}), 5) / 1e9


@dataclass(frozen=True)
class StepBound:
    bytes: float  # bytes a step must read
    flops: float  # multiply-adds x 2 of a step
    seconds: float  # the larger of bytes / bandwidth and flops / throughput
    serial_seconds: float  # their sum: reading and computing at the machine's rates, never overlapped


def step_bound(config: dict, weight_bytes: int, units: int, length: int, beams: int, past: int,
               bandwidth: float, gflops: float, rows: int | None = None) -> StepBound:
    """Lower bound of one decoding step with `units` units of `length` tokens and `beams` beams; `rows`: the rows
    the decoder layers run on (PageSum, the default: one per page and beam; HierEncDec: one per beam)."""
    d, layers, ffn, vocab = config["d_model"], config["decoder_layers"], config["decoder_ffn_dim"], config["vocab_size"]
    rows = units * beams if rows is None else rows
    cross = units * layers * 2 * d * length * 4  # keys and values, float32
    cache = rows * layers * 2 * d * past * 4
    flops = 2 * rows * layers * (6 * d * d + 2 * d * ffn)  # self q,k,v,out + cross q,out + FFN on every row
    flops += 2 * beams * layers * 2 * d * units * length + 2 * rows * layers * 2 * d * past  # scores and mixing
    flops += 2 * beams * d * vocab  # LM head on the mixed rows only
    total = weight_bytes + cross + cache
    read, compute = total / (bandwidth * 1e9), flops / (gflops * 1e9)
    return StepBound(total, flops, max(read, compute), read + compute)
