"""`Summarizer`: the public entry point. Text -> units -> encoder once -> decoding loop -> `Summary`."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import constants as C
from .backends import BACKENDS, Backend, UnitBatch
from .bundle import Bundle
from .errors import BundleError, BundleNotFoundError, InputError, OptionError
from .generation import OPTION_NAMES, GenerationOptions, generate
from .units import Pager, PagingOptions, SpecialTokens, Unit, as_documents

logger = logging.getLogger("locsum_sdk")

#: The bundle that `Summarizer.from_pretrained()` loads when no path is given.
DEFAULT_BUNDLE = Path(os.environ.get("LOCSUM_BUNDLE", Path(__file__).resolve().parents[1] / "engines" / "default"))

PAGING_NAMES = tuple(f.name for f in dataclasses.fields(PagingOptions))

Input = str | bytes | Sequence[str | bytes]


@dataclass(frozen=True)
class Summary:
    """One summary and how it was made."""

    text: str
    token_ids: list[int]  # generated ids, without the decoder start token
    units: list[Unit]  # the pages the input was split into, with their texts and character spans
    unit_weights: np.ndarray  # (steps, units): the combine weights of each decoding step of the chosen beam
    score: float  # length-normalised log-probability of the chosen hypothesis
    timings: dict[str, float] = field(default_factory=dict)  # seconds: paging, encode, decode, total

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "units": [u.to_dict() for u in self.units],
            "unit_weights": self.unit_weights.round(4).tolist(),
            "score": self.score,
            "timings": self.timings,
        }


class Summarizer:
    """Summarizes long inputs with a locality-aware model on ONNX Runtime (or the torch reference backend).

    Example:
        >>> summarizer = Summarizer.from_pretrained("engines/default")
        >>> summary = summarizer.summarize(open("report.txt").read(), num_beams=4)
        >>> print(summary.text)
    """

    def __init__(
        self,
        backend: Backend,
        tokenizer,
        special: SpecialTokens,
        paging: PagingOptions,
        generation: GenerationOptions,
        max_positions: int,
        unit_batch_size: int = 4,
    ):
        paging.validate()
        generation.validate()
        if unit_batch_size < 1:
            raise OptionError(f"unit_batch_size={unit_batch_size} must be at least 1")
        self.backend, self.tokenizer, self.special = backend, tokenizer, special
        self.paging, self.generation = paging, generation
        self.max_positions, self.unit_batch_size = max_positions, unit_batch_size

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike | None = None,
        backend: str = "auto",
        threads: int | None = None,
        unit_batch_size: int = 4,
        verify: bool = True,
    ) -> "Summarizer":
        """Load a bundle (ONNX Runtime) or a checkpoint directory (torch reference backend).

        Args:
            path: bundle or checkpoint directory; None loads the shipped default bundle.
            backend: "auto" (a bundle runs on onnxruntime, a checkpoint on torch), "onnxruntime" or "torch".
            threads: intra-op threads; None uses every core.
            unit_batch_size: units encoded together; bounds the encoder's peak memory.
            verify: check the sha256 of every bundle file.
        """
        if backend not in BACKENDS:
            raise OptionError(f"backend={backend!r} is not known; use one of {BACKENDS}")
        if path is None and not DEFAULT_BUNDLE.exists():
            raise BundleNotFoundError(
                f"no default bundle at {DEFAULT_BUNDLE}; pass the path of a bundle or checkpoint directory "
                "(or set LOCSUM_BUNDLE)"
            )
        path = Path(path) if path is not None else DEFAULT_BUNDLE
        if not path.exists():
            raise BundleNotFoundError(f"{path} does not exist; pass the path of a bundle or checkpoint directory")
        is_bundle = (path / C.MANIFEST_FILE).is_file()
        if backend == "auto":
            backend = "onnxruntime" if is_bundle else "torch"
        if backend == "onnxruntime":
            from .backends.onnxruntime import OnnxRuntimeBackend

            bundle = Bundle.load(path, verify=verify)
            runner = OnnxRuntimeBackend(bundle, threads)
            settings = dataclasses.asdict(bundle.manifest) | {"tokenizer": bundle.file(C.TOKENIZER_FILE)}
        else:
            runner, settings = _torch_backend(path, is_bundle, threads)
        from tokenizers import Tokenizer

        special = SpecialTokens(**settings["special_tokens"])
        tokenizer = Tokenizer.from_file(str(settings["tokenizer"]))
        if tokenizer.get_vocab_size() > settings["model"]["vocab_size"]:
            raise BundleError(
                f"{settings['tokenizer']} has {tokenizer.get_vocab_size()} tokens but the model only "
                f"{settings['model']['vocab_size']}: it belongs to another model; export with the model's tokenizer"
            )
        return cls(
            runner,
            tokenizer,
            special,
            PagingOptions(**settings["units"]),
            GenerationOptions(**settings["generation"]),
            settings["model"]["max_positions"],
            unit_batch_size,
        )

    def options(self, **overrides: Any) -> tuple[PagingOptions, GenerationOptions]:
        """This summarizer's defaults with `overrides` applied, validated; unknown names are refused."""
        unknown = sorted(set(overrides) - set(PAGING_NAMES) - set(OPTION_NAMES))
        if unknown:
            raise OptionError(
                f"unknown option(s) {unknown}; accepted options are {sorted(PAGING_NAMES + OPTION_NAMES)}"
            )
        paging = dataclasses.replace(self.paging, **{k: v for k, v in overrides.items() if k in PAGING_NAMES})
        generation = dataclasses.replace(
            self.generation, **{k: v for k, v in overrides.items() if k in OPTION_NAMES}
        )
        paging.validate()
        generation.validate()
        if paging.page_tokens > self.max_positions:
            raise OptionError(f"page_tokens={paging.page_tokens} exceeds the model's {self.max_positions} positions")
        return paging, generation

    def summarize(self, text_or_documents: Input, query: str | None = None, **options: Any) -> Summary:
        """Summarize one text, or one cluster of documents (a list of strings).

        Args:
            text_or_documents: a string (UTF-8 bytes accepted) or a list of documents.
            query: optional question; it is prepended to every page.
            **options: any field of `PagingOptions` or `GenerationOptions`.
        """
        return self.summarize_batch([text_or_documents], None if query is None else [query], **options)[0]

    def summarize_batch(
        self, inputs: Sequence[Input], queries: Sequence[str | None] | None = None, **options: Any
    ) -> list[Summary]:
        """Summarize several inputs together; they share the encoder and decoder batches."""
        if isinstance(inputs, (str, bytes)) or not len(inputs):
            raise InputError("summarize_batch takes a non-empty list of inputs; use summarize() for one text")
        queries = list(queries) if queries is not None else [None] * len(inputs)
        if len(queries) != len(inputs):
            raise InputError(f"{len(queries)} queries for {len(inputs)} inputs; give one query (or None) per input")
        paging, generation = self.options(**options)
        started = time.perf_counter()
        pager = Pager(self.tokenizer, self.special, paging)
        documents = [as_documents(item) for item in inputs]
        items = [pager(docs, query) for docs, query in zip(documents, queries)]
        paged = time.perf_counter()
        batch = UnitBatch.from_units(items, self.special.pad)
        session = self.backend.start(batch, generation.num_beams, self.unit_batch_size)
        encoded = time.perf_counter()
        try:
            hypotheses = generate(
                session, batch.batch, generation, self.special.decoder_start, self.special.eos, self.special.pad
            )
        finally:
            session.close()
        done = time.perf_counter()
        timings = {"paging": paged - started, "encode": encoded - paged, "decode": done - encoded, "total": done - started}
        return [
            Summary(
                text=self.tokenizer.decode(hyp.token_ids, skip_special_tokens=True).strip(),
                token_ids=hyp.token_ids,
                units=units,
                unit_weights=hyp.unit_weights[:, : len(units)],
                score=hyp.score,
                timings=timings,
            )
            for hyp, units in zip(hypotheses, items)
        ]


def _torch_backend(path: Path, is_bundle: bool, threads: int | None):
    """The torch reference backend reads a checkpoint directory (weights + config + tokenizer)."""
    if is_bundle:
        raise OptionError(f"{path} is an ONNX bundle; the torch backend needs the checkpoint it was exported from")
    from .backends.torch import TorchBackend
    from .modeling.checkpoint import load_checkpoint

    loaded = load_checkpoint(path)
    if loaded.tokenizer_file is None:
        raise BundleNotFoundError(f"{path} has no {C.TOKENIZER_FILE}; put the model's tokenizer beside its weights")
    cfg = loaded.model.config
    settings = {
        "model": cfg.to_dict(),
        "units": loaded.settings.get("units", {}),
        "generation": loaded.settings.get("generation", {}),
        "special_tokens": cfg.special_tokens(),
        "tokenizer": loaded.tokenizer_file,
    }
    return TorchBackend(loaded.model, threads), settings
