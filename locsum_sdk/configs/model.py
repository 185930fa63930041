"""Model configuration: a plain dataclass saved with the weights (no torch needed to read it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import BundleError
from ..validation import check_bool, check_choice, check_float, check_int, check_keys

#: HF BART config keys and the fields they map to.
_HF_KEYS = {
    "vocab_size": "vocab_size",
    "d_model": "d_model",
    "encoder_layers": "encoder_layers",
    "decoder_layers": "decoder_layers",
    "encoder_attention_heads": "encoder_heads",
    "decoder_attention_heads": "decoder_heads",
    "encoder_ffn_dim": "encoder_ffn_dim",
    "decoder_ffn_dim": "decoder_ffn_dim",
    "max_position_embeddings": "max_positions",
    "activation_function": "activation",
    "scale_embedding": "scale_embedding",
    "dropout": "dropout",
    "attention_dropout": "attention_dropout",
    "activation_dropout": "activation_dropout",
    "pad_token_id": "pad_token_id",
    "bos_token_id": "bos_token_id",
    "eos_token_id": "eos_token_id",
    "decoder_start_token_id": "decoder_start_token_id",
}

ACTIVATIONS = ("gelu", "relu")


def from_fields(cls: type, values: Any, what: str = "model config") -> Any:
    """`cls(**values)` for a JSON object whose keys are the dataclass `cls`'s fields, or a BundleError naming what
    is wrong (not an object, unknown or missing keys, a bad value)."""
    if not isinstance(values, dict):
        raise BundleError(f"{what} must be an object, got {type(values).__name__}")
    check_keys(what, values, [f.name for f in dataclasses.fields(cls)], error=BundleError)
    return cls(**values)


@dataclass(frozen=True)
class StepShape:
    """The decoding step's contract as shapes, for any backbone: what each decoder layer caches and reads, per grid
    row, and what the unit pass and a step compute. Read from a model config's dict (`step_shape`), so the runtime,
    the memory estimate and the exporter size every buffer from one place."""

    layers: int  # decoder layers: each has a slot cache and reads each unit's keys/values
    cache_heads: int  # heads of every cached key/value (a unit's and the step's own)
    head_dim: int
    query_heads: int  # heads of a step's attention scores
    d_model: int
    ffn_dim: int  # a decoder layer's feed-forward width
    unit_heads: int  # the unit pass (encoder, or the backbone over a unit's prefix)
    unit_ffn_dim: int
    shares_first_layer: bool  # layer 0's slot cache is one per item (its units decode the same tokens there)
    ffn_streams: int = 1  # FFN-wide tensors per row: 1 (BART's hidden layer), 2 (a SwiGLU's gate and up branches)
    score_tensors: int = 3  # attention tensors over all keys: scores, bias, probabilities (+1 where the unit's and
    # the step's own scores are concatenated before one softmax)
    continues_units: bool = False  # the summary continues each unit's tokens: a unit and its summary share positions
    unit_rows: int = 0  # bits of a unit-row step's rows (`modeling.fused_unit_rows`): each unit's keys and values
    # and the summary's in one row per unit and beam, no slot cache; 0: the units' caches beside a slot cache

    @property
    def kv_width(self) -> int:
        """Floats of one cached key (or value) position of one row."""
        return self.cache_heads * self.head_dim


def on_base_model(model: dict[str, Any]) -> bool:
    """Whether a bundle's `model` settings are on the pretrained base model's Llama backbone (`backbone: llama`), so
    its vocabulary is the base model's."""
    return model.get("backbone") == "llama"


