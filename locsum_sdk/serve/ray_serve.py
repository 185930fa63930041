"""`locsum serve --engine ray`: the same app on Ray Serve, past one process or one machine.

Each replica is a Ray Serve deployment replica holding one `Summarizer` and the app `create_app` makes around it
(`serve.ingress`, built on the replica), so its admission, batching, metrics and errors are the local server's,
per replica: `memory_budget` is each replica's. The bundle's files go once into Ray's object store and each replica
loads them (checksums verified), as `locsum batch --engine ray` does. Ray Serve's proxy routes requests to the
replicas, restarts a replica whose process dies (its requests in flight fail with an error instead of hanging), and
scales replicas between bounds with `autoscaling`. Ray Serve is an optional extra (`pip install 'locsum[serve-ray]'`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailableError, OptionError
from ..ray_engine import bundle_files
from ..summarizer import resolve_bundle
from ..validation import check_int
from .options import ServeOptions

logger = logging.getLogger("locsum_sdk")

DEPLOYMENT = "locsum"


def import_serve() -> tuple[Any, Any]:
    try:
        import ray
        from ray import serve
    except ImportError as err:
        raise BackendUnavailableError(f"--engine ray needs Ray Serve ({err}): pip install 'locsum[serve-ray]'"
                                      ) from None
    return ray, serve


class Replica:
    """One replica: the bundle written from the object store to a directory of its own, loaded, removed; then the
    app around the summarizer (Ray Serve asks for it with `__serve_build_asgi_app__`)."""

    def __init__(self, files: list[Any], options: ServeOptions, threads: int):
        import ray

        from ..summarizer import Summarizer
        from .app import create_app

        directory = Path(tempfile.mkdtemp(prefix="locsum-bundle-"))
        try:
            for name, data in ray.get(files[0]).items():
                (directory / name).write_bytes(data)
            summarizer = Summarizer.from_pretrained(directory, threads=threads)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self.asgi = create_app(options=options, summarizer=summarizer)

    def __serve_build_asgi_app__(self) -> Any:
        return self.asgi


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at `address` (None: $RAY_ADDRESS, else a new local one on this machine's cores)."""
    ray, _ = import_serve()
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, ValueError, RuntimeError) as err:
            raise BackendUnavailableError(f"cannot join the Ray cluster at {address or 'a new local one'}: {err}"
                                          ) from None


def deploy(bundle: str | os.PathLike | None, options: ServeOptions, *, replicas: int = 1,
           max_replicas: int | None = None, threads: int = 1, host: str = "127.0.0.1", port: int = 8000,
           address: str | None = None) -> Any:
    """Run the app on the Ray cluster (`connect`ed to `address` first if need be) at http://host:port/, once its
    replicas are up; returns the Ray Serve handle. replicas: the replicas to start with; max_replicas: scale between
    `replicas` and this many with Ray Serve's autoscaling (None: a fixed number). Each replica takes `threads`
    CPUs."""
    check_int("replicas", replicas, 1)
    check_int("max_replicas", max_replicas, replicas, optional=True)
    check_int("threads", threads, 1)
    ray, serve = import_serve()
    files = bundle_files(resolve_bundle(bundle))
    connect(address)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if replicas * threads > cpus:
        raise OptionError(f"{replicas} replicas of {threads} threads need {replicas * threads} CPUs; the Ray "
                          f"cluster has {cpus}: lower --replicas or --threads")
    scaling: dict[str, Any] = {"num_replicas": replicas} if max_replicas is None else {
        "autoscaling_config": {"min_replicas": replicas, "max_replicas": max_replicas,
                               "target_ongoing_requests": options.max_batch}}
    deployment = serve.deployment(serve.ingress()(Replica), name=DEPLOYMENT, ray_actor_options={"num_cpus": threads},
                                  max_ongoing_requests=options.max_queue + options.max_batch * options.concurrency,
                                  **scaling)
    serve.start(http_options={"host": host, "port": port})
    return serve.run(deployment.bind([ray.put(files)], options, threads), name=DEPLOYMENT, route_prefix="/")


def shutdown() -> None:
    """Stop the app and, when this process started it, the local cluster."""
    ray, serve = import_serve()
    serve.shutdown()
    ray.shutdown()
