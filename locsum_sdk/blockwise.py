"""Linear-layer weights in blocks of 32 along their input axis, as ONNX Runtime's `MatMulNBits` reads them.

A weight W (N outputs, K inputs) is held as `bits`-bit codes (N, K) with one float32 scale per block of 32 inputs
of each output, and, where a block is not centred on zero, a float32 offset:

    W[n, k] = scale[n, b] * (code[n, k] - 2^(bits-1)) + offset[n, b]        b = k // 32

or, in place of the centre 2^(bits-1), a whole code per block (`zero_points`):

    W[n, k] = scale[n, b] * (code[n, k] - zero_point[n, b])

`MatMulNBits` computes x @ (scale * (code - centre or zero point))^T in its fastest form on the CPU (a float zero
point per block is 40x slower there, and an 8-bit one is refused). The offsets are then a term of their own,
x @ offset-per-block^T = (x summed over each block) @ offset^T: `modeling.fused_llama.linear` takes the block sums
from an 8-bit `MatMulNBits` of exact rows (shared with a LoRA adapter's A) and adds their product with the offsets
in one Gemm.

Blocks come straight from a GGUF file's bytes where its type has one step and at most one minimum per 32 values
(Q4_0, Q4_1, Q4_K as 4-bit codes; Q5_0, Q5_1, Q5_K and Q8_0 as 8-bit ones, and IQ4_NL and IQ4_XS as 8-bit codes
of their 16 levels: the model that runs is the file's, code for code, `ggml_blocks.affine`), or from float32 values
(`quantize`), 4-bit (a step and a whole zero point per block, nothing beside the product) or 8-bit (symmetric, as
Q8_0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import BundleError, ExportError
from .ggml_blocks import AFFINE, TYPES, affine, type_name
from .gguf_file import GGUFFile

BLOCK = 32
BITS = (4, 8)
GGUF_TYPES = {kind: TYPES[kind].name for kind in AFFINE}  # ggml types whose blocks are taken as they are
FORMS = ("codes", "scales", "offsets")  # the forms of a file's blocks a base recipe takes (`BlockWeight.form`)


@dataclass(frozen=True)
class BlockWeight:
    """A (N, K) weight as `bits`-bit codes in blocks of 32 along K (see the module docstring)."""

    codes: np.ndarray  # (N, K) uint8, each below 2^bits
    scales: np.ndarray  # (N, ceil(K/32)) float32
    offsets: np.ndarray | None  # (N, ceil(K/32)) float32; None where every block is centred
    bits: int
    zero_points: np.ndarray | None = None  # (N, ceil(K/32)) uint8 codes standing for zero; None: the centre

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    @property
    def centre(self) -> int:
        return 1 << (self.bits - 1)

    def values(self) -> np.ndarray:
        """The weight (N, K) in float32, block by block as `MatMulNBits` dequantizes it, offsets added."""
        rows, columns = self.shape
        zeros = np.float32(self.centre) if self.zero_points is None else self.zero_points[:, :, None].astype(np.float32)
        codes = _padded(self.codes, self.centre).astype(np.float32).reshape(rows, -1, BLOCK)
        blocks = (codes - zeros) * self.scales[:, :, None]
        if self.offsets is not None:
            blocks = blocks + self.offsets[:, :, None]
        return blocks.reshape(rows, -1)[:, :columns].astype(np.float32)

    def packed(self) -> np.ndarray:
        """The codes as `MatMulNBits`'s input B: (N, blocks, 32 * bits / 8) uint8, two 4-bit codes a byte (the first
        in the low nibble), K padded to whole blocks with centred codes."""
        codes = _padded(self.codes, self.centre)
        rows = codes.shape[0]
        if self.bits == 8:
            return codes.reshape(rows, -1, BLOCK)
        return _nibbles(codes).reshape(rows, -1, BLOCK // 2)

    def form(self, name: str) -> np.ndarray:
        """What a graph holds of this weight, C-contiguous: `codes` (`packed`), `scales` (N * blocks,), `offsets`
        transposed (blocks, N), the right factor of the offsets' product (`fused_llama.linear`), or `zero_points` as
        `MatMulNBits` reads them (N * ceil(blocks * bits / 8),: two 4-bit ones a byte, the first in the low nibble)."""
        if name == "codes":
            return np.ascontiguousarray(self.packed())
        if name == "scales":
            return np.ascontiguousarray(self.scales.reshape(-1))
        if name == "offsets" and self.offsets is not None:
            return np.ascontiguousarray(self.offsets.T)
        if name == "zero_points":
            zeros = (np.full(self.scales.shape, self.centre, np.uint8) if self.zero_points is None
                     else self.zero_points)
            if self.bits == 4:
                zeros = _nibbles(np.pad(zeros, ((0, 0), (0, zeros.shape[1] % 2)), constant_values=self.centre))
            return np.ascontiguousarray(zeros.reshape(-1))
        raise ExportError(f"a block weight has no form {name!r} (its forms: codes, scales, zero_points, and offsets "
                          "where it has them)")


def from_forms(codes: np.ndarray, scales: np.ndarray, columns: int, bits: int,
               zero_points: np.ndarray | None = None) -> BlockWeight:
    """A weight of `columns` inputs back from what a graph holds of it: `MatMulNBits`'s B (N, blocks, 32 * bits / 8),
    scales (N * blocks,) and, where it has them, zero points (`BlockWeight.form`)."""
    rows = codes.shape[0]
    codes = codes.reshape(rows, -1)
    if bits == 4:
        codes = _from_nibbles(codes)
    scales = scales.reshape(rows, -1).astype(np.float32)
    if zero_points is not None:
        zero_points = zero_points.reshape(rows, -1)
        if bits == 4:
            zero_points = _from_nibbles(zero_points)
        zero_points = np.ascontiguousarray(zero_points[:, :scales.shape[1]])
    return BlockWeight(np.ascontiguousarray(codes[:, :columns]), scales, None, bits, zero_points)


def _nibbles(values: np.ndarray) -> np.ndarray:
    """4-bit values (rows, even count) two a byte, the first in the low nibble: (rows, count / 2) uint8."""
    return (values[:, 0::2] | (values[:, 1::2] << np.uint8(4))).astype(np.uint8)


def _from_nibbles(packed: np.ndarray) -> np.ndarray:
    """`_nibbles` undone: (rows, bytes) uint8 -> (rows, 2 * bytes) values."""
    return np.stack([packed & np.uint8(15), packed >> np.uint8(4)], axis=-1).reshape(packed.shape[0], -1)


def _padded(codes: np.ndarray, centre: int) -> np.ndarray:
    rows, columns = codes.shape
    extra = -columns % BLOCK
    if not extra:
        return codes
    return np.concatenate([codes, np.full((rows, extra), centre, np.uint8)], axis=1)


def quantize(weight: np.ndarray, bits: int) -> BlockWeight:
    """Float32 (N, K) -> blocks: 4-bit with a step and a whole code standing for zero each (`zero_point_blocks`), or
    8-bit symmetric (step max|w| / 127)."""
    if bits not in BITS:
        raise ExportError(f"block weights are 4- or 8-bit, not {bits}-bit")
    weight = np.asarray(weight, np.float32)
    rows, columns = weight.shape
    extra = -columns % BLOCK
    padded = np.concatenate([weight, np.zeros((rows, extra), np.float32)], axis=1) if extra else weight
    blocks = padded.reshape(rows, -1, BLOCK)
    if bits == 4:
        return zero_point_blocks(blocks, columns)
    scales = np.abs(blocks).max(-1) / np.float32(127)
    safe = np.where(scales > 0, scales, np.float32(1))
    codes = np.clip(np.rint(blocks / safe[..., None]), -127, 127) + 128
    return BlockWeight(codes.astype(np.uint8).reshape(rows, -1)[:, :columns], scales.astype(np.float32), None, 8)


STRETCHES = (1.0, 0.96, 0.92, 0.88, 1.04, 15 / 14)  # steps tried a block, as fractions of its range over 15: a
# block these wrote, quantized again, is found as it is (its codes span 16 levels, or 15 at the last step)


def zero_point_blocks(blocks: np.ndarray, columns: int) -> BlockWeight:
    """4-bit blocks of float32 values (rows, blocks, 32) with a step and a whole code standing for zero each, as
    `MatMulNBits` takes them with no term of their own: value = step * (code - zero point). Each block keeps, of a
    few steps near its range (zero included) over 15 (`STRETCHES`), the one whose codes are nearest its values
    (least squares, summed in float64 one position at a time, so that every machine chooses alike). Blocks it wrote
    come back unchanged when their values are quantized again."""
    rows = blocks.shape[0]
    low, high = np.minimum(blocks.min(-1), 0), np.maximum(blocks.max(-1), 0)  # whole zero points: the codes must
    # reach zero, so a block of one sign (or one value) spans from zero to its farthest value
    best_error = best_scales = best_zeros = None
    for stretch in STRETCHES:
        scales = (high - low) / np.float32(15) * np.float32(stretch)
        safe = np.where(scales > 0, scales, np.float32(1))
        zeros = np.clip(np.rint(-low / safe), 0, 15)
        codes = np.clip(np.rint(blocks / safe[..., None]) + zeros[..., None], 0, 15)
        misses = ((codes - zeros[..., None]) * safe[..., None] - blocks).astype(np.float64)
        error = np.zeros(misses.shape[:-1])
        for position in range(BLOCK):
            error += np.square(misses[..., position])
        if best_error is None:
            best_error, best_scales, best_zeros = error, safe, zeros
        else:
            better = error < best_error
            best_error = np.where(better, error, best_error)
            best_scales, best_zeros = np.where(better, safe, best_scales), np.where(better, zeros, best_zeros)
    codes = np.clip(np.rint(blocks / best_scales[..., None]) + best_zeros[..., None], 0, 15)
    return BlockWeight(codes.astype(np.uint8).reshape(rows, -1)[:, :columns], best_scales.astype(np.float32), None, 4,
                       best_zeros.astype(np.uint8))


def from_gguf(raw: np.ndarray, kind: int, shape: tuple[int, int]) -> BlockWeight:
    """A GGUF tensor's bytes (uint8) of a ggml type in `GGUF_TYPES` and its numpy shape (N, K) -> its blocks, code for
    code. The file's value step * (q - c) + minimum per 32 is, with codes of 4 bits (Q4_*), scale * (q - 8) + (step
    * (8 - c) + minimum); with codes of 5 or 8 bits, held in 8 (Q5_*, Q8_0, IQ4_*'s levels), scale * ((q - c + 128)
    - 128) + minimum. Offsets are None where the type has no minimum and its codes are centred as the blocks' are."""
    if kind not in GGUF_TYPES:
        raise BundleError(f"ggml type {type_name(kind)} has no block form here ({', '.join(GGUF_TYPES.values())} do)")
    rows, columns = shape
    if columns % TYPES[kind].values:
        raise BundleError(f"a {type_name(kind)} tensor of {columns} columns is not whole blocks of "
                          f"{TYPES[kind].values}")
    parts = affine(raw, kind, rows * columns)
    scales = parts.steps.reshape(rows, -1)
    offsets = None if parts.minimums is None else parts.minimums.reshape(rows, -1)
    if parts.bits == 4:
        if parts.centre != 8:  # Q4_1, Q4_K: centre 0, with a minimum
            offsets = scales * np.float32(8 - parts.centre) + offsets
        return BlockWeight(parts.codes.reshape(rows, columns), scales, offsets, 4)
    codes = (parts.codes.astype(np.int16) + (128 - parts.centre)).astype(np.uint8)
    return BlockWeight(codes.reshape(rows, columns), scales, offsets, 8)


