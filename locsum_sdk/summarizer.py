"""`Summarizer`: the public entry point. Text -> units -> encoder once -> decoding loop -> `Summary`."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import constants as C
from . import kinds
from .backends import BACKENDS, DEVICES, Backend
from .bundle import Bundle
from .errors import (
    BackendError,
    BackendUnavailableError,
    BundleError,
    BundleNotFoundError,
    BundleVersionError,
    InputError,
    MemoryLimitError,
    OptionError,
)
from .familiar import known_scripts, uncommon, unfamiliar, wordless
from .files import FileLimits, FileText, Part, read_file
from .generation import GenerationOptions, Partial, StepCallback, generate
from .keywords import Keyword, KeywordBonus, keywords
from .limits import Estimate, LimitOptions, after_batches, apply_limits, grid, truncation, within_tokens
from .memory import PAGING_BYTES_PER_TOKEN, MemoryEstimate, estimate_memory, largest_parts, memory_limit, size_text
from .options import Options, checkpoint_defaults
from .repeats import WordRepeats
from .sentences import SentenceEnds
from .sources import Sentence, sentence_sources, supported_only
from .tokenizer_file import read_tokenizer
from .unit_batch import UnitBatch
from .unit_cache import UnitCache
from .units import PagingOptions, SpecialTokens, Unit, as_documents, split_sentences
from .validation import check_bool, check_choice, check_int
from .words import Pieces, WordGuard, WordList, input_words, piece_texts

logger = logging.getLogger("locsum_sdk")

BUNDLE_ENV = "LOCSUM_BUNDLE"  # a bundle path that `Summarizer.from_pretrained()` loads when given none
PACKAGED_BUNDLE = Path(__file__).resolve().parent / "engines" / "default"  # in an installed wheel
CHECKOUT_BUNDLE = Path(__file__).resolve().parents[1] / "engines" / "default"  # in a source checkout

Input = str | bytes | Sequence[str | bytes]


def default_bundle() -> Path:
    """The bundle loaded when no path is given: $LOCSUM_BUNDLE (read at each call), else the one shipped in the
    package, else the checkout's `engines/default`."""
    if os.environ.get(BUNDLE_ENV):
        return Path(os.environ[BUNDLE_ENV])
    return PACKAGED_BUNDLE if PACKAGED_BUNDLE.is_dir() else CHECKOUT_BUNDLE


def shipped_bundles() -> dict[str, Path]:
    """The bundles that come with locsum, by name: the package's (`default` in a wheel), then the checkout's
    `engines/` (every bundle there, in a source checkout)."""
    found: dict[str, Path] = {}
    for root in (PACKAGED_BUNDLE.parent, CHECKOUT_BUNDLE.parent):
        if root.is_dir():
            for path in sorted(root.iterdir()):
                if (path / C.MANIFEST_FILE).is_file():
                    found.setdefault(path.name, path)
    return found


def resolve_bundle(path: str | os.PathLike | None) -> Path:
    """The directory `from_pretrained(path)` loads: `path` itself where it exists; else a shipped bundle named by it
    (`"dyle"` or `"engines/dyle"`, from any working directory); None: `default_bundle()`."""
    if path is None:
        return default_bundle()
    path = Path(path)
    if path.is_dir():
        return path
    parts = path.parts
    if len(parts) == 1 or (len(parts) == 2 and parts[0] == "engines"):
        shipped = shipped_bundles().get(parts[-1])
        if shipped is not None:
            return shipped
    return path


@dataclass(frozen=True)
class Summary:
    """One summary and how it was made."""

    text: str
    token_ids: list[int]  # generated ids, without the decoder start token
    units: list[Unit]  # the units the input was split into (`kind`'s units), with their texts and character spans
    unit_weights: np.ndarray  # (steps, units): each decoding step's weight per unit for the chosen beam
    score: float  # length-normalised log-probability of the chosen hypothesis
    kind: str  # the model kind; `locsum_sdk.kinds.get(kind).units` says what units and unit weights are
    timings: dict[str, float] = field(default_factory=dict)  # seconds: paging (and limits), select (the
    # kind's selection stage; 0 without one), encode, decode, total
    sources: list[Part] = field(default_factory=list)  # where each document came from, for an input read from files
    # (`summarize_file`): a file's page(s) or heading section
    sentences: list[Sentence] = field(default_factory=list)  # each sentence's span, the units it drew on and the
    # passages of the input that support it, or that it is unsupported (`locsum_sdk.sources`)
    warnings: list[str] = field(default_factory=list)  # what the summary should be read with: the input truncated
    # to its limits (which pages were kept), or unlike the bundle's training text (`locsum_sdk.familiar`); also logged

    def unit_source(self, unit: Unit) -> dict[str, Any] | None:
        """Where `unit` came from, for an input read from files: the file, its page(s) or heading, and the unit's
        character span in the file's extracted text."""
        if not self.sources:
            return None
        return self.sources[unit.document].locate(unit.start, unit.end)

    def to_dict(self) -> dict[str, Any]:
        units = [u.to_dict() for u in self.units]
        for unit, out in zip(self.units, units):
            source = self.unit_source(unit)
            if source is not None:
                out["source"] = source
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "units": units,
            "sentences": [sentence.to_dict() for sentence in self.sentences],
            "unit_weights": self.unit_weights.round(4).tolist(),
            "score": self.score,
            "kind": self.kind,
            "timings": self.timings,
            "warnings": self.warnings,
        }


