"""Model kinds: one name in one registry, leading to what the runtime needs to know of a kind (no torch here).

A kind declares its revision (bumped when its graphs or unit layout change), its unit options (a frozen, validated
dataclass) and its graphs' IO: names, dtypes and dynamic axes of every input and output, from the model config.
That declaration is the one the exporter writes, the manifest records and the backends check. The torch side of
a kind (modeling, loaders, training objective) registers under the same name in `locsum_sdk.modeling`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from .. import constants as C
from ..configs.llama import BACKBONE as LLAMA
from ..configs.llama import LlamaConfig
from ..configs.model import BartConfig
from ..errors import BundleError, LocsumError, OptionError
from ..limits import tfidf_feature
from ..memory import MemoryLayout
from ..unit_batch import UnitBatch
from ..units import Unit

BART = "bart"
# dtype -> ONNX element type name
ONNX_TYPES = {"int64": "int64", "int32": "int32", "float32": "float", "bool": "bool", "int8": "int8"}
DTYPES = tuple(ONNX_TYPES)


@dataclass(frozen=True)
class TensorIO:
    """One input or output of a graph."""

    name: str
    dtype: str  # one of DTYPES
    axes: dict[int, str]  # dynamic axes: position -> name (the other dimensions are fixed by the model)

    @property
    def onnx_type(self) -> str:
        """The type ONNX Runtime reports for it, e.g. 'tensor(int64)'."""
        return f"tensor({ONNX_TYPES[self.dtype]})"


@dataclass(frozen=True)
class GraphIO:
    """What one graph of a kind takes and returns."""

    file: str
    inputs: tuple[TensorIO, ...]
    outputs: tuple[TensorIO, ...]
    extra_outputs: tuple[TensorIO, ...] = ()  # what a prepared graph may add after `outputs` (see step_graph)
    former_outputs: tuple[TensorIO, ...] = ()  # what a graph exported before may still write ahead of `outputs`

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    @property
    def recorded_outputs(self) -> list[list[str]]:
        """The output names a bundle's manifest may record: the declared ones, or the former ones before them."""
        former = [t.name for t in self.former_outputs]
        return [self.output_names, former + self.output_names] if former else [self.output_names]

    @property
    def axes(self) -> dict[str, dict[int, str]]:
        return {t.name: dict(t.axes) for t in self.inputs + self.outputs if t.axes}

    def accepts_outputs(self, found: list[tuple[str, str]]) -> bool:
        """Whether a graph's (name, ONNX type) outputs are the declared ones, with or without the extras, or those
        after the former ones (a graph exported before, whose outputs the backends read by name)."""
        def typed(outputs: tuple[TensorIO, ...]) -> list[tuple[str, str]]:
            return [(t.name, t.onnx_type) for t in outputs]

        declared = typed(self.outputs)
        return found in (declared, declared + typed(self.extra_outputs), typed(self.former_outputs) + declared)


def cross_outputs(layers: int, rows: str) -> tuple[TensorIO, ...]:
    """Every decoder layer's cross key (rows, H, d, L) and value (rows, H, L, d), as the encoder writes them."""
    return tuple(t for i in range(layers) for t in (TensorIO(C.cross_key(i), "float32", {0: rows, 3: "length"}),
                                                    TensorIO(C.cross_value(i), "float32", {0: rows, 2: "length"})))


def unit_rows(layers: int, dtype: str, decoder: bool = False, present: bool = False) -> tuple[TensorIO, ...]:
    """Every layer's unit key and value rows of the unit-row step (`modeling.fused_unit_rows`): (units, H, length,
    d) as the encoder writes them, or (rows, H, capacity, d) as the `decoder` reads them (`present`: its outputs)."""
    names = (C.present_unit_key, C.present_unit_value) if present else (C.unit_key, C.unit_value)
    axes = {0: "rows", 2: "capacity"} if decoder else {0: "units", 2: "length"}
    return tuple(TensorIO(name(i), dtype, axes) for i in range(layers) for name in names)


