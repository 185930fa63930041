"""DYLE's model configuration: the generator's config (BART's, or a Llama backbone's) plus its extractor's (plain
dataclasses, no torch)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import BundleError
from ..validation import check_bool, check_choice, check_float, check_int
from .llama import LlamaConfig
from .model import ACTIVATIONS, BartConfig, from_fields

ARCHITECTURES = ("bart", "bert")  # our BART's encoder (the generator's tokenizer), or a BERT (its own tokenizer)


@dataclass(frozen=True)
class ExtractorConfig:
    """The extractor's encoder: `bart` is an encoder of our BART (post-LayerNorm, positions offset by 2, the
    generator's tokenizer); `bert` is a BERT or RoBERTa encoder (HF names, token types): all-MiniLM-L6-v2 with its
    own WordPiece tokenizer, or DYLE's RoBERTa retriever, whose BPE ids are BART's. A snippet's score is a linear
    projection of the state at the separator after it; with `tfidf` (not in the paper), plus the snippet's tf-idf
    cosine to the query standardized over the input's snippets (`limits.tfidf_feature`), times a learned weight."""

    architecture: str = "bart"  # one of ARCHITECTURES
    vocab_size: int = 8192
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    ffn_dim: int = 1024
    max_positions: int = 512  # also the longest chunk
    activation: str = "gelu"
    layer_norm_eps: float = 1e-5
    scale_embedding: bool = False  # bart only
    type_vocab_size: int = 0  # bert only: token type embeddings (type 0 is used)
    position_offset: int = 0  # bert only: the position row of the first token (RoBERTa: padding id + 1)
    own_tokenizer: bool = False  # True: its ids are not the generator's (a WordPiece BERT beside a BPE BART)
    start_token_id: int = 0  # first token of a chunk (<s>, [CLS])
    separator_token_id: int = 2  # after the query and after each snippet (</s>, [SEP])
    pad_token_id: int = 1
    dropout: float = 0.1  # training only
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    tfidf: bool = False  # also read each snippet's standardized tf-idf cosine to the query

    def __post_init__(self) -> None:
        check_choice("extractor.architecture", self.architecture, ARCHITECTURES, error=BundleError)
        for name in ("vocab_size", "d_model", "layers", "heads", "ffn_dim", "max_positions"):
            check_int(f"extractor.{name}", getattr(self, name), 1, error=BundleError)
        check_int("extractor.type_vocab_size", self.type_vocab_size, 0, error=BundleError)
        check_int("extractor.position_offset", self.position_offset, 0, error=BundleError)
        for name in ("start_token_id", "separator_token_id", "pad_token_id"):
            check_int(f"extractor.{name}", getattr(self, name), 0, self.vocab_size - 1, error=BundleError)
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_float(f"extractor.{name}", getattr(self, name), 0.0, 1.0, error=BundleError)
        check_float("extractor.layer_norm_eps", self.layer_norm_eps, 0.0, 1.0, error=BundleError)
        check_choice("extractor.activation", self.activation, ACTIVATIONS, error=BundleError)
        check_bool("extractor.scale_embedding", self.scale_embedding, error=BundleError)
        check_bool("extractor.own_tokenizer", self.own_tokenizer, error=BundleError)
        check_bool("extractor.tfidf", self.tfidf, error=BundleError)
        if self.d_model % self.heads:
            raise BundleError(f"extractor.d_model={self.d_model} must be divisible by extractor.heads={self.heads}")

    # the names the BART layers read
    @property
    def encoder_heads(self) -> int:
        return self.heads

    @property
    def encoder_ffn_dim(self) -> int:
        return self.ffn_dim

    @property
    def encoder_layers(self) -> int:
        return self.layers

    @classmethod
    def from_dict(cls, values: Any) -> ExtractorConfig:
        return from_fields(cls, values, "the extractor config")

    @classmethod
    def from_bart(cls, config: BartConfig) -> ExtractorConfig:
        """An extractor shaped as `config`'s encoder, sharing its tokenizer (e.g. to start from its weights)."""
        return cls("bart", config.vocab_size, config.d_model, config.encoder_layers, config.encoder_heads,
                   config.encoder_ffn_dim, config.max_positions, config.activation, 1e-5, config.scale_embedding, 0, 0,
                   False, config.bos_token_id, config.eos_token_id, config.pad_token_id, config.dropout,
                   config.attention_dropout, config.activation_dropout)

    @classmethod
    def from_hf_bert(cls, hf: dict[str, Any], start: int, separator: int) -> ExtractorConfig:
        """Read an HF `config.json` of model_type `bert` (e.g. all-MiniLM-L6-v2) or `roberta` (DYLE's retriever);
        `start`/`separator`: the ids of [CLS]/<s> and [SEP]/</s> in its tokenizer."""
        if not isinstance(hf, dict) or hf.get("model_type") not in ("bert", "roberta"):
            raise BundleError("expected an HF BERT or RoBERTa config.json (model_type 'bert' or 'roberta')")
        if hf.get("position_embedding_type", "absolute") != "absolute" or hf.get("hidden_act", "gelu") != "gelu":
            raise BundleError("only BERT / RoBERTa with absolute positions and gelu is supported")
        needed = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "max_position_embeddings")
        if missing := [key for key in needed if key not in hf]:
            raise BundleError(f"the HF {hf['model_type']} config lacks {missing}")
        pad = hf.get("pad_token_id", 0)
        offset = pad + 1 if hf["model_type"] == "roberta" else 0  # RoBERTa numbers positions after the padding row
        return cls("bert", hf["vocab_size"], hf["hidden_size"], hf["num_hidden_layers"], hf["num_attention_heads"],
                   hf["intermediate_size"], hf["max_position_embeddings"] - offset, "gelu",
                   hf.get("layer_norm_eps", 1e-12), False, hf.get("type_vocab_size", 2), offset,
                   hf["model_type"] == "bert", start, separator, pad, hf.get("hidden_dropout_prob", 0.1),
                   hf.get("attention_probs_dropout_prob", 0.1), 0.0)


