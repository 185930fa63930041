"""The configuration of a decoder-only Llama backbone (SmolLM2's architecture): a plain dataclass, no torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import BundleError
from ..validation import check_float, check_int
from .config import from_fields


@dataclass(frozen=True)
class LlamaConfig:
    """Shape, rotary positions and special tokens of a Llama decoder with tied input and output embeddings.

    The defaults are SmolLM2-135M's."""

    vocab_size: int = 49152
    d_model: int = 576
    layers: int = 30
    heads: int = 9  # query heads
    kv_heads: int = 3  # key/value heads (grouped-query attention: heads // kv_heads queries share one)
    ffn_dim: int = 1536  # SwiGLU width
    rope_base: float = 100000.0
    rms_eps: float = 1e-5
    max_positions: int = 8192  # the context the model was trained on
    bos_token_id: int = 1
    eos_token_id: int = 2
    pad_token_id: int = 2

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "layers", "heads", "kv_heads", "ffn_dim", "max_positions"):
            check_int(f"model.{name}", getattr(self, name), 1, error=BundleError)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            check_int(f"model.{name}", getattr(self, name), 0, self.vocab_size - 1, error=BundleError)
        check_float("model.rope_base", self.rope_base, 1.0, error=BundleError)
        check_float("model.rms_eps", self.rms_eps, 0.0, 1.0, error=BundleError)
        if self.d_model % self.heads or (self.d_model // self.heads) % 2:
            raise BundleError(f"d_model={self.d_model} must split into {self.heads} heads of an even size (rotary "
                              "positions rotate pairs of dimensions)")
        if self.heads % self.kv_heads:
            raise BundleError(f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Any) -> LlamaConfig:
        return from_fields(cls, values, "backbone config")