def _step_reads() -> tuple[TensorIO, ...]:
    """What every step graph reads first: the beams' last tokens, the units' masks, the grid's token mask."""
    return (TensorIO(C.INPUT_IDS, "int64", {0: "batch", 1: "beams"}),
            TensorIO(C.UNIT_MASK, "bool", {0: "batch", 1: "units"}),
            TensorIO(C.ENCODER_ATTENTION_MASK, "int64", {0: "rows", 1: "length"}))


def _step_returns() -> tuple[TensorIO, ...]:
    return (TensorIO(C.LOG_PROBS, "float32", {0: "batch", 1: "beams"}),
            TensorIO(C.UNIT_WEIGHTS, "float32", {0: "batch", 1: "units", 2: "beams"}))


def unit_rows_step(layers: int, dtype: str) -> GraphIO:
    """decoder.onnx of the unit-row step: the step contract's first inputs, `position` and every layer's unit rows
    (B*K*U, H, C, d), each bound as its `present_unit_*` too; `log_probs` and `unit_weights` as the contract's."""
    return GraphIO(C.DECODER_FILE,
                   inputs=(*_step_reads(), TensorIO(C.POSITION, "int64", {}), *unit_rows(layers, dtype, decoder=True)),
                   outputs=(*_step_returns(), *unit_rows(layers, dtype, decoder=True, present=True)))


def step_graph(layers: int, cache_rows: Callable[[int], str], copy: bool = False) -> GraphIO:
    """decoder.onnx under the step contract every kind shares (see `Layout`); `cache_rows(layer)` names the axis of
    that layer's slot-cache rows; a model that `copy`s also reads the grid's unit tokens (`encoder_input_ids`)."""

    def cache(name, i):
        return TensorIO(name(i), "float32", {0: cache_rows(i), 2: "beams", 3: "capacity"})

    return GraphIO(
        C.DECODER_FILE,
        inputs=(*_step_reads(),
                *([TensorIO(C.ENCODER_INPUT_IDS, "int64", {0: "rows", 1: "length"})] if copy else []),
                TensorIO(C.POSITION, "int64", {}),
                TensorIO(C.CACHE_SLOTS, "int64", {0: "batch", 1: "beams", 2: "capacity"}),
                *[cache(name, i) for i in range(layers) for name in (C.past_key, C.past_value)],
                *cross_outputs(layers, "rows")),
        outputs=(*_step_returns(),
                 *[cache(name, i) for i in range(layers) for name in (C.present_key, C.present_value)]),
        extra_outputs=(TensorIO(C.TOP_LOG_PROBS, "float32", {0: "batch", 1: "beams"}),
                       TensorIO(C.TOP_TOKENS, "int32", {0: "batch", 1: "beams"})),
    )


class Layout(MemoryLayout, Protocol):
    """How a kind's graphs are fed from a unit batch: all a backend asks of a kind, and the shapes its graphs
    allocate, for the memory estimate (`memory.MemoryLayout`).

    The step contract is common to every kind: the decoder takes the beams' last tokens (`input_ids`, (B, K)),
    `position`, `cache_slots`, every layer's `past_key`/`past_value` (bound as their `present_*` too) and the
    `cross_key`/`cross_value` the encoder wrote for every grid row (B*U), and returns `log_probs` (B, K, V) and
    `unit_weights` (B, U, K); a model that copies also reads the grid's unit tokens (`encoder_input_ids`, (B*U, L),
    see `step_graph`); a graph prepared for TensorRT also returns each beam's best T tokens
    (`top_log_probs`, `top_tokens`), so that a step copies those to the host instead of the whole vocabulary.
    What differs between kinds is below."""

    units_alone: bool  # each unit's encoder outputs depend on its own tokens only (a `UnitCache` can serve them)

    def encoder_runs(self, batch: UnitBatch, size: int) -> list[tuple[int, int, int]]:
        """The encoder's micro-batches of at most `size` units: (first unit, end unit, first grid row)."""

    def encoder_inputs(self, batch: UnitBatch, first: int, end: int) -> dict[str, np.ndarray]:
        """Inputs of one encoder run over units [first, end), by name."""

    def decoder_inputs(self, batch: UnitBatch) -> dict[str, np.ndarray]:
        """The decoder's inputs that stay the same at every step (besides cross keys/values), by name; a backend
        binds those its decoder graph declares (`encoder_input_ids` only where the model copies)."""


