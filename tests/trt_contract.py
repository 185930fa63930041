"""The locsum TensorRT plugins driven through NVIDIA's own `tensorrt.plugin` as the ONNX parser and the builder
drive them (see tests/test_trt_plugins.py). Run as a script in a process without `TRITON_INTERPRET` (the kernels
must compile): it prints one JSON object, each case's "ok" or its traceback."""

import json
import re
import sys
import traceback

import trt_standin

from locsum_sdk.kernels import launches, plugins

# Each op's inputs at concrete shapes: (dims, dtype); a dim given as ("c", n) is a build-time constant in every
# exported graph (the hidden size, the vocabulary, the head size), the others are dynamic axes.
CASES = {
    "PageCombine": [((2, 3, 4, ("c", 64)), "float"), ((2, 3, 4), "float"), ((2, 3), "bool")],
    "SnippetMarginalize": [((2, 5, 3, ("c", 1000)), "float"), ((2, 5, 3), "float"), ((2, 5), "bool")],
    "DocScaledAttention": [((2, ("c", 4), 3, ("c", 16)), "float"), ((2, 5, ("c", 4), ("c", 16), 7), "float"),
                           ((2, 5, ("c", 4), 7, ("c", 16)), "float"), ((2, 5, 7), "bool"), ((2, 5), "bool")],
}
SIZE_NAMES = {"PageCombine": (2, 3, 4, 64), "SnippetMarginalize": (2, 5, 3, 1000),
              "DocScaledAttention": (2, 4, 3, 5, 16, 7)}  # the kernel's int32 arguments at those shapes
PRECISIONS = ("FLOAT", "HALF")
OUTPUT_SHAPES = {"PageCombine": [(2, 4, 64), (2, 3, 4)], "SnippetMarginalize": [(2, 3, 1000), (2, 5, 3)],
                 "DocScaledAttention": [(2, 4, 3, 16), (2, 5, 4, 3)]}



def create(trt, op):
    creator = trt.get_plugin_registry().get_creator(op, "1", plugins.NAMESPACE)
    assert creator is not None, f"{plugins.NAMESPACE}::{op} is not registered"
    return creator.create_plugin(op, plugins.NAMESPACE, trt.PluginFieldCollection([]), trt.TensorRTPhase.BUILD,
                                 trt.QuickPluginCreationRequest.STRICT_AOT)


def dims(case):
    return [tuple(d[1] if isinstance(d, tuple) else d for d in shape) for shape, _ in case]


