"""Triton kernel of `locsum.SnippetMarginalize` (numpy reference: `locsum_sdk.ops.snippet_marginalize.reference`).

One program per (item, beam) row and block of the vocabulary: a first pass over the snippets gives the log of
the softmax's normalizer over real snippets; a second runs an online log-sum-exp over the snippets of
log p(u) + log p(y | u) for its block of tokens, in float32 and in log space (nothing underflows). A token that
every real snippet gives -inf stays -inf, never NaN. The programs of the first vocabulary block also write the
weights p(u).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .units import mixing_launch, softmax_stats

BLOCK_VOCAB = 256


@triton.jit
def snippet_marginalize_kernel(log_probs, scores, mask, batch, units, beams, vocab, mixed, weights,
                               BLOCK_U: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)  # item * beams + beam
    item = (row // beams).to(tl.int64)
    beam = (row % beams).to(tl.int64)
    v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    in_v = v < vocab
    peak, norm = softmax_stats(scores, mask, item, beam, units, beams, BLOCK_U)
    log_norm = peak + tl.log(norm)
    running = tl.full([BLOCK_V], float("-inf"), tl.float32)  # the running maximum of the joint
    acc = tl.zeros([BLOCK_V], tl.float32)  # sum of exp(joint - running)
    for u in range(0, units):
        real = tl.load(mask + item * units + u) != 0
        score = tl.load(scores + (item * units + u) * beams + beam).to(tl.float32)
        log_w = tl.where(real, score - log_norm, float("-inf"))
        row_start = ((item * units + u) * beams + beam) * vocab
        lp = tl.load(log_probs + row_start + v, mask=in_v, other=float("-inf")).to(tl.float32)
        joint = log_w + lp
        top_v = tl.maximum(running, joint)
        safe = tl.where(top_v == float("-inf"), 0.0, top_v)
        acc = acc * tl.exp(running - safe) + tl.exp(joint - safe)
        running = top_v
        if tl.program_id(1) == 0:
            tl.store(weights + (item * units + u) * beams + beam, tl.exp(log_w).to(weights.dtype.element_ty))
    out = tl.log(acc) + tl.where(running == float("-inf"), 0.0, running)
    tl.store(mixed + row.to(tl.int64) * vocab + v, out.to(mixed.dtype.element_ty), mask=in_v)


LAUNCH = mixing_launch(snippet_marginalize_kernel, "log_probs", "vocab", "BLOCK_V", BLOCK_VOCAB)