def fixed_runs(units: Sequence[Unit], query_ids: Sequence[int], options: Any, size: int) -> list[tuple[int, int]]:
    """Consecutive runs of at most `size` units: [first, end) each."""
    return [(first, min(first + size, len(units))) for first in range(0, len(units), size)]


TFIDF = "tfidf"  # a selection graph's input: each unit's standardized tf-idf cosine to the query


def tfidf_input(reads: bool, axis: str) -> tuple[TensorIO, ...]:
    """The TFIDF input of a selection graph whose model `reads` it (one float per unit along `axis`), else none."""
    return (TensorIO(TFIDF, "float32", {0: axis}),) if reads else ()


def tfidf_features(reads: Callable[[dict[str, Any]], bool]):
    """`Selection.features` of a stage whose model may read TFIDF (`reads(model config)`): `limits.tfidf_feature`
    of all an item's units, in the ids the stage reads."""

    def features(model: dict[str, Any], units: Sequence[Unit], query_ids: Sequence[int]) -> dict[str, np.ndarray]:
        return {TFIDF: tfidf_feature([u.text_ids for u in units], query_ids)} if reads(model) else {}

    return features


@dataclass(frozen=True)
class OwnTokenizer:
    """A selection graph that reads the ids of a tokenizer of its own (a WordPiece extractor beside a BPE
    generator). The bundle, or the checkpoint, carries it as `file` beside the model's tokenizer; the runtime loads
    it once, and `reframe(units, query, tokenizer, options, model config)` gives the units (texts and spans
    unchanged) and the query ids in its ids, framed as the stage's `inputs` read them."""

    file: str
    used: Callable[[dict[str, Any]], bool]  # model config -> whether this model's stage reads its own tokenizer
    vocab_size: Callable[[dict[str, Any]], int]  # model config -> the ids the stage's graph can read
    reframe: Callable[[Sequence[Unit], str | None, Any, Any, dict[str, Any]], tuple[list[Unit], list[int]]]


@dataclass(frozen=True)
class Selection:
    """A stage between paging and encoding (DYLE's extractor, the hierarchical transformer's ranker): the kind's
    `graph` scores an item's units run by run, and `keep` chooses the units the encoder sees.

    Each run is a few consecutive units (`runs(units, query_ids, unit options, unit_batch_size)`: by count, or
    packed into chunks of tokens as an extractor reads them), so the stage's memory is bounded by one run and its
    time grows with the number of units; `memory(model config, run's inputs)` is the working memory of one run in
    bytes, checked against the call's memory limit before the run; `own_tokenizer`, for a graph that may read the
    ids of a tokenizer of its own; `features(model config, units, query ids)`, for inputs that depend on the whole
    item (one row per unit; each run reads its rows), computed once per item."""

    graph: str  # the scoring graph, one of the kind's graphs
    inputs: Callable[[Sequence[Unit], Sequence[int], Any], dict[str, np.ndarray]]  # (run's units, query ids, options)
    scores: str  # the graph output holding one float score per unit of the run, (n,)
    keep: Callable[[Sequence[Unit], np.ndarray, Any], list[Unit]]  # (units, scores, unit options) -> kept units
    runs: Callable[[Sequence[Unit], Sequence[int], Any, int], list[tuple[int, int]]] = fixed_runs
    memory: Callable[[dict[str, Any], dict[str, np.ndarray]], int] | None = None
    own_tokenizer: OwnTokenizer | None = None  # for stages whose graph may read another tokenizer's ids
    features: Callable[[dict[str, Any], Sequence[Unit], Sequence[int]], dict[str, np.ndarray]] | None = None


