"""TensorRT quickly-deployable plugins (`tensorrt.plugin`) for the `locsum` ops, each running its Triton kernel.

`register()` registers `locsum::PageCombine`, `locsum::DocScaledAttention` and `locsum::SnippetMarginalize`
with TensorRT: their output shapes and types, the float32/float16 combinations they take, and an ahead-of-time
implementation (the kernel compiled to PTX while the engine is built and embedded in it, so the engine runs
without Python). The ONNX parser picks the plugin for a node whose op type is the op's name and that carries
`plugin_namespace="locsum"`, and the ahead-of-time implementation as the node also carries `aot=1` (what
`exporters.tensorrt.annotate` writes).

Needs tensorrt (10.9 or later) and triton.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..ops import doc_scaled_attention, page_combine, snippet_marginalize
from . import Launch, launches

NAMESPACE = "locsum"


def _static(dim: Any) -> Any:
    """A shape expression as an int where it is a constant (the head size), else the expression itself."""
    return dim.constant_value if getattr(dim, "is_constant", False) else dim


def _shapes(inputs: Sequence[Any]) -> list[list[Any]]:
    return [[_static(d) for d in t.shape_expr] for t in inputs]


def outputs(launch: Launch, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """The plugin's output descriptors: the kernel's output shapes, in the first input's dtype."""
    import tensorrt.plugin as trtp

    return tuple(trtp.from_shape_expr(shape, dtype=inputs[0].dtype) for shape in launch.output_shapes(_shapes(inputs)))


def compile_ahead(launch: Launch, inputs: Sequence[Any]) -> tuple[bytes, bytes, Any, Any]:
    """The ahead-of-time implementation: the kernel's PTX for the build machine's GPU, its launch parameters as
    expressions of the input shapes, and its int32 size arguments."""
    import tensorrt as trt
    import tensorrt.plugin as trtp
    import triton

    shapes = _shapes(inputs)
    dtype = "fp16" if inputs[0].dtype == trt.float16 else "fp32"
    sizes = launch.sizes(shapes)
    source = triton.compiler.ASTSource(fn=launch.kernel, signature=launch.signature(dtype, shapes),
                                       constexprs=launch.blocks(dtype, shapes))
    compiled = triton.compile(source)
    params = trtp.KernelLaunchParams()
    params.grid_x, params.grid_y, params.grid_z = launch.grid(
        sizes, lambda n, d: -(-n // d) if isinstance(n, int) else trtp.cdiv(n, d))
    params.block_x = compiled.metadata.num_warps * 32
    params.shared_mem = compiled.metadata.shared
    arguments = trtp.SymIntExprs.from_tuple([trtp.SymInt32(size) for size in sizes])
    return compiled.metadata.name.encode(), compiled.asm["ptx"].encode(), params, arguments


@functools.cache
def register() -> None:
    """Register the three plugins with TensorRT (once per process). The decorated functions spell out their
    tensors: TensorRT reads the inputs and outputs from their parameters."""
    import tensorrt.plugin as trtp

    descriptions = launches()
    floats = "FP32|FP16"
    three = f"{floats}, {floats}, BOOL, {floats}, {floats}"  # two float inputs, a bool mask, two float outputs
    pc, sm, dsa = (descriptions[op.NAME] for op in (page_combine, snippet_marginalize, doc_scaled_attention))
    pc_id, sm_id, dsa_id = (f"{NAMESPACE}::{op.NAME}" for op in (page_combine, snippet_marginalize,
                                                                   doc_scaled_attention))

    @trtp.register(pc_id)
    def page_combine_desc(hidden: trtp.TensorDesc, scores: trtp.TensorDesc,
                          mask: trtp.TensorDesc) -> tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return outputs(pc, (hidden, scores, mask))

    @trtp.autotune(pc_id)
    def page_combine_types(hidden, scores, mask, outputs) -> list:
        return [trtp.AutoTuneCombination(three)]

    @trtp.aot_impl(pc_id)
    def page_combine_ahead(hidden, scores, mask, outputs, tactic) -> tuple:
        return compile_ahead(pc, (hidden, scores, mask))

    @trtp.register(sm_id)
    def snippet_marginalize_desc(log_probs: trtp.TensorDesc, scores: trtp.TensorDesc,
                                 mask: trtp.TensorDesc) -> tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return outputs(sm, (log_probs, scores, mask))

    @trtp.autotune(sm_id)
    def snippet_marginalize_types(log_probs, scores, mask, outputs) -> list:
        return [trtp.AutoTuneCombination(three)]

    @trtp.aot_impl(sm_id)
    def snippet_marginalize_ahead(log_probs, scores, mask, outputs, tactic) -> tuple:
        return compile_ahead(sm, (log_probs, scores, mask))

    @trtp.register(dsa_id)
    def doc_scaled_attention_desc(query: trtp.TensorDesc, key: trtp.TensorDesc, value: trtp.TensorDesc,
                                  key_mask: trtp.TensorDesc,
                                  doc_mask: trtp.TensorDesc) -> tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return outputs(dsa, (query, key, value, key_mask, doc_mask))

    @trtp.autotune(dsa_id)
    def doc_scaled_attention_types(query, key, value, key_mask, doc_mask, outputs) -> list:
        return [trtp.AutoTuneCombination(f"{floats}, {floats}, {floats}, BOOL, BOOL, {floats}, {floats}")]

    @trtp.aot_impl(dsa_id)
    def doc_scaled_attention_ahead(query, key, value, key_mask, doc_mask, outputs, tactic) -> tuple:
        return compile_ahead(dsa, (query, key, value, key_mask, doc_mask))