class Summarizer:
    """Summarizes long inputs with a locality-aware model on ONNX Runtime (or the torch reference backend).

    Example:
        >>> summarizer = Summarizer.from_pretrained("engines/default")
        >>> summary = summarizer.summarize(open("report.txt").read(), num_beams=4)
        >>> print(summary.text)
    """

    def __init__(self, backend: Backend, tokenizer, special: SpecialTokens, defaults: Options, model: dict[str, Any],
                 unit_batch_size: int = 4, selection_tokenizer=None, unit_cache: UnitCache | None = None,
                 words: WordList | None = None, common_words: WordList | None = None):
        """defaults: the options of a call that overrides none; model: the model config (`manifest.model`), whose
        shapes bound the options and size the memory estimate; selection_tokenizer: the tokenizer of a selection
        stage that reads ids of its own (the kind's `Selection.own_tokenizer`); unit_cache: see `unit_cache`;
        words: the known words beside each input's for the `known_words` option (the bundle's `words.txt`);
        common_words: the words no input's keywords are, for the `keywords` option (`common_words.txt`)."""
        check_int("unit_batch_size", unit_batch_size, 1)
        self.backend, self.tokenizer, self.special, self.defaults = backend, tokenizer, special, defaults
        self.words, self.common_words, self._pieces, self._word_repeats = words, common_words, None, None
        self._scripts: frozenset[str] | None = None
        self._sentence_ends: SentenceEnds | None = None
        self._piece_texts: tuple[list[str], list[bool], set[int]] | None = None
        self.selection_tokenizer = selection_tokenizer
        self.kind = backend.kind
        self.model, self.max_positions, self.unit_batch_size = model, model["max_positions"], unit_batch_size
        self.unit_cache = unit_cache

    @property
    def unit_cache(self) -> UnitCache | None:
        """The `UnitCache` the encoder reads units from and stores them in, or None. Only kinds whose units are
        encoded alone (PageSum, DYLE) can be served from it, on a backend whose grid it can write (onnxruntime on
        the CPU, torch); a selection stage's runs (DYLE's extractor, the hierarchical transformer's ranker) are
        served on any backend. Setting one where the encoder cannot use it warns."""
        return self._unit_cache

    @unit_cache.setter
    def unit_cache(self, cache: UnitCache | None) -> None:
        _check_cache(cache)
        keeps = (f"; the cache keeps its {self.kind.selection.graph} runs only" if self.kind.selection is not None
                 else "")
        if cache is not None and not self.kind.layout.units_alone:
            logger.warning("a %s model encodes the units of an input together, so the unit cache cannot serve "
                           "its encoder: every summary encodes its whole input%s", self.kind.name, keeps)
        elif cache is not None and not self.backend.caches_units:
            logger.warning("the %s backend here keeps the encoder's outputs where the unit cache cannot write: "
                           "every summary encodes its whole input%s", self.backend.name, keeps)
        self._unit_cache = cache

    @property
    def _usable_cache(self) -> UnitCache | None:
        cache = self._unit_cache
        return cache if cache is not None and self.kind.layout.units_alone and self.backend.caches_units else None

    @property
    def paging(self) -> PagingOptions:
        return self.defaults.units

    @property
    def limits(self) -> LimitOptions:
        return self.defaults.limits

    @property
    def generation(self) -> GenerationOptions:
        return self.defaults.generation

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike | None = None,
        backend: str = "auto",
        threads: int | None = None,
        unit_batch_size: int = 4,
        verify: bool = True,
        device: str = "auto",
        unit_cache: UnitCache | None = None,
        cuda_graphs: bool | None = None,
    ) -> Summarizer:
        """Load a bundle (ONNX Runtime) or a checkpoint directory (torch reference backend).

        Args:
            path: bundle or checkpoint directory, or the name of a shipped bundle ("dyle", or "engines/dyle" from any
                directory; see `shipped_bundles`); None loads $LOCSUM_BUNDLE or the shipped default bundle.
            backend: "auto" (a bundle runs on its TensorRT engines where it has them and they can run here, else on
                onnxruntime; a checkpoint on torch), "onnxruntime", "tensorrt" or "torch".
            threads: intra-op threads; None: $LOCSUM_THREADS, else every CPU this process may use.
            unit_batch_size: units encoded together at most; bounds the encoder's peak memory (on the CPU, ONNX
                Runtime takes fewer where they are long: about a thousand token rows a run, or one unit).
            verify: check the sha256 of every bundle file.
            device: "auto" (the GPU where the backend can use one: TensorRT engines, onnxruntime-gpu), "cpu" or
                "cuda".
            unit_cache: a `UnitCache` of encoded units, so that a text summarized again after it grew encodes only
                its new or changed units (see `Summarizer.unit_cache`); None encodes every unit every time.
            cuda_graphs: the torch backend on a CUDA GPU replays its decoding step from CUDA graphs
                (`backends.step_graphs`); None: where it can, False: never, True: where it can, saying why not
                elsewhere.
        """
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise OptionError(f"path is a {type(path).__name__}; pass a bundle or checkpoint directory (str or Path)")
        check_choice("backend", backend, BACKENDS)
        check_int("threads", threads, 1, optional=True)
        check_int("unit_batch_size", unit_batch_size, 1)
        check_bool("verify", verify)
        check_choice("device", device, DEVICES)
        if cuda_graphs is not None:
            check_bool("cuda_graphs", cuda_graphs)
        _check_cache(unit_cache)
        if backend == "tensorrt" and device == "cpu":
            raise OptionError("backend='tensorrt' does not run on device='cpu'; TensorRT runs on the GPU")
        path = resolve_bundle(path)
        if not path.is_dir():
            where = (f" (the default bundle; set {BUNDLE_ENV} or pass a path)" if path == default_bundle() else
                     f" nor a shipped bundle ({', '.join(shipped_bundles())})")
            raise BundleNotFoundError(f"{path} is not a directory{where}; pass the path of a bundle or checkpoint")
        is_bundle = (path / C.MANIFEST_FILE).is_file()
        if not is_bundle and not (path / C.CHECKPOINT_CONFIG_FILE).is_file():
            raise BundleNotFoundError(
                f"{path} has neither {C.MANIFEST_FILE} (a bundle) nor {C.CHECKPOINT_CONFIG_FILE} (a checkpoint); "
                "pass a bundle directory as `locsum export` writes it, or a checkpoint directory"
            )
        if backend == "auto":
            backend = "onnxruntime" if is_bundle else "torch"
            auto_engines = is_bundle
        else:
            auto_engines = False
        if backend in ("onnxruntime", "tensorrt"):
            bundle = Bundle.load(path, verify=verify)
            runner = _bundle_backend(bundle, backend, threads, auto_engines and device != "cpu", device)
            settings = dataclasses.asdict(bundle.manifest) | {"tokenizer": bundle.file(C.TOKENIZER_FILE)}
            locate, present = bundle.file, set(bundle.names())
        else:
            runner, settings = _torch_backend(path, is_bundle, threads, device, cuda_graphs)
            locate, present = path.joinpath, {p.name for p in path.iterdir() if p.is_file()}  # a checkpoint's
        special = SpecialTokens(**settings["special_tokens"])
        tokenizer = _tokenizer(Path(settings["tokenizer"]), settings["model"]["vocab_size"], "the model")
        own = runner.kind.own_tokenizer(settings["model"])
        selection_tokenizer = None
        if own is not None:
            file = locate(own.file)
            if not file.is_file():
                raise BundleNotFoundError(f"{path} has no {own.file}: its {runner.kind.selection.graph} reads a "
                                          "tokenizer of its own; export again from a checkpoint that has it")
            selection_tokenizer = _tokenizer(file, own.vocab_size(settings["model"]),
                                             f"its {runner.kind.selection.graph}")
        try:
            defaults = Options.from_settings(settings, runner.kind)
        except OptionError as err:
            raise BundleError(f"{path}: the saved default options are not valid ({err}); export again") from None
        def word_list(name: str) -> WordList | None:  # one the bundle lists, or one beside the checkpoint
            return WordList.read(locate(name)) if name in present else None

        words, common_words = word_list(C.WORDS_FILE), word_list(C.COMMON_WORDS_FILE)
        if defaults.generation.keywords and common_words is None:
            raise BundleError(f"{path}: its default options favour keywords but it has no {C.COMMON_WORDS_FILE}; "
                              "export it again with the list (`locsum export --common-words`)")
        summarizer = cls(runner, tokenizer, special, defaults, settings["model"], unit_batch_size,
                         selection_tokenizer, unit_cache, words, common_words)
        summarizer._read_pieces(defaults.generation)
        return summarizer

    def options(self, options: Options | None = None, /, **overrides: Any) -> Options:
        """`options` (default: this summarizer's defaults) with `overrides` (any option's name) applied and
        validated; unknown names are refused, and a default yields to an override it would contradict
        (`max_length=8` lowers a default `min_length=20` to 8). The result can be passed to `summarize`."""
        base = self.defaults if options is None else options
        if not isinstance(base, Options) or type(base.units) is not type(self.defaults.units):
            raise OptionError(
                f"options is a {type(base).__name__}; pass the Options of this summarizer's kind ({self.kind.name}), "
                "as summarizer.options(...) returns them, or None"
            )
        options = base.replace(**overrides)
        options.check_model(self.model)
        if options.generation.keywords and self.common_words is None:
            raise OptionError(f"keywords={options.generation.keywords} needs the bundle's {C.COMMON_WORDS_FILE} (the "
                              "words most training inputs hold, which are never keywords) and this bundle has none: "
                              "set keywords=0, or add the list (`locsum export --bundle DIR --output NEW "
                              "--common-words FILE`)")
        return options

    @property
    def pieces(self) -> Pieces:
        """What each token id of the model is as part of a word (read from the tokenizer once)."""
        if self._pieces is None:
            self._pieces = Pieces.from_texts(*self._texts("known_words"))
        return self._pieces

    @property
    def word_repeats(self) -> WordRepeats:
        """The `word_repeat_penalty` filter of the model's tokenizer (built from its pieces once)."""
        if self._word_repeats is None:
            self._word_repeats = WordRepeats(self.pieces)
        return self._word_repeats

    @property
    def sentence_ends(self) -> SentenceEnds:
        """Where the model's pieces may end a sentence, for the `whole_sentences` option (read once)."""
        if self._sentence_ends is None:
            self._sentence_ends = SentenceEnds.from_texts(*self._texts("whole_sentences"))
        return self._sentence_ends

    @property
    def scripts(self) -> frozenset[str] | None:
        """The scripts of the bundle's known words (`locsum_sdk.familiar`), read once; None for a bundle without a
        word list, or one of no letters, whose inputs are not checked."""
        if self._scripts is None and self.words is not None:
            self._scripts = known_scripts(self.words.words)
        return self._scripts or None

    def _check_familiar(self, documents: list[list[str]]) -> list[list[str]]:
        """Each input's warning (logged) where it is unlike the bundle's training text (`locsum_sdk.familiar`): its
        letters mostly in scripts the bundle's words do not hold, or else few of its words the bundle's common ones,
        or else few words at all for its length."""
        notes: list[list[str]] = [[] for _ in documents]
        for index, docs in enumerate(documents):
            found = unfamiliar(docs, self.scripts) if self.scripts is not None else None
            if found is None and self.common_words is not None:
                found = uncommon(docs, self.common_words)
            if found is None:
                found = wordless(docs)
            if found is not None:
                logger.warning("input %d: %s", index, found.message())
                notes[index].append(found.message())
        return notes

    def _read_pieces(self, generation: GenerationOptions) -> None:
        """Build the piece tables `generation`'s options read, so that loading pays them (a few tenths of a second
        for a vocabulary of 50k pieces) and not the first summary's decoding. A tokenizer that marks no word starts
        is left to the summary that asks for such an option, which says how to turn it off."""
        wanted = {"pieces": generation.known_words or generation.keywords or generation.ngram_word_starts,
                  "word_repeats": generation.word_repeat_penalty, "sentence_ends": generation.whole_sentences}
        try:
            for table in (name for name, needed in wanted.items() if needed):
                getattr(self, table)  # a property that builds its table once
        except OptionError:
            logger.debug("the tokenizer marks no word starts: piece tables left unbuilt")

    def _texts(self, option: str) -> tuple[list[str], list[bool], set[int]]:
        """The model's piece texts (`piece_texts`), read from the tokenizer once for every option that needs them;
        `option` names the one asking in the error of a tokenizer that marks no word starts."""
        if self._piece_texts is None:
            self._piece_texts = piece_texts(self.tokenizer, self.model["vocab_size"], option)
        return self._piece_texts

    def _guard(self, inputs: list[tuple[WordList, WordList]]) -> WordGuard:
        """The `known_words` filter of one decoding batch: each input's words (and those it writes with other
        capitals than Capitalized or ALL CAPS, `input_words`), and the bundle's."""
        return WordGuard(self.pieces, [[words, self.words] if self.words else [words] for words, _ in inputs],
                         self.special.eos, [mixed for _, mixed in inputs])

    def _bonus(self, inputs: list[list[Keyword]], generation: GenerationOptions) -> KeywordBonus:
        """The `keywords` bonus of one decoding batch: each input's keywords spelled as pieces."""
        return KeywordBonus.build(self.tokenizer, self.pieces, inputs, generation.keyword_bonus)

    def estimate_memory(self, items: Sequence[Sequence[Unit]], generation: GenerationOptions,
                        selection: int = 0) -> MemoryEstimate:
        """Working memory (above the loaded model) of summarizing the pages `items` with `generation`; `selection`:
        the bytes of the selection stage's largest run before it (`selection_memory`), for kinds with one."""
        if not items or not all(items):
            raise InputError("estimate_memory takes the pages of one or more inputs, each with at least one page")
        tokens = sum(len(u.token_ids) for units in items for u in units)
        estimate = self._estimate(generation, tokens, selection)
        batches = [[items[i] for i in group] for group in shape_groups(items)]  # summarize_batch's batches
        return largest_parts([estimate(*grid(batch)) for batch in batches])

    def estimate(self, text_or_documents: Input, /, query: str | None = None, options: Options | None = None,
                 **overrides: Any) -> MemoryEstimate:
        """Working memory `summarize` would need for this input with these options, before any model work: the
        input is paged and checked against `max_tokens` (raising or truncating as `summarize` would); a kind with
        a selection stage counts the stage's largest run and as many units as it keeps, the longest of them."""
        chosen = self.options(options, **overrides)
        paging, limits = chosen.units, chosen.limits
        _, query_ids, items = self._paged([text_or_documents], [query], chosen)
        units = within_tokens(items, limits, query_ids, type(paging).UNIT_TOKENS)[0]
        selection = 0
        if self.kind.selection is not None:
            selection = self.selection_memory(units, query, paging)
            longest_first = np.array([len(u.token_ids) for u in units], dtype=np.float64)
            units = self.kind.selection.keep(units, longest_first, paging)
        return self.estimate_memory([units], chosen.generation, selection)

    def _paged(self, inputs: Sequence[Input], queries: Sequence[str | None],
               options: Options) -> tuple[list[list[str]], list[list[int]], list[list[Unit]]]:
        """Each input's documents (checked), query ids and units, as the kind's pager makes them under `options`."""
        documents = [as_documents(item) for item in inputs]  # every input checked before any query
        pager = self.kind.pager(self.tokenizer, self.special, options.units, options.limits.max_tokens)
        query_ids = [pager.query_ids(query) for query in queries]
        return documents, query_ids, [pager.pages(docs, ids) for docs, ids in zip(documents, query_ids)]

    def _estimate(self, generation: GenerationOptions, tokens: int, selection: int = 0) -> Estimate:
        def estimate(batch: int, width: int, length: int) -> MemoryEstimate:
            return estimate_memory(self.model, self.kind.layout, batch, width, length, generation.num_beams,
                                   generation.max_length, self.unit_batch_size, tokens, selection)

        return estimate

    def unit_scores(self, units: Sequence[Unit], query: str | None, paging,
                    memory_limit: int | None = None) -> np.ndarray:
        """The kind's selection graph's score of every unit of one input (float32, (len(units),)), run by run:
        `units` as the kind's pager made them with `query`, `paging` the kind's unit options. A stage with a
        tokenizer of its own reads the units in its ids. With `memory_limit` (bytes), a run whose working memory
        (with the paged input's) would exceed it raises `MemoryLimitError` before it runs."""
        selection = self.kind.selection
        if selection is None:
            raise OptionError(f"a {self.kind.name} model has no selection stage to score units with")
        if not isinstance(units, (list, tuple)) or not units or not all(isinstance(u, Unit) for u in units):
            raise InputError("unit_scores takes a non-empty list of units, as the kind's pager makes them")
        return self._scores(units, query, paging, memory_limit)[0]

    def _scores(self, units: Sequence[Unit], query: str | None, paging,
                memory_limit: int | None) -> tuple[np.ndarray, int]:
        """`unit_scores`, and the bytes its largest run needed (see `selection_memory`)."""
        selection = self.kind.selection
        scores, largest = [], 0
        for first, end, inputs, needed in self._selection_runs(units, query, paging):
            if memory_limit is not None and needed > memory_limit:
                raise MemoryLimitError(
                    f"the {selection.graph} pass over {end - first} units needs about {size_text(needed)}, over the "
                    f"memory limit of {size_text(memory_limit)}; load the model with a smaller unit_batch_size (now "
                    f"{self.unit_batch_size}), summarize a shorter input, or raise memory_limit")
            run = self._run_selection(inputs)
            finite = bool(np.isfinite(run).all())
            if run.shape != (end - first,) or not finite:
                raise BackendError(f"the {selection.graph} returned {run.size} scores (finite: {finite}) for "
                                   f"{end - first} units; export the bundle again")
            scores.append(run)
            largest = max(largest, needed)
        scores = np.concatenate(scores)
        if scores.shape != (len(units),):
            raise BackendError(f"the {self.kind.name} selection runs scored {scores.size} of {len(units)} units")
        return scores, largest

    def _run_selection(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """One run of the selection graph: its scores, from the unit cache when the same inputs ran before."""
        selection, cache = self.kind.selection, self._unit_cache
        key = cache.run_key(self.backend.identity, selection.graph, inputs) if cache is not None else None
        cached = cache.get(key) if cache is not None else None
        if cached is not None:
            return cached[selection.scores]
        outputs = self.backend.run(selection.graph, inputs)
        run = np.asarray(outputs[selection.scores], dtype=np.float32).reshape(-1)
        if cache is not None and np.isfinite(run).all():
            cache.put(key, {selection.scores: run})
        return run

    def selection_memory(self, units: Sequence[Unit], query: str | None, paging) -> int:
        """Bytes the kind's selection stage needs at its largest run over `units` (as `unit_scores` takes them),
        the paged input included; 0 for a kind without one or a stage that declares no memory."""
        if self.kind.selection is None:
            return 0
        return max((needed for *_, needed in self._selection_runs(units, query, paging)), default=0)

    def _selection_runs(self, units: Sequence[Unit], query: str | None, paging):
        """The selection stage's runs over one input: (first, end, the run's inputs by name, bytes it needs with
        the paged input's, 0 when the stage declares no memory)."""
        selection = self.kind.selection
        paged = PAGING_BYTES_PER_TOKEN * sum(len(u.token_ids) for u in units)
        if self.selection_tokenizer is None:
            query_ids = self.kind.pager(self.tokenizer, self.special, paging).query_ids(query)
        else:
            units, query_ids = selection.own_tokenizer.reframe(units, query, self.selection_tokenizer, paging,
                                                               self.model)
        whole = selection.features(self.model, units, query_ids) if selection.features is not None else {}
        for first, end in selection.runs(units, query_ids, paging, self.unit_batch_size):
            inputs = {**selection.inputs(units[first:end], query_ids, paging),
                      **{name: rows[first:end] for name, rows in whole.items()}}
            needed = paged + selection.memory(self.model, inputs) if selection.memory is not None else 0
            yield first, end, inputs, needed

    def _select(self, units: list[Unit], query: str | None, paging, limit: int | None) -> tuple[list[Unit], int]:
        """The kind's selection stage on one item: the units the encoder will see, as the kind keeps them, and the
        bytes its largest run needed."""
        scores, largest = self._scores(units, query, paging, limit)
        kept = self.kind.selection.keep(units, scores, paging)
        if not kept:
            raise BackendError(f"the {self.kind.name} selection stage kept none of {len(units)} units")
        return kept, largest

    def summarize(self, text_or_documents: Input, /, query: str | None = None, options: Options | None = None,
                  on_step: Callable[[int, dict[int, Partial]], None] | None = None, **overrides: Any) -> Summary:
        """Summarize one text, or one cluster of documents (a list of strings).

        Args:
            text_or_documents: a string (UTF-8 bytes accepted) or a list of documents.
            query: optional question; it is prepended to every page.
            options: all options at once (`summarizer.options(...)`); None: the bundle's defaults.
            on_step: called after every decoding step with the step and {0: `Partial`}, where the summary stands
                (to stream it, or to stop: an exception it raises stops decoding and propagates).
            **overrides: any field of the kind's unit options, `LimitOptions` or `GenerationOptions`.
        """
        return self.summarize_batch([text_or_documents], [query], options, on_step, **overrides)[0]

    def summarize_file(self, files: str | os.PathLike | FileText | Sequence[str | os.PathLike | FileText], /,
                       query: str | None = None, options: Options | None = None, password: str | None = None,
                       limits: FileLimits | None = None,
                       on_step: Callable[[int, dict[int, Partial]], None] | None = None, **overrides: Any) -> Summary:
        """Summarize one file, or several as one input: PDF, HTML, Word (.docx), Markdown or text, each read by
        `locsum_sdk.files.read_file` (its type known from its content) into documents that follow its structure (a
        PDF's pages, a marked-up file's heading sections; a text file is one document). The summary's `sources`
        say where each document came from (`Summary.unit_source`). A file already read (`FileText`) is taken as it
        is. `password` opens encrypted PDFs; `limits` bounds what is read of each file (default: `FileLimits` with
        the call's memory limit, which a file whose reading would pass it is refused by, before it is read); the
        rest as `summarize`."""
        items = [files] if isinstance(files, (str, os.PathLike, FileText)) else files
        if not isinstance(items, (list, tuple)) or not items:
            raise InputError(f"files is a {type(files).__name__}; pass a path, a FileText, or a non-empty list of "
                             "them")
        chosen = self.options(options, **overrides)
        if limits is None:  # reading a file counts toward the call's memory limit
            limits = FileLimits(memory=memory_limit(chosen.limits.memory_limit, self.backend.free_memory))
        read = [item if isinstance(item, FileText) else read_file(item, password, limits) for item in items]
        documents = [document for file in read for document in file.documents()]
        summary = self.summarize(documents, query, chosen, on_step)
        return dataclasses.replace(summary, sources=[part for file in read for part in file.parts])

    def summarize_batch(
        self, inputs: Sequence[Input], /, queries: Sequence[str | None] | None = None, options: Options | None = None,
        on_step: Callable[[int, dict[int, Partial]], None] | None = None, **overrides: Any,
    ) -> list[Summary]:
        """Summarize several inputs together: inputs of like unit counts share encoder and decoder batches
        (`shape_groups`), so that padding units stay few; summaries come back in input order. `on_step`: as in
        `summarize`, with the `Partial` of each input of the batch being decoded, keyed by its index in `inputs`."""
        if on_step is not None and not callable(on_step):
            raise OptionError(f"on_step is a {type(on_step).__name__}; pass a function of (step, partials) or None")
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise InputError("summarize_batch takes a non-empty list of inputs; use summarize() for one text")
        if queries is None:
            queries = [None] * len(inputs)
        if not isinstance(queries, (list, tuple)):
            raise InputError(
                f"queries is a {type(queries).__name__}; pass a list with one query (or None) per input, or None"
            )
        if len(queries) != len(inputs):
            raise InputError(f"{len(queries)} queries for {len(inputs)} inputs; give one query (or None) per input")
        chosen = self.options(options, **overrides)
        paging, limits, generation = chosen.units, chosen.limits, chosen.generation
        started = time.perf_counter()
        documents, query_ids, items = self._paged(inputs, queries, chosen)
        input_tokens = [sum(len(u.text_ids) for u in units) for units in items]  # before selection: the whole input
        notes = self._check_familiar(documents)
        # the words of the documents and the query, whole: a unit may end in the middle of a long word
        known = ([input_words([*docs, self.tokenizer.decode(ids)]) for docs, ids in zip(documents, query_ids)]
                 if generation.known_words else None)
        found = ([keywords(docs, self.common_words, generation.keywords) for docs in documents]
                 if generation.keywords else None)
        paged = time.perf_counter()
        logger.info("paging: %d input(s) into %s units of at most %d tokens (%s tokens) in %.2f s",
                    len(items), "+".join(str(len(units)) for units in items),
                    getattr(paging, type(paging).UNIT_TOKENS), _count(items), paged - started)
        if logger.isEnabledFor(logging.DEBUG):
            for index, units in enumerate(items):
                for number, unit in enumerate(units):
                    logger.debug("input %d unit %d: document %d, characters %d-%d, %d tokens", index, number,
                                 unit.document, unit.start, unit.end, len(unit.token_ids))
        limit = memory_limit(limits.memory_limit, self.backend.free_memory)
        selection = 0  # the selection stage's largest run: its session's allocator keeps it through the call
        if self.kind.selection is not None:  # the input limit holds before the selection stage reads the input
            limited = within_tokens(items, limits, query_ids, type(paging).UNIT_TOKENS)
            for index, (before, after) in enumerate(zip(items, limited)):
                notes[index] += truncation(before, after, limits)
            chosen = [self._select(units, query, paging, limit) for units, query in zip(limited, queries)]
            items, selection = [kept for kept, _ in chosen], max(largest for _, largest in chosen)
            logger.info("selection: the %s kept %s units in %.2f s", self.kind.selection.graph,
                        "+".join(str(len(units)) for units in items), time.perf_counter() - paged)
        selected = time.perf_counter()
        tokens = _count(items)  # all pages stay held through the call
        estimate = self._estimate(generation, tokens, selection)
        # every batch is checked (limits, memory with the batches before it) before the first one runs: a call
        # refused at its last batch has spent nothing
        planned: list[tuple[list[int], list[list[Unit]]]] = []
        held: MemoryEstimate | None = None  # the parts of the batches before, which the runtime's arenas keep
        for group in shape_groups(items):  # inputs of like unit counts decode together: little padding
            batch_estimate = after_batches(estimate, held)
            kept = apply_limits([items[i] for i in group], limits, batch_estimate, limit,
                                [query_ids[i] for i in group], type(paging).UNIT_TOKENS)
            for index, after in zip(group, kept):
                notes[index] += truncation(items[index], after, limits)
            held = batch_estimate(*grid(kept))
            logger.info("limits: %d input(s) of %s units within %s tokens and a memory estimate of %s (limit %s)",
                        len(kept), "+".join(str(len(units)) for units in kept), limits.max_tokens,
                        size_text(held.total), "none" if limit is None else size_text(limit))
            planned.append((group, kept))
        checked = time.perf_counter()
        spent = {"encode": 0.0, "decode": 0.0}
        results: list[tuple[Any, list[Unit]]] = [None] * len(items)  # type: ignore[list-item]
        for group, kept in planned:
            start = time.perf_counter()
            batch = UnitBatch.from_units(kept, self.special.pad)
            session = self.backend.start(batch, generation.num_beams, self.unit_batch_size, self._usable_cache)
            encoded = time.perf_counter()
            logger.info("encoding: %d units on %s in %.2f s", sum(map(len, kept)), self.backend.name,
                        encoded - start)
            try:
                hypotheses = generate(
                    session, batch.batch, generation, self.special.decoder_start, self.special.eos, self.special.pad,
                    _by_input(on_step, group, kept), self._guard([known[i] for i in group]) if known else None,
                    self._bonus([found[i] for i in group], generation) if found else None,
                    [input_tokens[i] for i in group],
                    self.word_repeats if generation.word_repeat_penalty else None,
                    self.sentence_ends if generation.whole_sentences else None,
                    self.pieces.inner if generation.ngram_word_starts else None,
                )
            finally:
                session.close()
            spent["encode"] += encoded - start
            spent["decode"] += time.perf_counter() - encoded
            for index, hypothesis, units in zip(group, hypotheses, kept):
                results[index] = (hypothesis, units)
        done = time.perf_counter()
        logger.info("summarized %d input(s) in %.2f s", len(items), done - started)
        timings = {"paging": paged - started + checked - selected, "select": selected - paged,
                   "encode": spent["encode"], "decode": spent["decode"], "total": done - started}
        return [self._summary(hyp, units, timings, generation.drop_unsupported, note)
                for (hyp, units), note in zip(results, notes)]

    def partial_text(self, partial: Partial) -> str:
        """The text of a partial summary (what `on_step` reports), as `Summary.text` would have it."""
        return self._text(partial.token_ids)

    def _text(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True).strip()

    def partial_sentences(self, partial: Partial) -> list[Sentence]:
        """The complete sentences of a partial summary, with their sources as `Summary.sentences` gives them: every
        sentence but the last, which the next tokens may still extend, and the last too once `partial.finished`.
        Spans are in `partial_text(partial)`; beam search's leading beam may still change (see `Partial`)."""
        if not partial.units:
            raise OptionError("this Partial carries no units; pass one that Summarizer.summarize reported")
        text = self.partial_text(partial)
        spans = split_sentences(text)
        complete = spans if partial.finished else spans[:-1]
        if not complete:
            return []
        return sentence_sources(text[: complete[-1][1]], partial.token_ids, partial.unit_weights, partial.units,
                                self.tokenizer)

    def _summary(self, hypothesis: Any, units: list[Unit], timings: dict[str, float], drop: bool,
                 warnings: list[str]) -> Summary:
        text = self._text(hypothesis.token_ids)
        weights = hypothesis.unit_weights[:, : len(units)]
        sentences = sentence_sources(text, hypothesis.token_ids, weights, units, self.tokenizer)
        if drop:
            text, sentences = supported_only(text, sentences)
        return Summary(text=text, token_ids=hypothesis.token_ids, units=units, unit_weights=weights,
                       score=hypothesis.score, kind=self.kind.name, timings=timings, sentences=sentences,
                       warnings=warnings)


def _by_input(on_step: Callable[[int, dict[int, Partial]], None] | None, group: list[int],
              units: list[list[Unit]]) -> StepCallback | None:
    """A decoding batch's step callback that reports each row under its input's index, with its input's units (and
    its weights over them alone, not the batch's padding units)."""
    if on_step is None:
        return None

    def report(step: int, partials: list[Partial]) -> None:
        on_step(step, {index: dataclasses.replace(partial, units=tuple(kept))
                       for index, partial, kept in zip(group, partials, units)})
    return report


def _count(items: Sequence[Sequence[Unit]]) -> int:
    return sum(len(u.token_ids) for units in items for u in units)


GROUP_PADDING = 1.25  # a decoding batch's grid holds at most this many grid rows per real unit


def shape_groups(items: Sequence[Sequence[Unit]]) -> list[list[int]]:
    """The inputs of one `summarize_batch` call (their units) in decoding batches of like unit counts: sorted by
    unit count (then longest unit), a batch closes when its (inputs x widest input) grid would hold more than
    `GROUP_PADDING` rows per real unit. A padding unit costs a step as much as a real one; a batch reads the
    weights once per step for all its inputs."""
    order = sorted(range(len(items)), key=lambda i: (len(items[i]), max(len(u.token_ids) for u in items[i])))
    groups: list[list[int]] = []
    for index in order:
        group = groups[-1] if groups else None
        if group is not None and len(items[index]) * (len(group) + 1) <= GROUP_PADDING * (
                sum(len(items[i]) for i in group) + len(items[index])):
            group.append(index)
        else:
            groups.append([index])
    return groups


def _check_cache(cache: object) -> None:
    if cache is not None and not isinstance(cache, UnitCache):
        raise OptionError(f"unit_cache is a {type(cache).__name__}; pass a locsum_sdk.UnitCache or None")


def _tokenizer(path: Path, vocab_size: int, reader: str):
    """A tokenizer file, readable and with no id past what `reader` (the model, or a selection graph) can read."""
    try:
        tokenizer = read_tokenizer(path)
    except Exception as err:  # tokenizers raises its own exception for unreadable files
        raise BundleError(f"{path} is not a readable tokenizer ({err}); export again") from None
    if tokenizer.get_vocab_size() > vocab_size:
        raise BundleError(f"{path} has {tokenizer.get_vocab_size()} tokens but {reader} only {vocab_size}: it "
                          "belongs to another model; export with the model's tokenizer")
    return tokenizer


def _bundle_backend(bundle: Bundle, backend: str, threads: int | None, auto: bool, device: str) -> Backend:
    """The backend that runs a bundle: TensorRT when asked for, or (auto) when the bundle carries engines and
    they can run here; else ONNX Runtime. An auto choice that cannot run TensorRT says why, once, and goes on."""
    if backend == "tensorrt" or (auto and bundle.manifest.tensorrt):
        from .backends.tensorrt import TensorRTBackend

        try:
            return TensorRTBackend(bundle)
        except (BackendUnavailableError, BundleVersionError) as err:
            if not auto:
                raise
            logger.warning("%s: running its ONNX graphs on onnxruntime instead of its TensorRT engines: %s",
                           bundle.path, err)
    from .backends.onnxruntime import OnnxRuntimeBackend

    return OnnxRuntimeBackend(bundle, threads, device=device)


def _torch_backend(path: Path, is_bundle: bool, threads: int | None, device: str, cuda_graphs: bool | None):
    """The torch reference backend reads a checkpoint directory (weights + config + tokenizer)."""
    if is_bundle:
        raise OptionError(f"{path} is an ONNX bundle; the torch backend needs the checkpoint it was exported from")
    from .backends.torch import TorchBackend
    from .modeling.checkpoint import load_checkpoint

    loaded = load_checkpoint(path)
    if loaded.tokenizer_file is None:
        raise BundleNotFoundError(f"{path} has no {C.TOKENIZER_FILE}; put the model's tokenizer beside its weights")
    cfg = loaded.model.config
    fitted = checkpoint_defaults(loaded.settings, {}, cfg.to_dict(), kinds.get(loaded.model.kind))
    settings = {
        "model": cfg.to_dict(),
        **fitted.to_settings(),  # as export writes them: defaults the checkpoint did not save fit its positions
        "special_tokens": cfg.special_tokens(),
        "tokenizer": loaded.tokenizer_file,
    }
    return TorchBackend(loaded.model, threads, device, cuda_graphs), settings
