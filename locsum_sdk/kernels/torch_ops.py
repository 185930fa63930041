"""The Triton kernels on torch tensors: `launch` runs one op's kernel (CUDA tensors on a GPU, CPU tensors under
`TRITON_INTERPRET=1`), and `use_triton` makes them the CUDA implementations of the ops' torch custom ops
(`locsum::page_combine`, ...), so that `locsum_sdk.modeling` on a CUDA device runs them in place of the ops' torch
maths (inference: the backward formulas stay the torch ones). CPU tensors keep the torch maths."""

from __future__ import annotations

import functools
from typing import Any

from ..ops import doc_scaled_attention, page_combine, snippet_marginalize
from . import Launch, launches


def launch(description: Launch, *inputs: Any) -> tuple[Any, ...]:
    """Run one op's kernel on torch tensors `inputs` (in the op's order); its outputs, in the first input's dtype
    and device."""
    import torch
    import triton

    inputs = tuple(t.contiguous() for t in inputs)
    shapes = [tuple(t.shape) for t in inputs]
    first = inputs[0]
    outputs = tuple(torch.empty(shape, dtype=first.dtype, device=first.device)
                    for shape in description.output_shapes(shapes))
    sizes = description.sizes(shapes)
    dtype = "fp16" if first.dtype == torch.float16 else "fp32"
    description.kernel[description.grid(sizes, triton.cdiv)](*inputs, *sizes, *outputs,
                                                             **description.blocks(dtype, shapes))
    return outputs


@functools.cache
def use_triton() -> None:
    """Register each op's Triton kernel for CUDA tensors (once per process)."""
    descriptions = launches()
    for op in (page_combine, snippet_marginalize, doc_scaled_attention):
        op.torch_op().register_kernel("cuda", functools.partial(launch, descriptions[op.NAME]))
