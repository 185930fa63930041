"""The Triton kernels as the CUDA implementations of the ops' torch custom ops (`locsum::page_combine`, ...), so that
`locsum_sdk.modeling` on a CUDA device runs them in place of the ops' torch maths (inference: the backward formulas
stay the torch ones). CPU tensors keep the torch maths."""

from __future__ import annotations

import functools

from ..ops import doc_scaled_attention, page_combine, snippet_marginalize


@functools.cache
def use_triton() -> None:
    """Register each op's Triton kernel for CUDA tensors (once per process)."""
    from . import doc_scaled_attention as dsa_kernel
    from . import page_combine as pc_kernel
    from . import snippet_marginalize as sm_kernel

    for op, kernel in ((page_combine, pc_kernel), (snippet_marginalize, sm_kernel),
                       (doc_scaled_attention, dsa_kernel)):
        op.torch_op().register_kernel("cuda", kernel.launch)