def file_blocks(reader: GGUFFile, name: str) -> BlockWeight | None:
    """The blocks of the GGUF tensor `name` as they are in the file (None where its type has no block form here, or
    it is not a matrix), rows in HF order: a `llama` file's query and key rows are permuted back as
    `llm.gguf_model.oriented_tensors` permutes their values."""
    from .llm.gguf_model import PERMUTED, unpermute

    info = reader.tensors.get(name)
    if info is None or info.type not in GGUF_TYPES or len(info.shape) != 2:
        return None
    raw = np.fromfile(reader.path, dtype=np.uint8, count=info.nbytes, offset=reader.data_start + info.offset)
    blocks = from_gguf(raw, info.type, info.shape)
    arch = reader.metadata.get("general.architecture")
    role = name.split(".")[2] if name.startswith("blk.") and name.count(".") >= 3 else None
    if arch in PERMUTED and role in ("attn_q", "attn_k"):
        heads = reader.metadata.get(f"{arch}.attention.head_count")
        if role == "attn_k":
            heads = reader.metadata.get(f"{arch}.attention.head_count_kv", heads)
        order = unpermute(np.arange(info.shape[0]), int(heads))
        blocks = BlockWeight(blocks.codes[order], blocks.scales[order],
                             None if blocks.offsets is None else blocks.offsets[order], blocks.bits)
    return blocks
