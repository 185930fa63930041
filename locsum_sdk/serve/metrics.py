"""The server's Prometheus metrics, in a registry of its own (one per app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300, 600)


class Metrics:
    """Requests by status, latency and queue time, queue depth, memory reserved against the budget, units encoded,
    tokens generated."""

    def __init__(self, budget: int):
        self.registry = CollectorRegistry()
        self.requests = Counter("locsum_requests", "Summarize requests by HTTP status and error code",
                                ["status", "code"], registry=self.registry)
        self.latency = Histogram("locsum_request_seconds", "Summarize request latency, arrival to response",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue_time = Histogram("locsum_queue_seconds", "Time a request waited for memory before it ran",
                                    buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue_depth = Gauge("locsum_queue_depth", "Requests waiting for memory", registry=self.registry)
        self.reserved = Gauge("locsum_memory_reserved_bytes", "Memory reserved by running requests",
                              registry=self.registry)
        self.budget = Gauge("locsum_memory_budget_bytes", "Memory the running requests may reserve together",
                            registry=self.registry)
        self.batch = Histogram("locsum_batch_requests", "Requests decoded together", buckets=(1, 2, 4, 8, 16, 32),
                               registry=self.registry)
        self.units = Counter("locsum_units_encoded", "Units (pages, snippets, documents, paragraphs) summarized",
                             registry=self.registry)
        self.tokens = Counter("locsum_tokens_generated", "Summary tokens generated", registry=self.registry)
        self.budget.set(budget)

    def observe(self, event: str, value: float) -> None:
        """Admission's events: queue_depth, reserved, batch."""
        {"queue_depth": self.queue_depth.set, "reserved": self.reserved.set, "batch": self.batch.observe}[event](value)

    def text(self) -> bytes:
        return generate_latest(self.registry)
