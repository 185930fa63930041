"""The settings of a `locsum serve` process (`ServeOptions`), checked when made."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import OptionError
from ..memory import DEFAULT_SHARE, available_memory, parse_size
from ..validation import check_bool, check_float, check_int, check_str

LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class ServeOptions:
    """How a server admits, batches and bounds requests.

    memory_budget: bytes (or a size such as "8GB") that the requests being summarized may reserve together, above
    the loaded model; each request reserves its estimate (`Summarizer.estimate`) before any model work. None: 80%
    of the memory available at start where the model's working memory lives (the GPU's for the torch backend or
    onnxruntime-gpu on CUDA).
    """

    memory_budget: int | str | None = None
    max_queue: int = 64  # requests waiting for memory; one more is refused with 503
    max_batch: int = 8  # requests decoded together (same options), at most
    concurrency: int = 1  # batches decoded at once (each uses all the model's threads)
    batch_window: float = 0.01  # seconds an idle server waits for requests arriving together
    timeout: float = 300.0  # default deadline of a request, seconds (a request's own `timeout` may be shorter)
    max_body: int | str = "32MB"  # largest request body
    token: str | None = None  # bearer token every /v1 and /metrics request must carry; None: none asked
    page: bool = True  # serve the page at / (it holds no data: its requests carry the token like any client's)

    def __post_init__(self) -> None:
        check_int("max_queue", self.max_queue, 0)
        check_int("max_batch", self.max_batch, 1)
        check_int("concurrency", self.concurrency, 1)
        check_float("batch_window", self.batch_window, 0.0, 10.0)
        check_float("timeout", self.timeout, 0.001)
        check_bool("page", self.page)
        parse_size(self.max_body, "max_body")
        if self.memory_budget is not None:
            parse_size(self.memory_budget, "memory_budget")
        if self.token is not None:
            check_str("token", self.token)
            if len(self.token) < 16 or self.token != self.token.strip():
                raise OptionError("token: give at least 16 characters without surrounding spaces (e.g. the output "
                                  "of `python -c 'import secrets; print(secrets.token_urlsafe())'`)")

    def budget_bytes(self, available: Callable[[], int | None] = available_memory) -> int:
        """memory_budget in bytes; unset, DEFAULT_SHARE of what `available` reports (the served backend's
        `free_memory`: the GPU's where the model's working memory lives)."""
        if self.memory_budget is not None:
            return parse_size(self.memory_budget, "memory_budget")
        available = available()
        if available is None:
            raise OptionError("the memory available here cannot be read; give memory_budget (e.g. '8GB')")
        return int(available * DEFAULT_SHARE)

    @property
    def body_bytes(self) -> int:
        return parse_size(self.max_body, "max_body")


def is_loopback(host: str) -> bool:
    """Whether `host` binds only this machine's loopback interface."""
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
