"""An exclusive lock on a corpus job's output, held for the whole run, so that exactly-once holds for any number of
attempts: a second job on the same output is refused at once, naming the job that holds it.

The lock is `flock` on `OUTPUT.lock`, which the kernel releases when the holder exits however it exits, so a lock
left by a killed job is free and the next job takes it over (its record, left in the file, is logged). The file is
never removed (removing it would let two jobs lock two files of one name); an empty file is a lock released cleanly.
`flock` is per machine: two machines writing one output on a network file system are not kept apart.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import JobLockedError

logger = logging.getLogger("locsum_sdk")

LOCK_SUFFIX = ".lock"


def lock_path(output: Path) -> Path:
    return output.with_name(output.name + LOCK_SUFFIX)


@contextmanager
def output_lock(output: Path) -> Iterator[None]:
    """Hold the lock of `output` for the block; `JobLockedError` at once if another process holds it."""
    path = lock_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JobLockedError(f"{output} is being written by another job ({_describe(_recorded(descriptor))}); "
                                 "wait for it to finish or stop it, or write another output") from None
        left = _holder(descriptor)
        if left:
            logger.warning("%s: taking over the lock of a job that stopped without releasing it (%s)", output,
                           _describe(left))
        _record(descriptor, {"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        try:
            yield
        finally:
            _record(descriptor, None)
    finally:
        os.close(descriptor)  # releases the lock


def _holder(descriptor: int) -> dict | None:
    os.lseek(descriptor, 0, os.SEEK_SET)
    data = os.read(descriptor, 4096)
    try:
        holder = json.loads(data) if data.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"record": "unreadable"}
    return holder if isinstance(holder, dict) else {"record": "unreadable"}


def _recorded(descriptor: int, wait: float = 1.0) -> dict | None:
    """The record of the process holding the lock. It records itself right after taking the lock, so a record that
    is still empty or half written is read again, for up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        holder = _holder(descriptor)
        if (holder and "pid" in holder) or time.monotonic() >= deadline:
            return holder
        time.sleep(0.01)


def _record(descriptor: int, holder: dict | None) -> None:
    os.ftruncate(descriptor, 0)
    if holder is not None:
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, json.dumps(holder).encode("utf-8"))
        os.fsync(descriptor)


def _describe(holder: dict | None) -> str:
    if not holder:
        return "a process that has not recorded itself yet"
    if "pid" not in holder:
        return "a process whose record cannot be read"
    return f"process {holder['pid']} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
