"""The tensor types of llama.cpp's GGUF files that are read here, dequantized to float32 with numpy alone.

Plain types (F32, F16, BF16) and the block types common files use: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32
values, one float16 scale and, for _1, a float16 minimum), the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
(super-blocks of 256 values in sub-blocks of 16 or 32, each with its own 4-, 6- or 8-bit scale) and the non-linear
4-bit types IQ4_NL and IQ4_XS (each 4-bit code picks one of 16 fixed whole numbers from -127 to 113, times a float16
scale per block of 32, or per super-block of 256 times a 6-bit scale per 32). Dequantizing is
elementwise float32 arithmetic in a fixed order (each scale times each code, then the minimum), so every machine
gets the same bits from the same file. Another type is refused by its name (`UnsupportedTypeError`).

The types whose every run of 32 values has one step and at most one minimum (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
Q5_K, and IQ4_NL and IQ4_XS, whose 16 levels are 8-bit codes) are also read as their parts (`affine`): codes, steps
and minimums, which `blockwise` runs as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import BundleError


class UnsupportedTypeError(BundleError):
    """A GGUF tensor type that is not read here."""


@dataclass(frozen=True)
class BlockType:
    """One ggml tensor type: `values` per block stored in `nbytes` bytes (1 value for plain types)."""

    name: str
    values: int
    nbytes: int
    dequantize: Callable[[np.ndarray], np.ndarray]  # uint8 blocks (n, nbytes) -> float32 (n, values)


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte `start` of every block, as float32 (n, 1)."""
    return blocks[:, start:start + 2].copy().view("<f2").astype(np.float32)


def _nibbles(codes: np.ndarray) -> np.ndarray:
    """Bytes (n, k) -> their low nibbles then their high nibbles (n, 2k), uint8."""
    return np.concatenate([codes & np.uint8(0x0F), codes >> np.uint8(4)], axis=1)


def _f32(blocks: np.ndarray) -> np.ndarray:
    return blocks.copy().view("<f4").astype(np.float32)


def _f16(blocks: np.ndarray) -> np.ndarray:
    return blocks.copy().view("<f2").astype(np.float32)


def _bf16(blocks: np.ndarray) -> np.ndarray:
    return (blocks.copy().view("<u2").astype(np.uint32) << 16).view(np.float32)


@dataclass(frozen=True)
class Affine:
    """Blocks read as their parts: value = step * (code - centre) + minimum, one step and minimum per run of 32."""

    codes: np.ndarray  # (n, values) uint8, each below 2^bits
    steps: np.ndarray  # (n, values // 32) float32
    minimums: np.ndarray | None  # (n, values // 32) float32; None where the type has none
    centre: int
    bits: int  # the codes' width: 4, 5 or 8

    def values(self) -> np.ndarray:
        """(n, values) float32, the type's own arithmetic: each step times each centred code, then the minimum."""
        runs = self.codes.shape[1] // 32
        centred = (self.codes.astype(np.int16) - np.int16(self.centre)).astype(np.float32).reshape(-1, runs, 32)
        values = self.steps[:, :, None] * centred
        if self.minimums is not None:
            values = values + self.minimums[:, :, None]
        return values.reshape(self.codes.shape)


def _q4_0(blocks: np.ndarray) -> Affine:
    return Affine(_nibbles(blocks[:, 2:]), _half(blocks, 0), None, 8, 4)


def _q4_1(blocks: np.ndarray) -> Affine:
    return Affine(_nibbles(blocks[:, 4:]), _half(blocks, 0), _half(blocks, 2), 0, 4)


def _fifth_bits(high: np.ndarray) -> np.ndarray:
    """The 32 fifth bits of a Q5 block (n, 4 bytes, little-endian) -> (n, 32) of 0 or 16."""
    bits = np.unpackbits(high, axis=1, bitorder="little")  # (n, 32): bit j of the uint32
    return bits.astype(np.uint8) << np.uint8(4)


def _q5_0(blocks: np.ndarray) -> Affine:
    return Affine(_nibbles(blocks[:, 6:]) | _fifth_bits(blocks[:, 2:6]), _half(blocks, 0), None, 16, 5)


def _q5_1(blocks: np.ndarray) -> Affine:
    return Affine(_nibbles(blocks[:, 8:]) | _fifth_bits(blocks[:, 4:8]), _half(blocks, 0), _half(blocks, 2), 0, 5)


