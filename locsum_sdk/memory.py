"""How much memory summarizing an input will take, known before any encoder work, and how much there is.

`estimate_memory` adds up what a call allocates on top of the loaded model, from the model's shapes, the unit
grid (items x units x tokens) and the decoding options, as the ONNX Runtime backend lays it out: the unit
tokens, every decoder layer's cross keys/values for every unit (the part that grows with the input), the encoder's
activations for its largest run, the self-attention slot cache at its last capacity (while it grows, the old and
the new buffers coexist), one decoding step's activations and the search's bookkeeping. The encoder and step terms
come from the kind's layout (`kinds.Layout.encoder_memory`, `step_memory`), which knows the shapes its graphs
allocate, from the building blocks below; they count the tensors alive at once in one layer, scaled by
`ARENA_SLACK` for the allocator's rounding and the regions it keeps. `benchmarks/test_estimates.py` measures
peaks against them over a grid of shapes for every kind, and `tests/test_estimates.py` over generated ones.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from .configs.model import StepShape, step_shape
from .constants import CACHE_CHUNK
from .errors import OptionError

logger = logging.getLogger("locsum_sdk")

FLOAT = 4  # bytes of a float32
INDEX = 8  # bytes of an int64
ARENA_SLACK = 1.5  # ONNX Runtime's arena rounds chunks up, extends in growing regions and keeps freed chunks
PAGING_BYTES_PER_TOKEN = 160  # tokenizer encodings, spans and unit ids while the input is paged
DEFAULT_SHARE = 0.8  # share of the available memory a call may use when no memory_limit is given

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a call is expected to allocate above the loaded model, by where they go."""

    paging: int  # the tokenizer's output and the pages while the input is split
    inputs: int  # unit token ids and attention masks
    cross: int  # cross-attention keys/values of every unit and decoder layer: linear in the input
    encoder: int  # one encoder micro-batch's activations
    cache: int  # self-attention slot cache at its largest, growth included
    decoder: int  # one decoding step's activations and outputs
    search: int  # beam histories and per-step unit weights
    selection: int = 0  # the selection stage's largest run, which its session's allocator keeps through the call

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def describe(self) -> str:
        parts = ", ".join(f"{f.name} {size_text(getattr(self, f.name))}" for f in fields(self) if getattr(self, f.name))
        return f"{size_text(self.total)} ({parts})"


def largest_parts(estimates: list[MemoryEstimate]) -> MemoryEstimate:
    """The estimate of a call that runs several batches one after another: each part at its largest over them.
    ONNX Runtime's arenas keep a run's chunks for the next (each session its own), so an encoder run of one batch
    and the decoding of another add up: an input of one 175-token page and one of twenty short pages, in two
    batches, peaked at 8.1 MB, the batches alone at 4.9 and 3.8."""
    return MemoryEstimate(**{f.name: max(getattr(e, f.name) for e in estimates) for f in fields(MemoryEstimate)})


def size_text(size: float) -> str:
    """A byte count for people, in the decimal units `parse_size` reads "6GB" and "50MB" in (1 MB = 10**6 bytes):
    GB from a gigabyte, MB from a megabyte, kB, bytes."""
    if size >= 1e9:
        return f"{size / 1e9:,.1f} GB"
    if size >= 1e6:
        return f"{size / 1e6:,.0f} MB"
    return f"{size / 1e3:.1f} kB" if size >= 1e3 else f"{size:.0f} bytes"


class MemoryLayout(Protocol):
    """What the estimate asks of a kind's layout (`kinds.Layout`): the shapes its graphs allocate."""

    def cache_groups(self, items: int, width: int, shape: StepShape) -> list[int]:
        """Rows G of each decoder layer's slot cache (G, H, K, C, d) for `items` inputs of `width` units each."""

    def encoder_memory(self, model: dict[str, Any], items: int, width: int, length: int, size: int) -> int:
        """Bytes of activations of the encoder's largest run, `items` inputs of `width` units of `length` tokens
        encoded with unit_batch_size `size`."""

    def step_memory(self, model: dict[str, Any], items: int, width: int, length: int, beams: int,
                    capacity: int) -> int:
        """Bytes of activations and outputs of one decoding step over that grid, `beams` beams, slot caches of
        `capacity` positions."""


def encoder_pass(rows: int, length: int, d_model: int, heads: int, ffn_dim: int) -> int:
    """Activations of a transformer encoder over `rows` sequences of `length` tokens, one layer alive at a time:
    attention scores and probabilities, the FFN's hidden rows, the queries, keys and values, two hidden states and
    the states the graph returns."""
    return rows * length * FLOAT * (2 * heads * length + ffn_dim + 6 * d_model)


def step_rows(rows: int, d_model: int, ffn_dim: int) -> int:
    """A decoding step's hidden rows through one layer: the hidden states, projections and the FFN's rows."""
    return rows * FLOAT * (8 * d_model + 2 * ffn_dim)


def attention_scores(queries: int, heads: int, keys: int, tensors: int = 3) -> int:
    """One attention's scores, mask and probabilities (`tensors` of them) for `queries` rows over `keys` positions."""
    return tensors * queries * heads * keys * FLOAT


def lm_head(rows: int, vocab: int) -> int:
    """The LM head's logits, their log-softmax and the decoding loop's copy, for `rows` rows."""
    return 3 * rows * vocab * FLOAT


