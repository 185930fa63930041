"""The bundles' directories in the user's cache (`packed.cached_directory`): listed with their size and last use, and
pruned. Each bundle that stores packed files or assembles its base weights fills one directory (a 135M backbone's is
about 140 MB, and the graphs ONNX Runtime optimized from it, their weights pre-packed, about 530 MB more:
`backends/optimized_graphs.py`), and a new release of a bundle is a new directory: the old ones stay until pruned.

A directory is pruned when no bundle kept in use reads it (`keep`: the shipped bundles and $LOCSUM_BUNDLE at the
command line) and nothing has read it for `unused_days`; a bundle whose directory was pruned fills it again when it
is next loaded (unpacking, assembling its base weights). A directory is renamed before it is removed, so a process
that loads its bundle meanwhile fills a new one rather than reading a half-removed one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import constants as C
from .bundle import manifest_fingerprint
from .errors import OptionError
from .packed import cache_directory, cache_root

DAY = 86_400.0
PRUNING_SUFFIX = ".pruning"  # a directory being removed


@dataclass(frozen=True)
class CacheEntry:
    """One bundle's cache directory."""

    path: Path
    size: int  # bytes
    last_used: float  # seconds since the epoch: when a bundle was last read from it

    def unused_days(self, now: float | None = None) -> float:
        return ((time.time() if now is None else now) - self.last_used) / DAY


def entries() -> list[CacheEntry]:
    """The cache directories (under `packed.cache_root()`), the most recently used first."""
    root = cache_root()
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        if path.is_dir() and not path.is_symlink() and PRUNING_SUFFIX not in path.name:
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
            found.append(CacheEntry(path, size, path.stat().st_mtime))
    return sorted(found, key=lambda entry: entry.last_used, reverse=True)


def directory_of(bundle: Path) -> Path | None:
    """The cache directory that `bundle` reads (whether or not it is filled yet); None for a path with no manifest."""
    manifest = Path(bundle) / C.MANIFEST_FILE
    return cache_directory(manifest_fingerprint(manifest.read_bytes())) if manifest.is_file() else None


def prune(keep: Iterable[Path], unused_days: float, dry_run: bool = False) -> list[CacheEntry]:
    """Remove the cache directories that no bundle of `keep` reads and that nothing has read for `unused_days`
    (and what an interrupted prune left); returns them (with `dry_run`, only says which)."""
    if not isinstance(unused_days, int | float) or isinstance(unused_days, bool) or not unused_days >= 0:
        raise OptionError(f"days unused {unused_days!r} (--unused-days): give a number of days, 0 or more")
    kept = {directory_of(bundle) for bundle in keep}
    if not dry_run and cache_root().is_dir():
        for leftover in cache_root().glob(f"*{PRUNING_SUFFIX}.*"):
            shutil.rmtree(leftover, ignore_errors=True)
    now = time.time()
    removed = []
    for entry in entries():
        if entry.path in kept or entry.unused_days(now) < unused_days:
            continue
        if not dry_run:
            doomed = entry.path.with_name(entry.path.name + PRUNING_SUFFIX + f".{os.getpid()}")
            os.replace(entry.path, doomed)
            shutil.rmtree(doomed)
        removed.append(entry)
    return removed