def drive(op: str, precision: str) -> None:
    """Drive one plugin through `tensorrt.plugin` as the parser and builder do, asserting each answer."""
    import tensorrt as trt

    case, launch = CASES[op], launches()[op]
    float_type = getattr(trt.DataType, precision)
    types = [float_type if kind == "float" else trt.DataType.BOOL for _, kind in case]
    plugin = create(trt, op)
    assert plugin.get_num_outputs() == 2

    # output types: TensorRT passes shape expressions that cannot be read yet ("fake")
    assert plugin.get_output_data_types(types, [len(shape) for shape, _ in case]) == [float_type, float_type]

    # output shapes, symbolic
    builder = trt.IExprBuilder()
    inputs = []
    for shape, _ in case:
        exprs = trt.DimsExprs(len(shape))
        for i, d in enumerate(shape):
            exprs[i] = trt.IDimensionExpr(d[1], True) if isinstance(d, tuple) else trt.IDimensionExpr(d, False)
        inputs.append(exprs)
    shapes = plugin.get_output_shapes(inputs, [], builder)
    assert [tuple(e.value for e in out) for out in shapes] == OUTPUT_SHAPES[op]

    # type and format combinations: float32 or float16 throughout, masks bool, linear
    concrete = dims(case) + OUTPUT_SHAPES[op]
    descs = [trt.DynamicPluginTensorDesc(trt.PluginTensorDesc(s, t), s, s, s)
             for s, t in zip(concrete, types + [float_type, float_type])]
    offered = plugin.get_supported_format_combinations(descs, len(case))
    width = len(concrete)
    combos = [tuple(d.type for d in offered[i:i + width]) for i in range(0, len(offered), width)]
    assert tuple(types + [float_type] * 2) in combos and len(combos) == 2
    assert all(d.format == trt.TensorFormat.LINEAR for d in offered)
    plugin.configure_plugin(descs[:len(case)], descs[len(case):])
    tactics = plugin.get_valid_tactics()
    assert tactics == []  # the default tactic only
    plugin.set_tactic(0)

    # the ahead-of-time implementation: launch parameters and scalar arguments as TensorRT evaluates them
    params, arguments = _LaunchParams(), trt_standin.SymExprSetter()
    plugin.get_launch_params(inputs, descs, len(case), params, arguments, builder)
    sizes = SIZE_NAMES[op]
    assert arguments.nbSymExprs == len(launch.size_names) == len(sizes)
    assert [arguments.values[i].expr.value for i in range(len(sizes))] == list(sizes)
    assert all(a.dtype == trt.PluginArgDataType.INT32 for a in arguments.values.values())
    grid = launch.grid(sizes, lambda n, d: -(-n // d))
    assert (params.grid_x.expr.value, params.grid_y.expr.value, params.grid_z.expr.value) == grid
    assert params.block_x.expr.value % 32 == 0 and params.block_x.expr.value >= 32

    # the kernel TensorRT embeds: PTX for sm_90, whose entry takes exactly what TensorRT passes
    name, ptx = plugin.get_kernel([d.desc for d in descs[:len(case)]], [d.desc for d in descs[len(case):]])
    ptx = ptx.decode()
    assert ".target sm_90" in ptx and f".version {plugins.PTX_VERSION // 10}.{plugins.PTX_VERSION % 10}" in ptx
    assert entry_parameters(ptx, name.decode()) == expected_parameters(launch)


class _LaunchParams:
    """What TensorRT hands `get_launch_params` to receive the grid, block and shared memory."""


def entry_parameters(ptx: str, name: str) -> list[str]:
    """The PTX entry's parameter kinds, in order: "ptr" (a 64-bit global pointer) or "u32"."""
    declared = re.search(rf"\.entry {re.escape(name)}\((.*?)\)", ptx, flags=re.DOTALL).group(1)
    return ["ptr" if ".ptr" in p else p.split()[1].lstrip(".") for p in declared.split(",") if p.strip()]


def expected_parameters(launch) -> list[str]:
    """TensorRT calls an ahead-of-time kernel with its input pointers, its scalar arguments, then its outputs."""
    return ["ptr"] * len(launch.inputs) + ["u32"] * len(launch.size_names) + ["ptr"] * len(launch.outputs)



CAPABILITIES = (80, 89, 90)  # A100, L4/L40, H100


def compile_everywhere() -> dict[str, dict]:
    """Each kernel compiled ahead of time (no driver) for every capability and dtype: its PTX version, target and
    entry parameters, and Triton's own parameter count before the entry was trimmed."""
    import triton
    from triton.backends.compiler import GPUTarget

    found = {}
    for op, launch in launches().items():
        shapes = dims(CASES[op])
        for dtype in ("fp32", "fp16"):
            for capability in CAPABILITIES:
                name, ptx, _ = plugins.compile_kernel(launch, dtype, shapes, capability)
                source = triton.compiler.ASTSource(fn=launch.kernel, signature=launch.signature(dtype, shapes),
                                                   constexprs=launch.blocks(dtype, shapes))
                raw = triton.compile(source, target=GPUTarget("cuda", capability, 32),
                                     options={"ptx_version": plugins.PTX_VERSION}).asm["ptx"]
                found[f"{op}-{dtype}-sm_{capability}"] = {
                    "version": re.search(r"^\.version (\S+)", ptx, re.MULTILINE).group(1),
                    "target": re.search(r"^\.target (\S+)", ptx, re.MULTILINE).group(1),
                    "parameters": entry_parameters(ptx, name), "expected": expected_parameters(launch),
                    "triton_parameters": len(entry_parameters(raw, name)),
                }
    return found


def main() -> None:
    results = {}
    trt_standin.load()
    plugins.register("9.0")
    for op in sorted(CASES):
        for precision in PRECISIONS:
            try:
                drive(op, precision)
                results[f"{op}-{precision}"] = "ok"
            except Exception:
                results[f"{op}-{precision}"] = traceback.format_exc()
    json.dump({"driven": results, "compiled": compile_everywhere()}, sys.stdout)


if __name__ == "__main__":
    main()
