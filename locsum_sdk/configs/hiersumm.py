"""The Hierarchical Transformer's model configuration (a plain dataclass, no torch)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import BundleError
from ..validation import check_bool, check_float, check_int
from .model import EncoderDecoderConfig, from_fields

KIND = "hiersumm"  # the kind these configs describe (`locsum_sdk.kinds.hiersumm`)

LAYER_KINDS = ("local", "global")


@dataclass(frozen=True)
class HierSummConfig(EncoderDecoderConfig):
    """Shapes of the encoder (local and global layers, in order) and decoder; the paper's sizes by default."""

    vocab_size: int = 8192
    d_model: int = 256
    encoder_heads: int = 8
    decoder_heads: int = 8
    encoder_ffn_dim: int = 1024
    decoder_ffn_dim: int = 1024
    encoder_layers: tuple[str, ...] = ("local",) * 5 + ("global",) * 2
    decoder_layers: int = 6
    ranker_hidden: int = 256  # the paragraph ranker's LSTM width (its embedding is d_model wide)
    ranker_tfidf: bool = False  # the ranker also reads each paragraph's tf-idf cosine to the title (not the paper's)
    max_positions: int = 512  # longest paragraph and longest summary (sinusoidal codes)
    dropout: float = 0.1  # training only
    share_embeddings: bool = True  # one token table for the encoder and the decoder
    tie_generator: bool = True  # the generator's weight is the decoder's token table
    copy: bool = False  # mix a copy distribution over the paragraphs' tokens into every step's (`modeling.copy`)
    pad_token_id: int = 1
    bos_token_id: int = 0
    eos_token_id: int = 2
    decoder_start_token_id: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.encoder_layers, list):
            object.__setattr__(self, "encoder_layers", tuple(self.encoder_layers))
        for name in ("vocab_size", "d_model", "encoder_heads", "decoder_heads", "encoder_ffn_dim", "decoder_ffn_dim",
                     "decoder_layers", "max_positions", "ranker_hidden"):
            check_int(f"model.{name}", getattr(self, name), 1, error=BundleError)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            check_int(f"model.{name}", getattr(self, name), 0, self.vocab_size - 1, error=BundleError)
        check_float("model.dropout", self.dropout, 0.0, 1.0, error=BundleError)
        check_bool("model.share_embeddings", self.share_embeddings, error=BundleError)
        check_bool("model.tie_generator", self.tie_generator, error=BundleError)
        check_bool("model.ranker_tfidf", self.ranker_tfidf, error=BundleError)
        check_bool("model.copy", self.copy, error=BundleError)
        if not self.encoder_layers or any(kind not in LAYER_KINDS for kind in self.encoder_layers):
            raise BundleError(f"model.encoder_layers={self.encoder_layers!r}: a non-empty list of {LAYER_KINDS}")
        if self.d_model % self.encoder_heads or self.d_model % self.decoder_heads or self.d_model % 2:
            raise BundleError(f"d_model={self.d_model} must be even and divisible by the numbers of heads")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "encoder_layers": list(self.encoder_layers)}

    @classmethod
    def from_dict(cls, values: Any) -> HierSummConfig:
        return from_fields(cls, values)


def from_bart_shape(bart: Any) -> HierSummConfig:
    """A Hierarchical Transformer with a BART config's vocabulary, width, FFN, positions, decoder depth and special
    tokens (the paper's 8 heads where the width allows, else BART's), to start from that BART's token embeddings."""
    heads = 8 if bart.d_model % 8 == 0 else bart.decoder_heads
    return HierSummConfig(vocab_size=bart.vocab_size, d_model=bart.d_model, encoder_heads=heads, decoder_heads=heads,
                          encoder_ffn_dim=bart.encoder_ffn_dim, decoder_ffn_dim=bart.decoder_ffn_dim,
                          decoder_layers=bart.decoder_layers, max_positions=bart.max_positions,
                          pad_token_id=bart.pad_token_id, bos_token_id=bart.bos_token_id,
                          eos_token_id=bart.eos_token_id, decoder_start_token_id=bart.decoder_start_token_id,
                          copy=getattr(bart, "copy", False))
