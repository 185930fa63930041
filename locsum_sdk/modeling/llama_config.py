"""The configuration of a decoder-only Llama backbone (SmolLM2's architecture): a plain dataclass, no torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import BundleError
from ..validation import check_float, check_int
from .config import from_fields

BACKBONE = "llama"
FRAME = ("unit_head", "unit_tail", "query_head", "query_tail")


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
    decoder_start_token_id: int = 198  # the summary's first input: the last token of the prompt that ends each unit
    # (SmolLM2's chat template: the newline after `<|im_start|>assistant`)
    unit_head: tuple[int, ...] = ()  # the prompt around each unit's text (`units.SpecialTokens`): before it,
    unit_tail: tuple[int, ...] = ()  # after it (the query, if any, between the two) up to decoder_start,
    query_head: tuple[int, ...] = ()  # and around a query
    query_tail: tuple[int, ...] = ()
    lora_rank: int = 0  # > 0: every projection of the layers has a low-rank adapter of this rank (`modeling.lora`)
    lora_alpha: float = 16.0  # the adapters' scale is lora_alpha / lora_rank

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "layers", "heads", "kv_heads", "ffn_dim", "max_positions"):
            check_int(f"model.{name}", getattr(self, name), 1, error=BundleError)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            check_int(f"model.{name}", getattr(self, name), 0, self.vocab_size - 1, error=BundleError)
        for name in FRAME:
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)):
                raise BundleError(f"model.{name}={value!r} must be a list of token ids")
            for i, token in enumerate(value):
                check_int(f"model.{name}[{i}]", token, 0, self.vocab_size - 1, error=BundleError)
            object.__setattr__(self, name, tuple(value))  # JSON's lists
        check_int("model.lora_rank", self.lora_rank, 0, min(self.d_model, self.ffn_dim), error=BundleError)
        check_float("model.lora_alpha", self.lora_alpha, 0.0, error=BundleError)
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

    def special_tokens(self) -> dict[str, Any]:
        """The ids the runtime needs and the prompt around a unit, keyed as `units.SpecialTokens`: the query goes
        after the text, as a question to a chat model does."""
        return {"bos": self.bos_token_id, "pad": self.pad_token_id, "eos": self.eos_token_id,
                "decoder_start": self.decoder_start_token_id, "query_first": False,
                **{name: list(getattr(self, name)) for name in FRAME}}

    @property
    def cache_heads(self) -> int:
        """Heads of the keys/values a decoding step caches and reads (its units' and its own)."""
        return self.kv_heads

    @property
    def decoder_layers(self) -> int:
        """Layers a decoding step runs (all of them: the model is its own decoder)."""
        return self.layers

    @property
    def copy(self) -> bool:
        """A decoder-only backbone has no cross-attention for a copy distribution to read."""
        return False

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    def to_dict(self) -> dict[str, Any]:
        """The fields, and `backbone: llama` (how a bundle's model settings say which backbone they describe)."""
        values = dataclasses.asdict(self)
        return {"backbone": BACKBONE, **values, **{name: list(values[name]) for name in FRAME}}

    @classmethod
    def from_dict(cls, values: Any) -> LlamaConfig:
        if isinstance(values, dict) and values.get("backbone") == BACKBONE:
            values = {k: v for k, v in values.items() if k != "backbone"}
        return from_fields(cls, values, "backbone config")