def step_shape(model: dict[str, Any]) -> StepShape:
    """The `StepShape` of a bundle's `model` settings: a Llama backbone (`backbone: llama`; every layer reads the
    unit, grouped-query heads) or BART's encoder-decoder (the default)."""
    d = model["d_model"]
    if on_base_model(model):
        head_dim = model.get("head_size") or d // model["heads"]
        return StepShape(model["layers"], model["kv_heads"], head_dim, model["heads"], d, model["ffn_dim"],
                         model["heads"], model["ffn_dim"], shares_first_layer=False, ffn_streams=2, score_tensors=4,
                         continues_units=True, unit_rows=model.get("unit_rows", 0))
    heads = model["decoder_heads"]
    return StepShape(model["decoder_layers"], heads, d // heads, heads, d, model["decoder_ffn_dim"],
                     model["encoder_heads"], model["encoder_ffn_dim"], shares_first_layer=True)


class EncoderDecoderConfig:
    """What the runtime reads of any kind's model config: its decoder's head size and its special token ids
    (mixed into the config dataclasses)."""

    d_model: int
    decoder_heads: int
    pad_token_id: int
    bos_token_id: int
    eos_token_id: int
    decoder_start_token_id: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.decoder_heads

    @property
    def cache_heads(self) -> int:
        """Heads of the keys/values a decoding step caches and reads (its units' and its own)."""
        return self.decoder_heads

    def special_tokens(self) -> dict[str, int]:
        """The ids the runtime needs, keyed as `units.SpecialTokens`."""
        return {"bos": self.bos_token_id, "pad": self.pad_token_id, "eos": self.eos_token_id,
                "decoder_start": self.decoder_start_token_id}


@dataclass(frozen=True)
class BartConfig(EncoderDecoderConfig):
    """Shape and special tokens of a BART encoder-decoder (the backbone of every kind)."""

    vocab_size: int = 50265  # size of the shared token embedding and LM head
    d_model: int = 768  # hidden size
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_heads: int = 12
    decoder_heads: int = 12
    encoder_ffn_dim: int = 3072
    decoder_ffn_dim: int = 3072
    max_positions: int = 1024  # learned positions (the table has 2 more rows, BART's offset)
    activation: str = "gelu"  # one of ACTIVATIONS
    scale_embedding: bool = False  # multiply token embeddings by sqrt(d_model)
    dropout: float = 0.1  # training only
    attention_dropout: float = 0.0  # training only
    activation_dropout: float = 0.0  # training only
    pad_token_id: int = 1
    bos_token_id: int = 0
    eos_token_id: int = 2
    decoder_start_token_id: int = 2
    copy: bool = False  # mix a copy distribution over the unit's tokens into every step's (`modeling.copy`)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_heads", "decoder_heads",
                     "encoder_ffn_dim", "decoder_ffn_dim", "max_positions"):
            check_int(f"model.{name}", getattr(self, name), 1, error=BundleError)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            check_int(f"model.{name}", getattr(self, name), 0, self.vocab_size - 1, error=BundleError)
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_float(f"model.{name}", getattr(self, name), 0.0, 1.0, error=BundleError)
        check_choice("model.activation", self.activation, ACTIVATIONS, error=BundleError)
        check_bool("model.scale_embedding", self.scale_embedding, error=BundleError)
        check_bool("model.copy", self.copy, error=BundleError)
        if self.d_model % self.encoder_heads or self.d_model % self.decoder_heads:
            raise BundleError(f"d_model={self.d_model} must be divisible by the number of heads")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Any) -> BartConfig:
        return from_fields(cls, values)

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> BartConfig:
        """Read an HF `config.json` of model_type `bart`."""
        if not isinstance(hf, dict):
            raise BundleError(f"an HF config must be a JSON object, got {type(hf).__name__}")
        if hf.get("model_type", "bart") != "bart":
            raise BundleError(f"expected an HF BART config, got model_type={hf.get('model_type')!r}")
        if hf.get("normalize_before") or hf.get("add_final_layer_norm"):
            raise BundleError("pre-LayerNorm BART variants (mBART) are not supported")
        return cls(**{ours: hf[theirs] for theirs, ours in _HF_KEYS.items() if hf.get(theirs) is not None})
