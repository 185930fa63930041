"""The encoder's linear layers in the form the default runs them, against float32 at the same shapes.

The default's encoder rounds each run's activations to 8 bits (`DynamicQuantizeLinear`, one scale a call) and
multiplies them by int8 weights with a scale a column (`MatMulIntegerToFloat`, which ONNX Runtime also makes of the
pair); float32 would multiply the same activations by the weights as float32 (`MatMul`, the weights constant and
prepacked). At SmolLM2-135M's shapes (576 wide, 9 + 2 x 3 heads of 64, MLP 1,536) for one page (512 rows) and the
demo's four pages (2,048), the forms in turns, 2 threads: prints each form's operations a second and float32's time
over int8's, the figure that says whether int8 products pay on this CPU (AVX-512 VNNI multiplies 8-bit values four
to a 32-bit lane in one instruction; AVX2 alone takes several).
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.common import cpu_flags, write_result
from benchmarks.roofline import best_seconds, cpu_session
from locsum_sdk.modeling.onnx_builder import MS, GraphBuilder

pytest.importorskip("onnxruntime")

THREADS, REPEATS, ROUNDS = 2, 20, 3
PRODUCTS = {"qkv": (576, 960), "output": (576, 576), "gate_up": (576, 3072), "down": (1536, 576)}  # (in, out)
ROWS = (512, 2048)  # one page, four pages


def product_session(rows: int, width: int, out: int, int8: bool):
    """One linear layer of `width` -> `out` over `rows` activations, as int8 products or float32."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("int8_products" if int8 else "float_products")
    if int8:
        codes, scale, zero = g.op("DynamicQuantizeLinear", "x", outputs=3)
        weights = g.const(rng.integers(-127, 128, (width, out)).astype(np.int8), "weights")
        scales = g.const(np.full(out, 0.01, np.float32), "scales")
        g.op("MatMulIntegerToFloat", codes, weights, scale, scales, zero, domain=MS, name="y")
    else:
        g.op("MatMul", "x", g.const(rng.standard_normal((width, out)).astype(np.float32), "weights"), name="y")
    model = g.model([("x", "float32", [rows, width])], [("y", "float32", [rows, out])])
    return cpu_session(model.SerializeToString(), THREADS)


def test_int8_products_against_float32(benchmark, quick):
    points = [(rows, name) for rows in (ROWS[:1] if quick else ROWS) for name in PRODUCTS]
    results: dict[str, dict[str, float]] = {}

    def run():
        for rows, name in points:
            width, out = PRODUCTS[name]
            x = np.random.default_rng(1).standard_normal((rows, width)).astype(np.float32)
            sessions = {form: product_session(rows, width, out, form == "int8") for form in ("int8", "float32")}
            times: dict[str, list[float]] = {form: [] for form in sessions}
            for index in range(1 if quick else ROUNDS):
                for form in sessions if index % 2 == 0 else list(sessions)[::-1]:
                    times[form].append(best_seconds(lambda s=sessions[form], x=x: s.run(None, {"x": x}), REPEATS))
            operations = 2 * rows * width * out
            results[f"{rows}x{name}"] = {**{f"{form}_gops": operations / min(t) / 1e9 for form, t in times.items()},
                                         "float32_over_int8": min(times["float32"]) / min(times["int8"])}

    benchmark.pedantic(run, rounds=1, iterations=1)
    print(f"\nlinear layers, {THREADS} threads, CPU flags {', '.join(cpu_flags()) or 'unknown'}:")
    for point, figures in results.items():
        print(f"  {point:14s} int8 {figures['int8_gops']:6.0f} GOPS, float32 {figures['float32_gops']:6.0f} GFLOPS; "
              f"float32's time over int8's {figures['float32_over_int8']:.2f}x")
    write_result("int8_products", {"threads": THREADS, "points": results})
