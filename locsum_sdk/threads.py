"""How many intra-op threads a model runs on when the caller names none.

`$LOCSUM_THREADS` when it is set, so that several processes on one machine each take their share of its cores
(each process on every core, the decoder's spinning threads of one take the cores from the others); else every CPU
this process may run on, which its affinity mask says (a container's cpuset or `taskset` narrows it;
`os.cpu_count()` counts the whole machine's).
"""

from __future__ import annotations

import os

from .errors import OptionError

THREADS_ENV = "LOCSUM_THREADS"


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


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
