"""TensorRT quickly-deployable plugins (`tensorrt.plugin`) for the `locsum` ops, each running its Triton kernel.

`register(capability)` registers `locsum::PageCombine`, `locsum::DocScaledAttention` and `locsum::SnippetMarginalize`
with TensorRT: their output shapes and types, the float32/float16 combinations they take, and an ahead-of-time
implementation (the kernel compiled to PTX for the build GPU's compute capability while the engine is built, and
embedded in it, so the engine runs without Python). The ONNX parser picks the plugin for a node whose op type is
the op's name and that carries `plugin_namespace="locsum"`, and the ahead-of-time implementation as the node also
carries `aot=1` (what `exporters.tensorrt.annotate` writes).

`tensorrt.plugin` reads the decorated functions' annotations with `inspect.signature` and checks them against
its schemas, so this module must not use `from __future__ import annotations` (string annotations fail its
`issubclass` checks), and the return annotations are the exact types it accepts.

The PTX is written for `PTX_VERSION`, the lowest the kernels need, so that a driver of CUDA 12.0 or later can load
it; Triton's trailing scratch parameters, which TensorRT does not pass, are removed from the kernel's entry when
the kernel never reads them (and refused when it does).

Needs tensorrt (10.9 or later) and triton.
"""

import re
import weakref
from collections.abc import Sequence
from typing import Any

from ..errors import ExportError
from ..ops import doc_scaled_attention, page_combine, snippet_marginalize
from . import Launch, launches

NAMESPACE = "locsum"
PTX_VERSION = 80  # PTX ISA 8.0: CUDA 12.0, loadable by drivers from 525.60.13 (Linux) / 527.41 (Windows)
MIN_DRIVER = "525.60.13"


def _static(dim: Any) -> Any:
    """A shape expression as an int where it is a build-time constant (the head size), else the expression itself.

    TensorRT asks for output types with "fake" expressions (no builder yet), whose `is_constant` raises: those
    stay expressions."""
    if getattr(dim, "is_fake", False) or not dim.is_constant:
        return dim
    return dim.constant_value()


def _shapes(inputs: Sequence[Any]) -> list[list[Any]]:
    return [[_static(d) for d in t.shape_expr] for t in inputs]


def outputs(launch: Launch, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """The plugin's output descriptors: the kernel's output shapes, in the first input's dtype."""
    import tensorrt.plugin as trtp

    return tuple(trtp.from_shape_expr(tuple(shape), dtype=inputs[0].dtype)
                 for shape in launch.output_shapes(_shapes(inputs)))


def trim_entry(ptx: str, name: str, count: int) -> str:
    """`ptx` with the entry `name` declaring only its first `count` parameters: the ones TensorRT passes (inputs,
    sizes, outputs). Triton appends scratch pointers that TensorRT does not pass; a kernel that reads one of them
    cannot run as a plugin and is refused."""
    match = re.search(rf"\.entry {re.escape(name)}\((.*?)\)", ptx, flags=re.DOTALL)
    if match is None:
        raise ExportError(f"the PTX of {name} has no entry {name}; this Triton is not supported (use triton>=3.2)")
    params = [p.strip() for p in match.group(1).split(",") if p.strip()]
    if len(params) < count:
        raise ExportError(f"the kernel {name} takes {len(params)} parameters; its plugin passes {count}")
    body = ptx[match.end():]
    for extra in range(count, len(params)):
        if re.search(rf"\b{re.escape(name)}_param_{extra}\b", body):
            raise ExportError(f"the kernel {name} reads Triton's parameter {extra} (scratch memory), which TensorRT "
                              "does not pass; this kernel cannot run as a TensorRT plugin")
    kept = ",\n\t".join(params[:count])
    return ptx[:match.start(1)] + f"\n\t{kept}\n" + ptx[match.end(1):]


def compile_kernel(launch: Launch, dtype: str, shapes: Sequence[Sequence[Any]],
                   capability: int) -> tuple[str, str, Any]:
    """Compile `launch`'s kernel for `dtype` ("fp32" or "fp16") and a GPU of `capability` (e.g. 90), with no driver
    needed; returns (kernel name, PTX for PTX_VERSION whose entry takes what the plugin passes, Triton's metadata:
    warps, shared memory)."""
    import triton
    from triton.backends.compiler import GPUTarget

    source = triton.compiler.ASTSource(fn=launch.kernel, signature=launch.signature(dtype, shapes),
                                       constexprs=launch.blocks(dtype, shapes))
    try:
        compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32),
                                  options={"ptx_version": PTX_VERSION})
    except Exception as err:  # Triton raises its own compilation errors
        raise ExportError(f"Triton could not compile {launch.kernel.__name__} for sm_{capability} ({dtype}): "
                          f"{err}") from err
    name = compiled.metadata.name
    count = len(launch.inputs) + len(launch.size_names) + len(launch.outputs)
    return name, trim_entry(compiled.asm["ptx"], name, count), compiled.metadata


