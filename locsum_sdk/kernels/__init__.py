"""Triton kernels of the `locsum` custom ops: the GPU implementation the TensorRT plugins run.

One module per op, beside its numpy reference in `locsum_sdk.ops`: the `@triton.jit` kernel and its `Launch`
description, which the TensorRT plugins compile ahead of time (`plugins.py`) and `torch_ops.launch` runs on torch
tensors (CUDA tensors on a GPU, CPU tensors under `TRITON_INTERPRET=1`). Every kernel takes its arguments in the order
TensorRT's ahead-of-time plugins call them: input pointers, then int32 sizes, then output pointers. Sizes are
read from the inputs' shapes; tensors are contiguous (TensorRT's linear format). Softmax and log-sum-exp run in
float32 whatever the input dtype (float32 or float16); outputs take the dtype of the first input.

Needs `triton` (and torch for `launch`); nothing in the runtime imports this package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Launch:
    """How one op's kernel is called: its argument names by role, and its grid and sizes from the input shapes.

    `sizes(shapes)` maps the inputs' shapes (sequences of ints, or TensorRT shape expressions) to the kernel's
    int32 size arguments; `grid(sizes, cdiv)` maps those to the launch grid, with `cdiv` the ceiling division of
    the caller's number type (`triton.cdiv`, or `tensorrt.plugin.cdiv` for symbolic shapes); `blocks(dtype,
    shapes)` gives the kernel's compile-time arguments for a dtype name ("fp32" or "fp16"): only dimensions that
    are static in every exported graph (the head size) are read there.
    """

    kernel: Any  # the @triton.jit function
    inputs: tuple[str, ...]
    sizes: Callable[[Sequence[Sequence[Any]]], tuple[Any, ...]]
    size_names: tuple[str, ...]
    outputs: tuple[str, ...]
    output_shapes: Callable[[Sequence[Sequence[Any]]], tuple[tuple[Any, ...], ...]]  # input shapes -> each output's
    grid: Callable[[tuple[Any, ...], Callable[[Any, int], Any]], tuple[Any, Any, Any]]
    blocks: Callable[[str, Sequence[Sequence[Any]]], dict[str, Any]]  # (dtype, input shapes) -> constexprs

    def signature(self, dtype: str, shapes: Sequence[Sequence[Any]]) -> dict[str, str]:
        """The kernel's typed signature for `triton.compiler.ASTSource` (masks are bool: `*i1`)."""
        pointer = {name: ("*i1" if name.endswith("mask") else f"*{dtype}") for name in (*self.inputs, *self.outputs)}
        return {**{n: pointer[n] for n in self.inputs}, **{n: "i32" for n in self.size_names},
                **{n: pointer[n] for n in self.outputs}, **{n: "constexpr" for n in self.blocks(dtype, shapes)}}


def launches() -> dict[str, Launch]:
    """Each op's launch description, by the op's name (imports triton)."""
    from ..ops import doc_scaled_attention, page_combine, snippet_marginalize
    from . import doc_scaled_attention as dsa
    from . import page_combine as pc
    from . import snippet_marginalize as sm

    return {page_combine.NAME: pc.LAUNCH, doc_scaled_attention.NAME: dsa.LAUNCH, snippet_marginalize.NAME: sm.LAUNCH}