@dataclass(frozen=True)
class DyleConfig(BartConfig):
    """The generator (BART) and, in `extractor`, the extractor's encoder."""

    extractor: ExtractorConfig | None = None  # None: shaped as this generator's encoder, sharing its tokenizer

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.extractor is None:
            object.__setattr__(self, "extractor", ExtractorConfig.from_bart(self))
        if isinstance(self.extractor, dict):
            object.__setattr__(self, "extractor", ExtractorConfig.from_dict(self.extractor))
        if not isinstance(self.extractor, ExtractorConfig):
            raise BundleError(f"model.extractor must be an object, got {type(self.extractor).__name__}")

    @classmethod
    def from_bart(cls, config: BartConfig, extractor: ExtractorConfig | None = None) -> DyleConfig:
        """A DYLE whose generator is `config`; the extractor is `config`'s encoder shape unless given."""
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(BartConfig)}
        return cls(**values, extractor=extractor)


@dataclass(frozen=True)
class LlamaDyleConfig(LlamaConfig):
    """A DYLE whose generator is a Llama backbone; its extractor is an encoder of its own (a BERT such as MiniLM,
    reading its own tokenizer): a decoder-only generator has no encoder to start one from."""

    extractor: ExtractorConfig | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.extractor, dict):
            object.__setattr__(self, "extractor", ExtractorConfig.from_dict(self.extractor))
        if not isinstance(self.extractor, ExtractorConfig):
            raise BundleError("model.extractor: a DYLE on a Llama backbone needs its extractor's config (an encoder "
                              "of its own, e.g. MiniLM)")
        if not self.extractor.own_tokenizer:
            raise BundleError("model.extractor.own_tokenizer must be true on a Llama backbone: its units are framed "
                              "as prompts, which an extractor cannot share")
