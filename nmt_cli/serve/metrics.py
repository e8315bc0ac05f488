"""Prometheus metrics of one server: requests by status, sentences, latency, batch sizes, queue depth."""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

__all__ = ["ServiceMetrics", "CONTENT_TYPE_LATEST"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServiceMetrics:
    """Metrics in a registry of their own, so several servers (tests) never share counters."""

    def __init__(self, queued_sentences: Callable[[], float]):
        self.registry = CollectorRegistry()
        self.requests = Counter("nmt_requests", "HTTP requests by path and status code",
                                ["path", "status"], registry=self.registry)
        self.sentences = Counter("nmt_sentences", "Sentences translated", registry=self.registry)
        self.latency = Histogram("nmt_request_seconds", "Time from request to response, by path",
                                 ["path"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("nmt_batch_sentences", "Sentences per decode call (micro-batch)",
                                    buckets=BATCH_BUCKETS, registry=self.registry)
        self.queue = Gauge("nmt_queue_sentences", "Sentences waiting for a decode call", registry=self.registry)
        self.queue.set_function(queued_sentences)

    def observe_request(self, path: str, status: int, seconds: float, sentences: int) -> None:
        self.requests.labels(path, str(status)).inc()
        self.latency.labels(path).observe(seconds)
        if status == 200:
            self.sentences.inc(sentences)

    def render(self) -> bytes:
        return generate_latest(self.registry)