def compile_ahead(launch: Launch, inputs: Sequence[Any], capability: int) -> tuple[bytes, bytes, Any, Any]:
    """The ahead-of-time implementation: the kernel's PTX for the build GPU, its launch parameters as expressions
    of the input shapes, and its int32 size arguments."""
    import tensorrt as trt
    import tensorrt.plugin as trtp

    shapes = _shapes(inputs)
    dtype = "fp16" if inputs[0].dtype == trt.float16 else "fp32"
    name, ptx, metadata = compile_kernel(launch, dtype, shapes, capability)
    sizes = launch.sizes(shapes)
    params = trtp.KernelLaunchParams()
    params.grid_x, params.grid_y, params.grid_z = launch.grid(
        sizes, lambda n, d: -(-n // d) if isinstance(n, int) else trtp.cdiv(n, d))
    params.block_x = metadata.num_warps * 32
    params.shared_mem = metadata.shared
    arguments = trtp.SymIntExprs.from_tuple([trtp.SymInt32(size) for size in sizes])
    return name.encode(), ptx.encode(), params, arguments


def target(compute_capability: str) -> int:
    """Triton's architecture number for a compute capability "major.minor" ("9.0" -> 90)."""
    major, _, minor = compute_capability.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ExportError(f"compute capability {compute_capability!r} is not of the form major.minor")
    return int(major) * 10 + int(minor)


_registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tensorrt.plugin module -> capability


def register(compute_capability: str) -> None:
    """Register the three plugins with TensorRT, their kernels compiled for a GPU of `compute_capability`
    ("major.minor"), once per loaded `tensorrt.plugin`. TensorRT reads the inputs and outputs from the decorated
    functions' annotations."""
    import tensorrt.plugin as trtp

    capability = target(compute_capability)
    if trtp in _registered:
        if _registered[trtp] != capability:
            raise ExportError(f"the locsum plugins are registered for sm_{_registered[trtp]} in this process; build "
                              f"engines for sm_{capability} in a new process")
        return
    try:
        _register(trtp, capability)
    except ExportError:
        raise
    except Exception as err:  # tensorrt.plugin raises ValueError/TypeError on a schema it refuses
        raise ExportError(f"TensorRT refused the locsum plugins ({type(err).__name__}: {err}); check that the "
                          "installed tensorrt is the version README names") from err
    _registered[trtp] = capability


def _register(trtp: Any, capability: int) -> None:
    descriptions = launches()
    floats = "FP32|FP16"
    three = f"{floats}, {floats}, BOOL, {floats}, {floats}"  # two float inputs, a bool mask, two float outputs
    pc, sm, dsa = (descriptions[op.NAME] for op in (page_combine, snippet_marginalize, doc_scaled_attention))
    pc_id, sm_id, dsa_id = (f"{NAMESPACE}::{op.NAME}" for op in (page_combine, snippet_marginalize,
                                                                   doc_scaled_attention))
    Ahead = tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymIntExprs]  # what aot_impl returns
    Two = tuple[trtp.TensorDesc, trtp.TensorDesc]

    @trtp.register(pc_id)
    def page_combine_desc(hidden: trtp.TensorDesc, scores: trtp.TensorDesc, mask: trtp.TensorDesc) -> Two:
        return outputs(pc, (hidden, scores, mask))

    @trtp.autotune(pc_id)
    def page_combine_types(hidden, scores, mask, outputs) -> list[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination(three)]

    @trtp.aot_impl(pc_id)
    def page_combine_ahead(hidden, scores, mask, outputs, tactic) -> Ahead:
        return compile_ahead(pc, (hidden, scores, mask), capability)

    @trtp.register(sm_id)
    def snippet_marginalize_desc(log_probs: trtp.TensorDesc, scores: trtp.TensorDesc,
                                 mask: trtp.TensorDesc) -> Two:
        return outputs(sm, (log_probs, scores, mask))

    @trtp.autotune(sm_id)
    def snippet_marginalize_types(log_probs, scores, mask, outputs) -> list[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination(three)]

    @trtp.aot_impl(sm_id)
    def snippet_marginalize_ahead(log_probs, scores, mask, outputs, tactic) -> Ahead:
        return compile_ahead(sm, (log_probs, scores, mask), capability)

    @trtp.register(dsa_id)
    def doc_scaled_attention_desc(query: trtp.TensorDesc, key: trtp.TensorDesc, value: trtp.TensorDesc,
                                  key_mask: trtp.TensorDesc, doc_mask: trtp.TensorDesc) -> Two:
        return outputs(dsa, (query, key, value, key_mask, doc_mask))

    @trtp.autotune(dsa_id)
    def doc_scaled_attention_types(query, key, value, key_mask, doc_mask, outputs) -> list[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination(f"{floats}, {floats}, {floats}, BOOL, BOOL, {floats}, {floats}")]

    @trtp.aot_impl(dsa_id)
    def doc_scaled_attention_ahead(query, key, value, key_mask, doc_mask, outputs, tactic) -> Ahead:
        return compile_ahead(dsa, (query, key, value, key_mask, doc_mask), capability)
