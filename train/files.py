"""Files a run writes beside its checkpoints (word lists, tokenizers, caches), each moved into place whole."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def write_whole(path: Path, write: Callable[[Path], object]) -> Path:
    """`write(partial)` into a name of this process's own beside `path`, then moved onto `path`: a reader never sees
    part of the file, and the processes of one job writing the same file do not take each other's partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    write(partial)
    partial.replace(path)
    return path
