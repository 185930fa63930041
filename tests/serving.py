"""The service on a real loopback port, for the tests that talk to it over HTTP."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import httpx
import uvicorn
from conftest import free_port

from locsum_sdk.serve import ServeOptions, create_app


@contextmanager
def served(summarizer, **options):
    """The app on a real loopback port, run by uvicorn in a thread; yields an httpx client for it."""
    app = create_app(options=ServeOptions(**options), summarizer=summarizer)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=30)