def keep_top(units: Sequence[Unit], scores: np.ndarray, count: int, ranked: bool) -> list[Unit]:
    """The `count` best-scored units, each carrying its score: best first (`ranked`) or in input order. Ties go to
    the earlier unit."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:count]
    chosen = order if ranked else np.sort(order)
    return [replace(units[i], score=float(scores[i])) for i in chosen]


@dataclass(frozen=True)
class Kind:
    """A model kind as the runtime knows it."""

    name: str
    revision: int  # bumped whenever the kind's graphs or unit layout change
    units: str  # what a unit is and what its weight in a decoding step means (for `Summary.units`)
    unit_options: type  # frozen dataclass of the kind's unit options; UNIT_TOKENS names its unit-size field
    pager: Callable[..., Any]  # (tokenizer, special tokens, unit options, max_tokens) -> units maker: called with
    # (documents, query) it returns the units; `query_ids(query)` validates and tokenizes a query, and
    # `pages(documents, query_ids)` makes the units from those ids
    graphs: Callable[[dict[str, Any]], dict[str, GraphIO]]  # model config -> graph name -> IO declaration
    layout: Layout  # how a session binds the graphs' inputs
    config: type = BartConfig  # the model config dataclass (`from_dict`, `to_dict`) the manifest's `model` holds
    selection: Selection | None = None  # the stage that chooses units before encoding, for kinds that have one
    backbones: tuple[str, ...] = (BART,)  # the backbones its model runs on (`modeling.backbone`)
    llama_config: type = LlamaConfig  # its model config on a Llama backbone
    llama_layout: Layout | None = None  # its layout on a Llama backbone, where it differs from `layout`
    units_ranked: bool = False  # its encoder codes each unit's rank: no more units than the model's positions

    def model_config(self, values: Any) -> Any:
        """A manifest's or checkpoint's `model` settings as a config: a Llama backbone's (`backbone: llama`), for a
        kind that runs on one, or the kind's own dataclass; BundleError naming what is wrong."""
        backbone = values.get("backbone", BART) if isinstance(values, dict) else BART
        if backbone not in self.backbones:
            raise BundleError(f"model.backbone={backbone!r}: a {self.name} model runs on {list(self.backbones)}")
        return self.llama_config.from_dict(values) if backbone == LLAMA else self.config.from_dict(values)

    def on(self, model: Any) -> Kind:
        """The kind as it runs a model of these `model` settings: with its layout on the model's backbone."""
        backbone = model.get("backbone", BART) if isinstance(model, dict) else BART
        return replace(self, layout=self.llama_layout) if backbone == LLAMA and self.llama_layout else self

    def own_tokenizer(self, model: dict[str, Any]) -> OwnTokenizer | None:
        """The tokenizer of its own this model's selection stage reads (its bundle carries `file`), if any."""
        own = self.selection.own_tokenizer if self.selection is not None else None
        return own if own is not None and own.used(model) else None


REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    if kind.name in REGISTRY:
        raise ValueError(f"kind {kind.name!r} is registered twice")
    REGISTRY[kind.name] = kind
    return kind


def names() -> tuple[str, ...]:
    return tuple(sorted(REGISTRY))


def get(name: object, error: type[LocsumError] = OptionError) -> Kind:
    """The registered kind `name`, or `error` listing the known ones."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise error(f"kind {name!r} is not known; this locsum runs {list(names())}")
    return REGISTRY[name]


def _register_all() -> None:
    """Import every module of this package: each registers its kind, so a new kind is a new file here."""
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{module}")


_register_all()

__all__ = ["GraphIO", "Kind", "Layout", "REGISTRY", "Selection", "TensorIO", "get", "keep_top", "names", "register"]