def _q8_0(blocks: np.ndarray) -> Affine:
    codes = (blocks[:, 2:].copy().view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    return Affine(codes, _half(blocks, 0), None, 128, 8)


def _two_bit_codes(codes: np.ndarray) -> np.ndarray:
    """64 bytes of 2-bit codes (n, 64) -> (n, 2, 4, 32): half h, shift j, value m is bits 2j..2j+1 of byte 32h + m
    (the order Q2_K and Q3_K write a super-block's 256 values in)."""
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    return (codes.reshape(-1, 2, 1, 32) >> shifts) & np.uint8(3)


def _per_sixteen(scales: np.ndarray) -> np.ndarray:
    """16 sub-block numbers (n, 16), sub-block 8h + 2j + p covering values m in [16p, 16p + 16) of (h, j) ->
    (n, 2, 4, 32) beside `_two_bit_codes`."""
    return np.repeat(scales.reshape(-1, 2, 4, 2), 16, axis=3)


def _q2_k(blocks: np.ndarray) -> np.ndarray:
    scales = blocks[:, 0:16]
    step = _half(blocks, 80)[:, :, None, None] * _per_sixteen(scales & np.uint8(0x0F)).astype(np.float32)
    offset = _half(blocks, 82)[:, :, None, None] * _per_sixteen(scales >> np.uint8(4)).astype(np.float32)
    return (step * _two_bit_codes(blocks[:, 16:80]).astype(np.float32) - offset).reshape(-1, 256)


def _q3_k(blocks: np.ndarray) -> np.ndarray:
    packed = blocks[:, 96:108]
    low, high, top = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    two = lambda shift: (top >> np.uint8(shift)) & np.uint8(3)  # noqa: E731
    scales = np.concatenate([(low & np.uint8(0x0F)) | (two(0) << np.uint8(4)),
                             (high & np.uint8(0x0F)) | (two(2) << np.uint8(4)),
                             (low >> np.uint8(4)) | (two(4) << np.uint8(4)),
                             (high >> np.uint8(4)) | (two(6) << np.uint8(4))], axis=1).astype(np.int8) - np.int8(32)
    mask = np.unpackbits(blocks[:, 0:32], axis=1, bitorder="little").reshape(-1, 32, 2, 4).transpose(0, 2, 3, 1)
    codes = _two_bit_codes(blocks[:, 32:96]).astype(np.int8) - np.int8(4) * (1 - mask.astype(np.int8))
    step = _half(blocks, 108)[:, :, None, None] * _per_sixteen(scales).astype(np.float32)
    return (step * codes.astype(np.float32)).reshape(-1, 256)


def _k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and minimums of a Q4_K/Q5_K super-block from its 12 packed bytes (n, 12) -> two (n, 8)
    uint8: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (minimums); sub-blocks 4-7 in the nibbles
    of bytes 8-11, their top two bits in the high bits of bytes 0-3 and 4-7."""
    low, high, rest = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low & np.uint8(63), (rest & np.uint8(0x0F)) | ((low >> np.uint8(6)) << np.uint8(4))],
                            axis=1)
    minimums = np.concatenate([high & np.uint8(63), (rest >> np.uint8(4)) | ((high >> np.uint8(6)) << np.uint8(4))],
                              axis=1)
    return scales, minimums


def _k_nibbles(codes: np.ndarray) -> np.ndarray:
    """128 bytes (n, 128) -> 256 codes (n, 256): each run of 32 bytes gives 32 low nibbles, then 32 high ones."""
    runs = codes.reshape(-1, 4, 1, 32)
    return np.concatenate([runs & np.uint8(0x0F), runs >> np.uint8(4)], axis=2).reshape(-1, 256)


def _k_affine(blocks: np.ndarray, codes: np.ndarray, bits: int) -> Affine:
    """codes (n, 256) of Q4_K/Q5_K super-blocks -> d * scale * code - dmin * minimum, per sub-block of 32 (the minimum
    negated: subtracting a float32 and adding its negation give the same bits)."""
    scales, minimums = _k_scales(blocks[:, 4:16])
    return Affine(codes, _half(blocks, 0) * scales.astype(np.float32),
                  -(_half(blocks, 2) * minimums.astype(np.float32)), 0, bits)


def _q4_k(blocks: np.ndarray) -> Affine:
    return _k_affine(blocks, _k_nibbles(blocks[:, 16:144]), 4)


def _q5_k(blocks: np.ndarray) -> Affine:
    high = np.unpackbits(blocks[:, 16:48], axis=1, bitorder="little").reshape(-1, 32, 8)  # (n, l, bit)
    fifth = high.transpose(0, 2, 1).reshape(-1, 256) << np.uint8(4)  # sub-block j's l-th value: bit j of byte l
    return _k_affine(blocks, _k_nibbles(blocks[:, 48:176]) | fifth, 5)


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    low = blocks[:, 0:128].reshape(-1, 2, 2, 32)  # (n, half, first/second 32 bytes, l)
    high = blocks[:, 128:192].reshape(-1, 2, 1, 32)  # (n, half, 1, l)
    scales = blocks[:, 192:208].copy().view(np.int8).astype(np.float32).reshape(-1, 16, 1)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    top = ((high >> shifts) & np.uint8(3)) << np.uint8(4)  # (n, half, 4, l): quarter q's two high bits
    nibbles = np.concatenate([low & np.uint8(0x0F), low >> np.uint8(4)], axis=2)  # (n, half, 4, l)
    codes = ((nibbles | top).astype(np.int8) - np.int8(32)).astype(np.float32).reshape(-1, 16, 16)
    return (_half(blocks, 208)[:, :, None] * scales * codes).reshape(-1, 256)


#: IQ4_NL's and IQ4_XS's 16 levels: a 4-bit code q stands for step * LEVELS[q].
LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int16)


def _level_codes(nibbles: np.ndarray) -> np.ndarray:
    """4-bit codes -> their levels as 8-bit codes centred on 128 (uint8, same shape)."""
    return (LEVELS[nibbles] + 128).astype(np.uint8)


def _iq4_nl(blocks: np.ndarray) -> Affine:
    return Affine(_level_codes(_nibbles(blocks[:, 2:])), _half(blocks, 0), None, 128, 8)


def _iq4_xs(blocks: np.ndarray) -> Affine:
    """A super-block of 256: float16 d, the 8 sub-blocks' 6-bit scales s (their high 2 bits in a little-endian
    uint16, 2 bits each; their low 4 in 4 bytes, 2 nibbles each), then 16 bytes of nibbles per sub-block of 32 (its
    first 16 values low, its last 16 high). A sub-block's step is d * (s - 32)."""
    high = blocks[:, 2:4].copy().view("<u2").astype(np.uint16)  # (n, 1)
    low = _nibbles(blocks[:, 4:8]).reshape(-1, 2, 4).transpose(0, 2, 1).reshape(-1, 8)  # sub-block j: byte j//2's
    top = (high >> (2 * np.arange(8, dtype=np.uint16))) & np.uint16(3)  # nibble j%2
    scales = (low.astype(np.int16) | (top.astype(np.int16) << 4)) - np.int16(32)
    codes = _nibbles(blocks[:, 8:136].reshape(-1, 16)).reshape(-1, 256)
    return Affine(_level_codes(codes), _half(blocks, 0) * scales.astype(np.float32), None, 128, 8)


