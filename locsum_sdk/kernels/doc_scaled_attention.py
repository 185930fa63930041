"""Triton kernel of `locsum.DocScaledAttention` (numpy reference: `locsum_sdk.ops.doc_scaled_attention.reference`).

One program per (item, head) and block of query rows. For each document it runs a flash-attention pass over the
document's tokens (online softmax over real tokens, blocks of `BLOCK_L` keys), and folds the document's context
into an online softmax over real documents keyed by the score of the document's first token. A second, cheap
pass writes the document weights. Keys and values are read once per block of query rows; nothing of size
(documents x tokens) is held; the beams of an item share its documents' keys and values.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import Launch

BLOCK_QUERIES = 16
BLOCK_TOKENS = {"fp32": 32, "fp16": 64}  # keys per block: the fp32 tiles fit 48 KB of shared memory


@triton.jit
def doc_scaled_attention_kernel(query, key, value, key_mask, doc_mask, batch, heads, queries, docs, head_dim,
                                length, out, doc_weights, BLOCK_Q: tl.constexpr, BLOCK_DH: tl.constexpr,
                                BLOCK_L: tl.constexpr, IEEE: tl.constexpr):
    pid = tl.program_id(0)  # item * heads + head
    item = (pid // heads).to(tl.int64)
    head = (pid % heads).to(tl.int64)
    q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    in_q = q < queries
    dd = tl.arange(0, BLOCK_DH)
    in_d = dd < head_dim
    q_rows = (pid.to(tl.int64) * queries + q) * head_dim
    qt = tl.load(query + q_rows[:, None] + dd[None, :], mask=in_q[:, None] & in_d[None, :], other=0.0)
    doc_top = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    doc_sum = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_DH], tl.float32)
    tokens = tl.arange(0, BLOCK_L)
    for n in range(0, docs):
        real_doc = tl.load(doc_mask + item * docs + n) != 0
        grid_row = (item * docs + n) * heads + head
        key_base = grid_row * head_dim * length  # key (B, D, H, d, L)
        value_base = grid_row * length * head_dim  # value (B, D, H, L, d)
        first = tl.load(key + key_base + dd * length, mask=in_d, other=0.0).to(tl.float32)
        first_score = tl.sum(qt.to(tl.float32) * first[None, :], axis=1)  # (BLOCK_Q,)
        top = tl.full([BLOCK_Q], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK_Q], tl.float32)
        context = tl.zeros([BLOCK_Q, BLOCK_DH], tl.float32)
        for start in range(0, length, BLOCK_L):
            l_idx = start + tokens
            in_l = l_idx < length
            real_tok = (tl.load(key_mask + (item * docs + n) * length + l_idx, mask=in_l, other=0) != 0) & in_l
            kt = tl.load(key + key_base + dd[:, None] * length + l_idx[None, :], mask=in_d[:, None] & in_l[None, :],
                         other=0.0)
            if IEEE:
                scores = tl.dot(qt, kt, input_precision="ieee")
            else:
                scores = tl.dot(qt, kt)
            scores = tl.where(real_tok[None, :], scores, float("-inf"))
            new_top = tl.maximum(top, tl.max(scores, axis=1))
            safe = tl.where(new_top == float("-inf"), 0.0, new_top)
            p = tl.exp(scores - safe[:, None])
            scale = tl.exp(top - safe)
            vt = tl.load(value + value_base + l_idx[:, None] * head_dim + dd[None, :],
                         mask=in_l[:, None] & in_d[None, :], other=0.0)
            if IEEE:
                part = tl.dot(p.to(vt.dtype), vt, input_precision="ieee")
            else:
                part = tl.dot(p.to(vt.dtype), vt)
            total = total * scale + tl.sum(p, axis=1)
            context = context * scale[:, None] + part
            top = new_top
        context = context / tl.where(total > 0, total, 1.0)[:, None]
        first_score = tl.where(real_doc, first_score, float("-inf"))
        new_doc_top = tl.maximum(doc_top, first_score)
        safe = tl.where(new_doc_top == float("-inf"), 0.0, new_doc_top)
        scale = tl.exp(doc_top - safe)
        e = tl.exp(first_score - safe)
        doc_sum = doc_sum * scale + e
        acc = acc * scale[:, None] + e[:, None] * context
        doc_top = new_doc_top
    norm = tl.where(doc_sum > 0, doc_sum, 1.0)
    tl.store(out + q_rows[:, None] + dd[None, :], (acc / norm[:, None]).to(out.dtype.element_ty),
             mask=in_q[:, None] & in_d[None, :])
    peak = tl.where(doc_top == float("-inf"), 0.0, doc_top)
    for n in range(0, docs):
        real_doc = tl.load(doc_mask + item * docs + n) != 0
        grid_row = (item * docs + n) * heads + head
        first = tl.load(key + grid_row * head_dim * length + dd * length, mask=in_d, other=0.0).to(tl.float32)
        first_score = tl.sum(qt.to(tl.float32) * first[None, :], axis=1)
        w = tl.where(real_doc, tl.exp(first_score - peak) / norm, 0.0)
        tl.store(doc_weights + grid_row * queries + q, w.to(doc_weights.dtype.element_ty), mask=in_q)


def _sizes(shapes):
    query, key = shapes[0], shapes[1]
    batch, heads, queries, head_dim = query
    return batch, heads, queries, key[1], head_dim, key[4]


def _grid(sizes, cdiv):
    batch, heads, queries = sizes[:3]
    return batch * heads, cdiv(queries, BLOCK_QUERIES), 1


def _blocks(head_dim: int, dtype: str) -> dict:
    return {"BLOCK_Q": BLOCK_QUERIES, "BLOCK_DH": max(16, triton.next_power_of_2(head_dim)),
            "BLOCK_L": BLOCK_TOKENS[dtype], "IEEE": dtype == "fp32"}


LAUNCH = Launch(
    kernel=doc_scaled_attention_kernel,
    inputs=("query", "key", "value", "key_mask", "doc_mask"),
    sizes=_sizes,
    size_names=("batch", "heads", "queries", "docs", "head_dim", "length"),
    outputs=("out", "doc_weights"),
    output_shapes=lambda shapes: (tuple(shapes[0]), (shapes[0][0], shapes[1][1], shapes[0][1], shapes[0][2])),
    grid=_grid,
    blocks=lambda dtype, shapes: _blocks(int(shapes[0][3]), dtype),
)

