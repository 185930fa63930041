"""Triton kernel of `locsum.PageCombine` (numpy reference: `locsum_sdk.ops.page_combine.reference`).

One program per (item, beam) row and block of the hidden size: a first pass over the units finds the softmax's
maximum and sum over real units, a second accumulates the weighted hidden states; the programs of the first
hidden block also write the weights. Reads hidden once; holds no (units x hidden) tile beyond one block.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import Launch

BLOCK_UNITS = 32
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
    top = tl.full([BLOCK_U], float("-inf"), tl.float32)
    for start in range(0, units, BLOCK_U):
        u = start + offsets
        real = (tl.load(mask + item * units + u, mask=u < units, other=0) != 0) & (u < units)
        score = tl.load(scores + (item * units + u) * beams + beam, mask=real, other=0.0).to(tl.float32)
        top = tl.maximum(top, tl.where(real, score, float("-inf")))
    peak = tl.max(top, axis=0)
    peak = tl.where(peak == float("-inf"), 0.0, peak)
    total = tl.zeros([BLOCK_U], tl.float32)
    for start in range(0, units, BLOCK_U):
        u = start + offsets
        real = (tl.load(mask + item * units + u, mask=u < units, other=0) != 0) & (u < units)
        score = tl.load(scores + (item * units + u) * beams + beam, mask=real, other=0.0).to(tl.float32)
        total += tl.where(real, tl.exp(score - peak), 0.0)
    norm = tl.sum(total, axis=0)
    norm = tl.where(norm > 0, norm, 1.0)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for start in range(0, units, BLOCK_U):
        u = start + offsets
        real = (tl.load(mask + item * units + u, mask=u < units, other=0) != 0) & (u < units)
        score = tl.load(scores + (item * units + u) * beams + beam, mask=real, other=0.0).to(tl.float32)
        w = tl.where(real, tl.exp(score - peak) / norm, 0.0)  # (BLOCK_U,)
        rows = ((item * units + u) * beams + beam) * dim
        h = tl.load(hidden + rows[:, None] + d[None, :], mask=real[:, None] & in_d[None, :], other=0.0)
        acc += tl.sum(w[:, None] * h.to(tl.float32), axis=0)
        if tl.program_id(1) == 0:
            tl.store(weights + (item * units + u) * beams + beam, w.to(weights.dtype.element_ty), mask=u < units)
    tl.store(mixed + row.to(tl.int64) * dim + d, acc.to(mixed.dtype.element_ty), mask=in_d)


def _sizes(shapes):
    batch, units, beams, dim = shapes[0]
    return batch, units, beams, dim


def _grid(sizes, cdiv):
    batch, _, beams, dim = sizes
    return batch * beams, cdiv(dim, BLOCK_HIDDEN), 1


LAUNCH = Launch(
    kernel=page_combine_kernel,
    inputs=("hidden", "scores", "mask"),
    sizes=_sizes,
    size_names=("batch", "units", "beams", "dim"),
    outputs=("mixed", "weights"),
    grid=_grid,
    blocks=lambda dtype, shapes: {"BLOCK_U": BLOCK_UNITS, "BLOCK_D": BLOCK_HIDDEN},
)


def launch(hidden, scores, mask):
    """PageCombine on torch tensors: hidden (B, U, K, D), scores (B, U, K), mask (B, U) -> mixed, weights."""
    import torch

    hidden, scores, mask = hidden.contiguous(), scores.contiguous(), mask.contiguous()
    batch, units, beams, dim = hidden.shape
    mixed = torch.empty((batch, beams, dim), dtype=hidden.dtype, device=hidden.device)
    weights = torch.empty((batch, units, beams), dtype=scores.dtype, device=scores.device)
    sizes = _sizes([hidden.shape])
    page_combine_kernel[_grid(sizes, triton.cdiv)](hidden, scores, mask, *sizes, mixed, weights,
                                                   **LAUNCH.blocks("", []))
    return mixed, weights
