"""Device functions the unit-softmax kernels share (PageCombine, SnippetMarginalize)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def unit_scores(scores, mask, item, beam, units, beams, u):
    """The scores (float32) of units `u` of one (item, beam) row, and which of them are real units."""
    real = (tl.load(mask + item * units + u, mask=u < units, other=0) != 0) & (u < units)
    score = tl.load(scores + (item * units + u) * beams + beam, mask=real, other=0.0).to(tl.float32)
    return score, real


@triton.jit
def softmax_stats(scores, mask, item, beam, units, beams, BLOCK_U: tl.constexpr):
    """Max (0 where no unit is real) and sum of exp(score - max) over the real units of one (item, beam) row (sum 1
    where it is 0): the softmax over units in two passes of BLOCK_U units."""
    offsets = tl.arange(0, BLOCK_U)
    top = tl.full([BLOCK_U], float("-inf"), tl.float32)
    for start in range(0, units, BLOCK_U):
        score, real = unit_scores(scores, mask, item, beam, units, beams, start + offsets)
        top = tl.maximum(top, tl.where(real, score, float("-inf")))
    peak = tl.max(top, axis=0)
    peak = tl.where(peak == float("-inf"), 0.0, peak)
    total = tl.zeros([BLOCK_U], tl.float32)
    for start in range(0, units, BLOCK_U):
        score, real = unit_scores(scores, mask, item, beam, units, beams, start + offsets)
        total += tl.where(real, tl.exp(score - peak), 0.0)
    norm = tl.sum(total, axis=0)
    return peak, tl.where(norm > 0, norm, 1.0)
