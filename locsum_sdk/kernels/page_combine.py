"""Triton kernel of `locsum.PageCombine` (numpy reference: `locsum_sdk.ops.page_combine.reference`).

One program per (item, beam) row and block of the hidden size: a first pass over the units finds the softmax's
maximum and sum over real units, a second accumulates the weighted hidden states; the programs of the first
hidden block also write the weights. Reads hidden once; holds no (units x hidden) tile beyond one block.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .units import mixing_launch, softmax_stats, unit_scores

BLOCK_HIDDEN = 128


@triton.jit
def page_combine_kernel(hidden, scores, mask, batch, units, beams, dim, mixed, weights,
                        BLOCK_U: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)  # item * beams + beam
    item = (row // beams).to(tl.int64)
    beam = (row % beams).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    in_d = d < dim
    offsets = tl.arange(0, BLOCK_U)
    peak, norm = softmax_stats(scores, mask, item, beam, units, beams, BLOCK_U)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for start in range(0, units, BLOCK_U):
        u = start + offsets
        score, real = unit_scores(scores, mask, item, beam, units, beams, u)
        w = tl.where(real, tl.exp(score - peak) / norm, 0.0)  # (BLOCK_U,)
        rows = ((item * units + u) * beams + beam) * dim
        h = tl.load(hidden + rows[:, None] + d[None, :], mask=real[:, None] & in_d[None, :], other=0.0)
        acc += tl.sum(w[:, None] * h.to(tl.float32), axis=0)
        if tl.program_id(1) == 0:
            tl.store(weights + (item * units + u) * beams + beam, w.to(weights.dtype.element_ty), mask=u < units)
    tl.store(mixed + row.to(tl.int64) * dim + d, acc.to(mixed.dtype.element_ty), mask=in_d)


LAUNCH = mixing_launch(page_combine_kernel, "hidden", "dim", "BLOCK_D", BLOCK_HIDDEN)
