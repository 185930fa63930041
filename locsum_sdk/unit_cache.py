"""`UnitCache`: the encoder's outputs of units already seen, so that summarizing a text again after it grew encodes
only its new or changed units.

An entry is one unit's cross keys and values (every decoder layer's, trimmed to the unit's tokens), keyed by the
model's identity and the unit's token ids: a unit reads the same ids only where its text, its query and its
framing are the same, so a hit is exact for kinds whose units are encoded alone (`Layout.units_alone`: PageSum's
pages, DYLE's snippets). A selection stage's runs (DYLE's extractor, the hierarchical transformer's ranker) are
kept too, keyed by all their inputs: a run whose chunks and features did not change is not run again (a feature
of the whole input, such as a standardized tf-idf, changes every run's inputs as the input grows). The cache is a
least-recently-used map bounded in bytes; it is safe to share between threads and between summarizers (their
identities keep their entries apart).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .validation import check_int

DEFAULT_CACHE_BYTES = 1 << 30  # 1 GiB: 64 pages of 512 tokens of the shipped default model take about 200 MB


@dataclass(frozen=True)
class CacheStats:
    """What a cache did since it was made (or `clear`ed)."""

    hits: int
    misses: int
    evictions: int
    entries: int
    bytes: int
    max_bytes: int


class UnitCache:
    """Least-recently-used encoder outputs per unit, at most `max_bytes` of arrays held.

    Example:
        >>> cache = UnitCache(max_bytes=512 << 20)
        >>> summarizer = Summarizer.from_pretrained("engines/default", unit_cache=cache)
        >>> summarizer.summarize(text)  # encodes every page
        >>> summarizer.summarize(text + more)  # encodes the last page again and the new ones
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES):
        check_int("max_bytes", max_bytes, 1)
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, dict[str, np.ndarray]] = OrderedDict()
        self._bytes = self._hits = self._misses = self._evictions = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(identity: str, token_ids: Sequence[int] | np.ndarray) -> bytes:
        """The key of a unit that reads `token_ids` under the model `identity`."""
        digest = hashlib.blake2b(identity.encode(), digest_size=20)
        digest.update(np.ascontiguousarray(token_ids, dtype=np.int64).tobytes())
        return digest.digest()

    @staticmethod
    def run_key(identity: str, graph: str, inputs: dict[str, np.ndarray]) -> bytes:
        """The key of one run of the graph `graph` of the model `identity` on `inputs` (names, dtypes, shapes and
        values): a selection stage's run, whose outputs depend on its inputs alone."""
        digest = hashlib.blake2b(f"{identity}/{graph}".encode(), digest_size=20)
        for name in sorted(inputs):
            value = np.ascontiguousarray(inputs[name])
            digest.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
            digest.update(value.tobytes())
        return digest.digest()

    def get(self, key: bytes) -> dict[str, np.ndarray] | None:
        """The arrays stored under `key` (read-only; do not change them), or None."""
        with self._lock:
            arrays = self._entries.get(key)
            if arrays is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return arrays

    def put(self, key: bytes, arrays: dict[str, np.ndarray]) -> None:
        """Store copies of `arrays` under `key`, evicting the least recently used entries to stay within
        `max_bytes`; an entry larger than the whole cache is not stored."""
        stored = {name: np.array(value, copy=True, order="C") for name, value in arrays.items()}
        for value in stored.values():
            value.flags.writeable = False
        size = sum(value.nbytes for value in stored.values())
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= sum(value.nbytes for value in old.values())
            while self._entries and self._bytes + size > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= sum(value.nbytes for value in evicted.values())
                self._evictions += 1
            self._entries[key] = stored
            self._bytes += size

    def clear(self) -> None:
        """Drop every entry and reset the counts."""
        with self._lock:
            self._entries.clear()
            self._bytes = self._hits = self._misses = self._evictions = 0

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._evictions, len(self._entries), self._bytes,
                              self.max_bytes)

    def __len__(self) -> int:
        return len(self._entries)
