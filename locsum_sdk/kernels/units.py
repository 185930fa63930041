"""What the unit-softmax kernels share (PageCombine, SnippetMarginalize): device functions and the launch."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from . import Launch

BLOCK_UNITS = 32  # units per pass of the softmax


def mixing_launch(kernel: Any, rows: str, last: str, block: str, width: int) -> Launch:
    """The launch of a kernel that mixes each item's per-unit `rows` (B, U, K, X) by the softmax of their scores
    (B, U, K) over real units (mask (B, U)) into `mixed` (B, K, X), writing the `weights` (B, U, K): one program
    per (item, beam) and block of `width` along X (size `last`, constexpr `block`)."""

    def sizes(shapes):
        batch, units, beams, size = shapes[0]
        return batch, units, beams, size

    def grid(sizes, cdiv):
        batch, _, beams, size = sizes
        return batch * beams, cdiv(size, width), 1

    return Launch(
        kernel=kernel,
        inputs=(rows, "scores", "mask"),
        sizes=sizes,
        size_names=("batch", "units", "beams", last),
        outputs=("mixed", "weights"),
        output_shapes=lambda shapes: ((shapes[0][0], shapes[0][2], shapes[0][3]), tuple(shapes[1])),
        grid=grid,
        blocks=lambda dtype, shapes: {"BLOCK_U": BLOCK_UNITS, block: width},
    )


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