#: The types read as `Affine` parts, by ggml type.
AFFINE: dict[int, Callable[[np.ndarray], Affine]] = {2: _q4_0, 3: _q4_1, 6: _q5_0, 7: _q5_1, 8: _q8_0, 12: _q4_k,
                                                     13: _q5_k, 20: _iq4_nl, 23: _iq4_xs}


def _from_parts(kind: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda blocks: AFFINE[kind](blocks).values()


TYPES: dict[int, BlockType] = {
    0: BlockType("F32", 1, 4, _f32),
    1: BlockType("F16", 1, 2, _f16),
    2: BlockType("Q4_0", 32, 18, _from_parts(2)),
    3: BlockType("Q4_1", 32, 20, _from_parts(3)),
    6: BlockType("Q5_0", 32, 22, _from_parts(6)),
    7: BlockType("Q5_1", 32, 24, _from_parts(7)),
    8: BlockType("Q8_0", 32, 34, _from_parts(8)),
    10: BlockType("Q2_K", 256, 84, _q2_k),
    11: BlockType("Q3_K", 256, 110, _q3_k),
    12: BlockType("Q4_K", 256, 144, _from_parts(12)),
    13: BlockType("Q5_K", 256, 176, _from_parts(13)),
    14: BlockType("Q6_K", 256, 210, _q6_k),
    20: BlockType("IQ4_NL", 32, 18, _from_parts(20)),
    23: BlockType("IQ4_XS", 256, 136, _from_parts(23)),
    30: BlockType("BF16", 1, 2, _bf16),
}

#: ggml's names of the types that are not read, for the error that refuses them.
OTHER_NAMES = {9: "Q8_1", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
               19: "IQ1_S", 21: "IQ3_S", 22: "IQ2_S", 24: "I8", 25: "I16", 26: "I32",
               27: "I64", 28: "F64", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}


def type_name(kind: int) -> str:
    known = TYPES.get(kind)
    return known.name if known else OTHER_NAMES.get(kind, f"type {kind}")


def block_type(kind: int, what: str = "a tensor") -> BlockType:
    """The type `kind`, or UnsupportedTypeError naming it and the types that are read."""
    if kind not in TYPES:
        read = ", ".join(t.name for t in TYPES.values())
        raise UnsupportedTypeError(f"{what} is of ggml type {type_name(kind)}, which is not read here ({read} are); "
                                   "convert the model with llama.cpp's llama-quantize to one of those")
    return TYPES[kind]


def affine(raw: np.ndarray, kind: int, size: int) -> Affine:
    """The parts of `size` values from the bytes `raw` (uint8) of one tensor of ggml type `kind`, one of `AFFINE`:
    one row per block of the type (32 or 256 values)."""
    block = block_type(kind)
    if kind not in AFFINE:
        raise UnsupportedTypeError(f"ggml type {block.name} has no parts of one step per 32 values (its sub-blocks "
                                   f"are of 16); {', '.join(TYPES[k].name for k in AFFINE)} have")
    return AFFINE[kind](raw.reshape(size // block.values, block.nbytes))


def dequantize(raw: np.ndarray, kind: int, size: int) -> np.ndarray:
    """`size` float32 values from the bytes `raw` (uint8) of one tensor of ggml type `kind`."""
    block = block_type(kind)
    return block.dequantize(raw.reshape(size // block.values, block.nbytes)).reshape(-1)
