"""`locsum batch --engine ray`: the batches of a job summarized by a pool of Ray actors, one `Summarizer` each.

The driver (the `locsum batch` process) reads the input, sends batches of lines to the actors and writes their rows
in input order, as the local engine does: the output, its sidecar and `--resume` are the same, and so are the
summaries (each batch is the same lines, summarized together). A worker whose process dies (killed, out of memory)
is started again, up to `RESTARTS` times, and its batch summarized again: only the driver writes, so the output
still holds every input once. At most two batches per actor are in flight, so the driver's memory stays bounded
whatever the corpus size. The bundle's files go once into Ray's object store; each
actor loads them once (checksums verified) and runs with `threads` intra-op threads and as many Ray CPUs. Only the
driver reads the input, the bundle and the output: the other nodes need locsum installed, nothing more.

Ray is an optional extra (`pip install 'locsum[ray]'`); nothing here imports it until an engine is made.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .batch import Line, summarize_lines
from .errors import BackendError, BackendUnavailableError, BundleError, BundleNotFoundError, LocsumError, OptionError
from .validation import check_float, check_int

logger = logging.getLogger("locsum_sdk")

IN_FLIGHT_PER_WORKER = 2  # batches queued per actor: one running, one ready to start
RESTARTS = 3  # a worker whose process dies (killed, out of memory) is started again and its batch run again


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BackendUnavailableError("--engine ray needs Ray: pip install 'locsum[ray]'") from None
    return ray


def bundle_files(path: str | os.PathLike) -> dict[str, bytes]:
    """Every file of a bundle (or checkpoint) directory by name, to send to the actors; a directory is flat."""
    directory = Path(path)
    if not directory.is_dir():
        raise BundleNotFoundError(f"{directory} is not a directory; pass the path of a bundle or checkpoint")
    entries = sorted(directory.iterdir())
    nested = [entry.name for entry in entries if entry.is_dir()]
    if nested:
        raise BundleError(f"{directory} holds directories ({', '.join(nested)}); a bundle or checkpoint is a flat "
                          "directory of files")
    return {entry.name: entry.read_bytes() for entry in entries}


class SummarizerWorker:
    """The actor: one Summarizer, loaded once from the bundle's files (written to a directory of its own, read, and
    removed; their checksums are verified), summarizing the batches it is sent."""

    def __init__(self, files: dict[str, bytes], settings: dict[str, Any]):
        from .summarizer import Summarizer

        directory = Path(tempfile.mkdtemp(prefix="locsum-bundle-"))
        try:
            for name, data in files.items():
                (directory / name).write_bytes(data)
            self.summarizer = Summarizer.from_pretrained(directory, **settings)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def ready(self) -> bool:
        return True

    def summarize(self, batch: list[Line], overrides: dict[str, Any]) -> tuple[list[dict[str, Any]], Counter]:
        stages: Counter = Counter()
        return summarize_lines(self.summarizer, batch, overrides, stages), stages


class RayEngine:
    """A pool of `workers` Ray actors, each with a Summarizer of `path` on `threads` threads.

    address: the Ray cluster to join ("auto", "ray://head:10001", ...); None joins $RAY_ADDRESS when it is set and
    otherwise starts a local cluster with this machine's cores, which `close` stops. workers: None: as many as the
    cluster's CPUs (and GPUs) allow. gpus: GPUs per worker (a fraction shares one); None: 1 for device="cuda" or
    backend="tensorrt", else 0. Ray shows a worker only the GPUs it requested, so a worker with none runs on the
    CPU whatever `device` says."""

    def __init__(self, path: str | os.PathLike, workers: int | None = None, threads: int = 1,
                 address: str | None = None, backend: str = "auto", device: str = "auto",
                 unit_batch_size: int = 4, gpus: float | None = None):
        check_int("workers", workers, 1, optional=True)
        check_int("threads", threads, 1)
        check_float("gpus", gpus, 0.0, optional=True)
        if gpus is None:
            gpus = 1.0 if device == "cuda" or backend == "tensorrt" else 0.0
        if address is not None and not isinstance(address, str):
            raise OptionError(f"address is a {type(address).__name__}; pass a Ray address such as 'auto' or None")
        ray = self.ray = import_ray()
        self.started = not ray.is_initialized()
        if self.started:
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            except (ConnectionError, ValueError, RuntimeError) as err:
                raise BackendUnavailableError(f"cannot join the Ray cluster at {address or 'a new local one'}: "
                                              f"{err}") from None
        try:
            resources = ray.cluster_resources()
            cpus, cluster_gpus = int(resources.get("CPU", 0)), float(resources.get("GPU", 0))
            fit = cpus // threads if not gpus else min(cpus // threads, int(cluster_gpus // gpus))
            self.workers = workers or max(1, fit)
            if self.workers * threads > cpus:
                raise OptionError(f"{self.workers} workers of {threads} threads need {self.workers * threads} "
                                  f"CPUs; the Ray cluster has {cpus}: lower --workers or --threads")
            if self.workers * gpus > cluster_gpus:
                raise OptionError(f"{self.workers} workers of {gpus:g} GPUs need {self.workers * gpus:g} GPUs; the "
                                  f"Ray cluster has {cluster_gpus:g}: lower --workers or --gpus-per-worker, or run on "
                                  "the CPU (--device cpu)")
            settings = {"backend": backend, "threads": threads, "device": device, "unit_batch_size": unit_batch_size}
            self.files = ray.put(bundle_files(path))  # once in the object store, kept for restarts
            actor = ray.remote(num_cpus=threads, num_gpus=gpus, max_restarts=RESTARTS,
                               max_task_retries=RESTARTS)(SummarizerWorker)
            self.actors = [actor.remote(self.files, settings) for _ in range(self.workers)]
            ray.get([a.ready.remote() for a in self.actors])
        except ray.exceptions.RayActorError as err:
            self.close()
            raise BackendError(f"a Ray worker could not load {path}: {_cause(err)}") from None
        except BaseException:
            self.close()
            raise
        logger.info("ray engine: %d workers of %d threads and %g GPUs on a cluster of %d CPUs and %g GPUs",
                    self.workers, threads, gpus, cpus, cluster_gpus)

    def map(self, batches: Iterator[list[Line]], overrides: dict[str, Any]
            ) -> Iterator[tuple[list[dict[str, Any]], Counter]]:
        """Each batch's output rows and stage seconds, in batch order, with a bounded number in flight."""
        from ray.util import ActorPool

        pool = ActorPool(self.actors)
        window, pending = IN_FLIGHT_PER_WORKER * self.workers, 0
        for batch in batches:
            if pending == window:
                yield self._next(pool)
                pending -= 1
            pool.submit(lambda actor, lines: actor.summarize.remote(lines, overrides), batch)
            pending += 1
        for _ in range(pending):
            yield self._next(pool)

    def _next(self, pool) -> tuple[list[dict[str, Any]], Counter]:
        try:
            return pool.get_next()
        except self.ray.exceptions.RayError as err:
            cause = _cause(err)
            if isinstance(cause, LocsumError):
                raise cause from None
            raise BackendError(f"a Ray worker failed: {cause}; what was written stays, go on with --resume"
                               ) from None

    def close(self) -> None:
        for actor in getattr(self, "actors", []):
            self.ray.kill(actor)
        self.actors = []
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _cause(err: BaseException) -> BaseException | str:
    """The exception a Ray task or actor raised, where Ray kept it, else Ray's own message."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else str(err).strip().splitlines()[-1]
