"""TensorRT quickly-deployable plugins (`tensorrt.plugin`) for the `locsum` ops, each running its Triton kernel.

`register()` registers `locsum::PageCombine`, `locsum::DocScaledAttention` and `locsum::SnippetMarginalize`
with TensorRT: their output shapes and types, the float32/float16 combinations they take, a just-in-time
implementation (the kernel launched from Python on TensorRT's stream) and an ahead-of-time one (the kernel
compiled to PTX while the engine is built and embedded in it, so the engine runs without Python). The ONNX
parser picks the plugin for a node whose op type is the op's name and that carries `plugin_namespace="locsum"`,
and the ahead-of-time implementation when the node also carries `aot=1` (what `exporters.tensorrt.annotate`
writes).

Needs tensorrt (10.9 or later), triton and, for the just-in-time implementation, torch with CUDA.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..ops import doc_scaled_attention, page_combine, snippet_marginalize
from . import Launch

NAMESPACE = "locsum"
OPS = (page_combine.NAME, doc_scaled_attention.NAME, snippet_marginalize.NAME)


def _launches() -> dict[str, Launch]:
    from . import doc_scaled_attention as dsa
    from . import page_combine as pc
    from . import snippet_marginalize as sm

    return {page_combine.NAME: pc.LAUNCH, doc_scaled_attention.NAME: dsa.LAUNCH, snippet_marginalize.NAME: sm.LAUNCH}


def _static(dim: Any) -> Any:
    """A shape expression as an int where it is a constant (the head size), else the expression itself."""
    return dim.constant_value if getattr(dim, "is_constant", False) else dim


def _dtype_name(trt: Any, dtype: Any) -> str:
    return "fp16" if dtype == trt.float16 else "fp32"


def run(launch: Launch, inputs: Sequence[Any], outputs: Sequence[Any], stream: int) -> None:
    """The just-in-time implementation: launch the kernel on TensorRT's buffers and stream."""
    import torch
    import triton

    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        tensors = [torch.as_tensor(t, device="cuda") for t in inputs]
        results = [torch.as_tensor(t, device="cuda") for t in outputs]
        shapes = [tuple(t.shape) for t in tensors]
        sizes = launch.sizes(shapes)
        dtype = "fp16" if tensors[0].dtype == torch.float16 else "fp32"
        launch.kernel[launch.grid(sizes, triton.cdiv)](*tensors, *sizes, *results, **launch.blocks(dtype, shapes))


def compile_ahead(launch: Launch, inputs: Sequence[Any]) -> tuple[bytes, bytes, Any, Any]:
    """The ahead-of-time implementation: the kernel's PTX for the build machine's GPU, its launch parameters as
    expressions of the input shapes, and its int32 size arguments."""
    import tensorrt as trt
    import tensorrt.plugin as trtp
    import triton

    shapes = [[_static(d) for d in t.shape_expr] for t in inputs]
    dtype = _dtype_name(trt, inputs[0].dtype)
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
    tensors: TensorRT reads the inputs, outputs and stream from their parameters."""
    import tensorrt.plugin as trtp

    launches = _launches()
    floats = "FP32|FP16"
    three = f"{floats}, {floats}, BOOL, {floats}, {floats}"  # two float inputs, a bool mask, two float outputs

    pc, sm, dsa = (f"{NAMESPACE}::{op.NAME}" for op in (page_combine, snippet_marginalize, doc_scaled_attention))
    pc_launch, sm_launch, dsa_launch = (launches[op.NAME] for op in (page_combine, snippet_marginalize,
                                                                      doc_scaled_attention))

    @trtp.register(pc)
    def page_combine_desc(hidden: trtp.TensorDesc, scores: trtp.TensorDesc,
                          mask: trtp.TensorDesc) -> tuple[trtp.TensorDesc, trtp.TensorDesc]:
        batch, _, beams, dim = hidden.shape_expr
        return trtp.from_shape_expr((batch, beams, dim), dtype=hidden.dtype), scores.like()

    @trtp.autotune(pc)
    def page_combine_types(hidden, scores, mask, outputs) -> list:
        return [trtp.AutoTuneCombination(three)]

    @trtp.impl(pc)
    def page_combine_run(hidden, scores, mask, outputs, stream) -> None:
        run(pc_launch, (hidden, scores, mask), outputs, stream)

    @trtp.aot_impl(pc)
    def page_combine_ahead(hidden, scores, mask, outputs, tactic) -> tuple:
        return compile_ahead(pc_launch, (hidden, scores, mask))

    @trtp.register(sm)
    def snippet_marginalize_desc(log_probs: trtp.TensorDesc, scores: trtp.TensorDesc,
                                 mask: trtp.TensorDesc) -> tuple[trtp.TensorDesc, trtp.TensorDesc]:
        batch, _, beams, vocab = log_probs.shape_expr
        return trtp.from_shape_expr((batch, beams, vocab), dtype=log_probs.dtype), scores.like()

    @trtp.autotune(sm)
    def snippet_marginalize_types(log_probs, scores, mask, outputs) -> list:
        return [trtp.AutoTuneCombination(three)]

    @trtp.impl(sm)
    def snippet_marginalize_run(log_probs, scores, mask, outputs, stream) -> None:
        run(sm_launch, (log_probs, scores, mask), outputs, stream)

    @trtp.aot_impl(sm)
    def snippet_marginalize_ahead(log_probs, scores, mask, outputs, tactic) -> tuple:
        return compile_ahead(sm_launch, (log_probs, scores, mask))

    @trtp.register(dsa)
    def doc_scaled_attention_desc(query: trtp.TensorDesc, key: trtp.TensorDesc, value: trtp.TensorDesc,
                                  key_mask: trtp.TensorDesc,
                                  doc_mask: trtp.TensorDesc) -> tuple[trtp.TensorDesc, trtp.TensorDesc]:
        batch, heads, queries, _ = query.shape_expr
        return query.like(), trtp.from_shape_expr((batch, key.shape_expr[1], heads, queries), dtype=query.dtype)

    @trtp.autotune(dsa)
    def doc_scaled_attention_types(query, key, value, key_mask, doc_mask, outputs) -> list:
        return [trtp.AutoTuneCombination(f"{floats}, {floats}, {floats}, BOOL, BOOL, {floats}, {floats}")]

    @trtp.impl(dsa)
    def doc_scaled_attention_run(query, key, value, key_mask, doc_mask, outputs, stream) -> None:
        run(dsa_launch, (query, key, value, key_mask, doc_mask), outputs, stream)

    @trtp.aot_impl(dsa)
    def doc_scaled_attention_ahead(query, key, value, key_mask, doc_mask, outputs, tactic) -> tuple:
        return compile_ahead(dsa_launch, (query, key, value, key_mask, doc_mask))
