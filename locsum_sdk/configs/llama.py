"""The configuration of a decoder-only Llama-family backbone (SmolLM2's, Llama's, Mistral's, Qwen2's block): a plain
dataclass, no torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import BundleError
from ..validation import check_bool, check_choice, check_float, check_int, check_str
from .model import from_fields

BACKBONE = "llama"
FRAME = ("unit_head", "unit_tail", "query_head", "query_tail")
UNIT_ROWS = (0, 32, 8)  # the fused step's unit-row forms: none, float32 rows, int8 rows
ROPE_TYPES = ("default", "linear", "llama3")  # rotary position scalings (HF's `rope_scaling.rope_type`)


@dataclass(frozen=True)
class LlamaConfig:
    """Shape, rotary positions and special tokens of a Llama-family decoder: pre-RMSNorm layers, rotary positions,
    grouped-query attention (with or without query/key/value biases), a SwiGLU feed-forward, an LM head tied to the
    token embedding or its own.

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
    head_size: int = 0  # each head's width; 0: d_model // heads (a model may declare another, e.g. Mistral's)
    attention_bias: bool = False  # biases on the query, key and value projections (Qwen2's)
    output_bias: bool = False  # a bias on the attention's output projection
    mlp_bias: bool = False  # biases on the feed-forward's three projections
    tie_embeddings: bool = True  # the LM head is the token embedding; False: a weight of its own (`lm_head`)
    rope_type: str = "default"  # one of ROPE_TYPES: how rotary frequencies are scaled for a longer context
    rope_factor: float = 1.0  # linear and llama3: the frequencies' scaling factor
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths over original_positions / this are scaled fully,
    rope_high_freq_factor: float = 4.0  # those under original_positions / this not at all, smoothly in between
    rope_original_positions: int = 8192  # llama3: the context of the model before its frequencies were scaled
    rope_divisors: tuple[float, ...] = ()  # each rotary pair's frequency divided by its own number, as a GGUF's
    # rope_freqs stores llama3 scaling (head_dim / 2 of them); empty: none
    bos_token_id: int = 1
    eos_token_id: int = 2
    pad_token_id: int = 2
    decoder_start_token_id: int = 198  # the summary's first input: the last token of the prompt that ends each unit
    # (SmolLM2's chat template: the newline after `<|im_start|>assistant`)
    unit_head: tuple[int, ...] = ()  # the prompt around each unit's text (`units.SpecialTokens`): before it,
    unit_tail: tuple[int, ...] = ()  # after it (the query, if any, between the two) up to decoder_start,
    query_head: tuple[int, ...] = ()  # and around a query
    query_tail: tuple[int, ...] = ()
    instruction: str = ""  # the texts the frame was made from (`llm.prompt.Instruction`): after the text, and before
    question: str = ""  # a query; recorded for the reader of a manifest (the frame's ids above are what runs)
    lora_rank: int = 0  # > 0: every projection of the layers has a low-rank adapter of this rank (`modeling.lora`)
    lora_alpha: float = 16.0  # the adapters' scale is lora_alpha / lora_rank
    unit_rows: int = 0  # HierEncDec's fused step: 0 reads the units' caches beside the summary's own slot cache;
    # 32 or 8 holds each unit's keys and values, then the summary's, in one row per unit, float32 or int8
    # (`modeling.fused_unit_rows`)

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
        check_int("model.unit_rows", self.unit_rows, 0, error=BundleError)
        if self.unit_rows not in UNIT_ROWS:
            raise BundleError(f"model.unit_rows={self.unit_rows} is not accepted; it must be one of {list(UNIT_ROWS)}")
        check_float("model.rope_base", self.rope_base, 1.0, error=BundleError)
        check_float("model.rms_eps", self.rms_eps, 0.0, 1.0, error=BundleError)
        for name in ("attention_bias", "output_bias", "mlp_bias", "tie_embeddings"):
            check_bool(f"model.{name}", getattr(self, name), error=BundleError)
        check_choice("model.rope_type", self.rope_type, ROPE_TYPES, error=BundleError)
        check_float("model.rope_factor", self.rope_factor, 1.0, error=BundleError)
        check_float("model.rope_low_freq_factor", self.rope_low_freq_factor, 0.0, error=BundleError)
        check_float("model.rope_high_freq_factor", self.rope_high_freq_factor, 0.0, error=BundleError)
        check_int("model.rope_original_positions", self.rope_original_positions, 1, error=BundleError)
        if self.rope_type == "llama3" and not 0 < self.rope_low_freq_factor < self.rope_high_freq_factor:
            raise BundleError(f"model.rope_low_freq_factor={self.rope_low_freq_factor} must be above 0 and under "
                              f"rope_high_freq_factor={self.rope_high_freq_factor} (llama3 rotary scaling)")
        check_str("model.instruction", self.instruction, error=BundleError)
        check_str("model.question", self.question, error=BundleError)
        if not isinstance(self.rope_divisors, (list, tuple)):
            raise BundleError(f"model.rope_divisors={self.rope_divisors!r} must be a list of numbers")
        for i, divisor in enumerate(self.rope_divisors):
            check_float(f"model.rope_divisors[{i}]", divisor, 1e-6, error=BundleError)
        object.__setattr__(self, "rope_divisors", tuple(float(d) for d in self.rope_divisors))
        check_int("model.head_size", self.head_size, 0, error=BundleError)
        if self.head_size == 0 and self.d_model % self.heads:
            raise BundleError(f"d_model={self.d_model} does not split into {self.heads} heads; give head_size")
        if self.head_dim % 2:
            raise BundleError(f"heads of {self.head_dim} values cannot be rotated (rotary positions turn pairs)")
        if self.rope_divisors and len(self.rope_divisors) != self.head_dim // 2:
            raise BundleError(f"model.rope_divisors has {len(self.rope_divisors)} numbers; heads of {self.head_dim} "
                              f"values rotate {self.head_dim // 2} pairs")
        if self.heads % self.kv_heads:
            raise BundleError(f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.heads

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
        return {"backbone": BACKBONE, **values, **{name: list(values[name]) for name in (*FRAME, "rope_divisors")}}

    @classmethod
    def from_dict(cls, values: Any) -> LlamaConfig:
        if isinstance(values, dict) and values.get("backbone") == BACKBONE:
            values = {k: v for k, v in values.items() if k != "backbone"}
        return from_fields(cls, values, "backbone config")
