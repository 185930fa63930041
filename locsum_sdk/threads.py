"""How many intra-op threads a model runs on when the caller names none, and what Linux says of the processor.

`$LOCSUM_THREADS` when it is set, so that several processes on one machine each take their share of its cores
(each process on every core, the decoder's spinning threads of one take the cores from the others); else every CPU
this process may run on: its affinity mask (a container's cpuset or `taskset` narrows it; `os.cpu_count()` counts
the whole machine's), and no more than a container's CPU limit allows (cgroup v2 `cpu.max`, v1
`cpu.cfs_quota_us`: a pod limited to 2 CPUs on a 64-core host runs 2 threads, not 64 throttled ones).
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

from .errors import OptionError

THREADS_ENV = "LOCSUM_THREADS"
CGROUP = Path("/sys/fs/cgroup")
CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def cpu_fields() -> dict[str, str]:
    """The first processor's fields of Linux's /proc/cpuinfo (`model name`, `flags`, ...), read once; empty where it
    cannot be read."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    return fields


def cpu_limit(root: Path | None = None) -> float | None:
    """The CPUs a cgroup CPU limit gives this process's container (quota over period), or None where none is set
    or none can be read. `root`: where the cgroup filesystem is mounted (default `CGROUP`)."""
    root = CGROUP if root is None else root
    for read in (_v2_limit, _v1_limit):
        try:
            quota, period = read(root)
        except (OSError, ValueError):  # absent, unreadable, or not numbers: the other version, else no limit
            continue
        return quota / period if quota > 0 and period > 0 else None  # "max" / -1: none set
    return None


def _v2_limit(root: Path) -> tuple[int, int]:
    quota, period = (root / "cpu.max").read_text(encoding="ascii").split()[:2]  # "max 100000", "200000 100000"
    return -1 if quota == "max" else int(quota), int(period)


def _v1_limit(root: Path) -> tuple[int, int]:
    return (int((root / "cpu" / "cpu.cfs_quota_us").read_text(encoding="ascii")),
            int((root / "cpu" / "cpu.cfs_period_us").read_text(encoding="ascii")))


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, within a container's CPU limit (whole CPUs, at
    least 1)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = cpu_limit()
    return cpus if limit is None else max(1, min(cpus, math.floor(limit)))


def requested_threads() -> int | None:
    """$LOCSUM_THREADS as a number of threads (read at each call), or None where it is unset or empty."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise OptionError(f"{THREADS_ENV}={value[:40]!r} is not accepted; set it to a whole number of threads of at "
                          f"least 1, or unset it to run on every CPU this process may use ({usable_cpus()})")
    return int(value)


def default_threads() -> int:
    """The threads a model runs on when none is given: $LOCSUM_THREADS, else every usable CPU."""
    return requested_threads() or usable_cpus()
