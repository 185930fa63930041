"""Atomic output directories for the exporters: a bundle is built in a hidden staging directory beside its
destination and moved into place only when everything in it succeeded; a failed or killed export leaves nothing
behind (a killed one's staging directory is removed by the next export of the same output)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger("locsum_sdk")


def staging_prefix(output: Path) -> str:
    """Name prefix of the hidden directories an export of `output` is built in (the pid of the export follows)."""
    return f".{output.name}.staging-"


def remove_stale_staging(output: Path) -> None:
    """Remove staging directories left beside `output` by exports that were killed (their process is gone)."""
    prefix = staging_prefix(output)
    for path in output.parent.glob(prefix + "*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if path.is_dir() and pid.isdigit() and not _alive(int(pid)):
            logger.info("removing %s, left by an export that did not finish", path)
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def usual_mode(mode: int) -> int:
    """`mode` (0o777 for a directory, 0o666 for a file) less this process's umask: what open() and mkdir() give."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def readable(directory: Path) -> None:
    """Give a finished bundle the permissions of a normally created directory (mkdtemp makes it 0700)."""
    directory.chmod(usual_mode(0o777))
    for path in directory.iterdir():
        path.chmod(usual_mode(0o666))


@contextlib.contextmanager
def staged(output: Path) -> Iterator[Path]:
    """A fresh staging directory for `output`: on leaving the block without an error it gets the usual
    permissions and replaces `output`; on any error (or interrupt) it is removed."""
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(output)
    work = Path(tempfile.mkdtemp(prefix=f"{staging_prefix(output)}{os.getpid()}-", dir=output.parent))
    try:
        yield work
        readable(work)
        if output.exists():
            shutil.rmtree(output)
        os.replace(work, output)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
