"""How much memory summarizing an input will take, known before any encoder work, and how much there is.

`estimate_memory` adds up what a call allocates on top of the loaded model, from the model's shapes, the unit
grid (items x units x tokens) and the decoding options, as the ONNX Runtime backend lays it out: the unit
tokens, every decoder layer's cross keys/values for every unit (the part that grows with the input), the encoder's
activations for one micro-batch, the self-attention slot cache at its last capacity (while it grows, the old and
the new buffers coexist), one decoding step's activations and the search's bookkeeping. The activation terms
count the tensors alive at once in one layer (the step's scaled by `ARENA_SLACK` for the allocator's rounding of
its many small tensors); they were checked against measured peaks by `locsum bench`, which prints estimate and
measurement side by side.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .backends.base import CACHE_CHUNK
from .errors import OptionError

FLOAT = 4  # bytes of a float32
INDEX = 8  # bytes of an int64
ARENA_SLACK = 1.5  # ONNX Runtime's arena rounds a step's many small chunks up and keeps freed ones
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

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def describe(self) -> str:
        parts = ", ".join(f"{f.name} {mb(getattr(self, f.name))}" for f in fields(self) if getattr(self, f.name))
        return f"{mb(self.total)} ({parts})"


def mb(size: float) -> str:
    """A byte count for people: MB, or KB and bytes below a megabyte."""
    if size >= 2**20:
        return f"{size / 2**20:,.0f} MB"
    return f"{size / 2**10:.1f} KB" if size >= 2**10 else f"{size:.0f} bytes"


def encoder_pass(rows: int, length: int, d_model: int, heads: int, ffn_dim: int) -> int:
    """Activations of a transformer encoder over `rows` sequences of `length` tokens, one layer alive at a time:
    attention scores and probabilities, the FFN's hidden rows, two hidden states."""
    return rows * length * FLOAT * (2 * heads * length + ffn_dim + 2 * d_model)


def arrays_bytes(arrays: dict[str, Any]) -> int:
    """Bytes held by a graph's input arrays."""
    return sum(int(a.nbytes) for a in arrays.values())


def estimate_memory(model: dict[str, Any], batch: int, width: int, length: int, beams: int, max_length: int,
                    unit_batch_size: int, tokens: int = 0, cache_rows: int | None = None,
                    encoder_rows: int | None = None) -> MemoryEstimate:
    """Working memory of summarizing `batch` items laid out on a (batch, width) grid of units of `length` tokens.

    Args:
        model: the model config (`manifest.model`): d_model, layers, heads, FFN sizes, vocab_size.
        beams: num_beams; max_length: the longest sequence (the decoder start token included).
        unit_batch_size: units encoded together.
        tokens: input tokens paged (for the paging term).
        cache_rows: rows of all decoder layers' slot caches together, as the kind lays them out
            (`Layout.cache_groups`); None: a row per grid unit in every layer.
        encoder_rows: units in the encoder's largest micro-batch (`Layout.largest_run`); None: unit_batch_size.
    """
    d, vocab = model["d_model"], model["vocab_size"]
    layers, heads = model["decoder_layers"], model["decoder_heads"]
    rows = batch * width  # grid rows: every item is padded to the widest
    cross = rows * length * d * 2 * layers * FLOAT
    inputs = rows * length * INDEX * 3  # ids, mask, grid mask
    run = min(unit_batch_size if encoder_rows is None else encoder_rows, rows)
    encoder = encoder_pass(run, length, d, model["encoder_heads"], model["encoder_ffn_dim"])
    steps = max(1, max_length - 1)
    capacity = CACHE_CHUNK * ((steps - 1) // CACHE_CHUNK + 1)  # holds positions 0 .. steps - 1
    held = capacity + max(0, capacity - CACHE_CHUNK)  # old and new buffers during the last growth
    groups = rows * layers if cache_rows is None else cache_rows
    cache = groups * beams * held * d * 2 * FLOAT
    queries = rows * beams
    decoder = FLOAT * (
        queries * (8 * d + 2 * model["decoder_ffn_dim"])  # hidden rows, projections, FFN
        + 3 * queries * heads * length  # cross-attention scores, mask, softmax (one layer at a time)
        + 3 * queries * heads * beams * capacity  # self-attention over the item's slots
        + 3 * batch * beams * vocab  # LM head, log-softmax, the loop's copy
    )
    search = 3 * batch * beams * steps * width * FLOAT
    return MemoryEstimate(
        paging=tokens * PAGING_BYTES_PER_TOKEN,
        inputs=inputs,
        cross=cross,
        encoder=encoder,
        cache=cache,
        decoder=int(decoder * ARENA_SLACK),
        search=search,
    )


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


def memory_limit(option: int | str | None) -> int | None:
    """The limit a call runs under: `option` parsed, or DEFAULT_SHARE of the available memory (None: unknown)."""
    if option is not None:
        return parse_size(option)
    available = available_memory()
    return None if available is None else int(available * DEFAULT_SHARE)