def copy_scatter(mass: int, rows: int, vocab: int) -> int:
    """A step's copy distribution (`modeling.copy`): `mass` entries of attention mass with their token ids (float32
    and int64), scattered into a vocabulary-wide row for each of `rows` rows, and the log-space sum's temporaries
    (the copy's log, the shift, the sum: four rows in all)."""
    return mass * (FLOAT + INDEX) + 4 * rows * vocab * FLOAT


def arrays_bytes(arrays: dict[str, Any]) -> int:
    """Bytes held by a graph's input arrays."""
    return sum(int(a.nbytes) for a in arrays.values())


def estimate_memory(model: dict[str, Any], layout: MemoryLayout, batch: int, width: int, length: int, beams: int,
                    max_length: int, unit_batch_size: int, tokens: int = 0, selection: int = 0) -> MemoryEstimate:
    """Working memory of summarizing `batch` items laid out on a (batch, width) grid of units of `length` tokens.

    Args:
        model: the model config (`manifest.model`): d_model, layers, heads, FFN sizes, vocab_size.
        layout: the kind's `Layout`: its slot-cache rows (`cache_groups`), its encoder's largest run
            (`encoder_memory`) and its decoding step (`step_memory`), from the shapes its graphs allocate.
        beams: num_beams; max_length: the longest sequence (the decoder start token included).
        unit_batch_size: units encoded together.
        tokens: input tokens paged (for the paging term).
        selection: bytes of the selection stage's largest run (`Summarizer.selection_memory`), 0 without one.
    """
    shape = step_shape(model)
    rows = batch * width  # grid rows: every item is padded to the widest
    cross = rows * length * shape.kv_width * 2 * shape.layers * FLOAT
    inputs = rows * length * INDEX * 3  # ids, mask, grid mask
    steps = max(1, max_length - 1)
    capacity = CACHE_CHUNK * ((steps - 1) // CACHE_CHUNK + 1)  # holds positions 0 .. steps - 1
    held = capacity + max(0, capacity - CACHE_CHUNK)  # old and new buffers during the last growth
    cache = sum(layout.cache_groups(batch, width, shape)) * beams * held * shape.kv_width * 2 * FLOAT
    if shape.unit_rows:  # a row per unit and beam: the unit's positions, then room for the summary's
        cross = rows * beams * (length + capacity) * shape.kv_width * 2 * shape.layers * shape.unit_rows // 8
        cache = 0
    search = 3 * batch * beams * steps * width * FLOAT
    return MemoryEstimate(
        paging=tokens * PAGING_BYTES_PER_TOKEN,
        inputs=inputs,
        cross=cross,
        encoder=int(layout.encoder_memory(model, batch, width, length, unit_batch_size) * ARENA_SLACK),
        cache=cache,
        decoder=int(layout.step_memory(model, batch, width, length, beams, capacity) * ARENA_SLACK),
        search=search,
        selection=selection,
    )


def physical_memory() -> int | None:
    """Bytes of memory this machine has, lowered by a cgroup limit if one is set (containers); None where neither
    can be read."""
    found = []
    try:
        found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        limit = (Path("/sys/fs/cgroup") / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def available_memory() -> int | None:
    """Bytes this process can still take: the OS's available memory, lowered by a cgroup limit if one is set
    (containers); None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    cgroup = Path("/sys/fs/cgroup")
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return max(0, min(found)) if found else None


def release_free_memory() -> None:
    """Give the C allocator's free memory back to the system: glibc keeps what a large input's paging freed (in the
    heap of each thread that allocated it) and the process's resident set stays at its peak; `malloc_trim(0)` returns
    the free pages of every heap. A no-op where the C library has no malloc_trim (musl, macOS, Windows)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def parse_size(value: int | float | str, name: str = "memory_limit") -> int:
    """Bytes from an int (bytes) or a string such as "6GB", "512 MiB", "2.5g"."""
    if isinstance(value, bool):
        raise OptionError(f"{name}={value!r} is not accepted; give bytes (an int) or a size such as '6GB'")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 1:
            raise OptionError(f"{name}={value!r} is not accepted; it must be at least 1 byte, e.g. '6GB'")
        return int(value)
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match and match.group(2).lower() in _UNITS:
            size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
            if size >= 1:
                return size
    raise OptionError(f"{name}={value!r} is not accepted; give bytes (an int) or a size such as '6GB' or '512MiB'")


_WARNED: set[int] = set()  # limits over the machine's memory already warned about in this process


def memory_limit(option: int | str | None, available: Callable[[], int | None] | None = None) -> int | None:
    """The limit a call runs under: `option` parsed, or DEFAULT_SHARE of the memory `available` reports (the
    backend's `free_memory`: the GPU's where its working memory lives; default, this machine's; None: unknown).

    A limit over the machine's physical memory is accepted, since swap or memory freed by others may serve it, but
    it no longer protects the machine: a warning (once per limit and process) names both figures."""
    if option is not None:
        limit = parse_size(option)
        physical = physical_memory()
        if physical is not None and limit > physical and limit not in _WARNED:
            _WARNED.add(limit)
            logger.warning("memory_limit=%r (%s) is over this machine's %s of memory: an input the limit lets "
                           "through may still run out of memory; give at most %s", option, size_text(limit),
                           size_text(physical), size_text(physical))
        return limit
    free = (available or available_memory)()
    return None if free is None else int(free * DEFAULT_SHARE)
