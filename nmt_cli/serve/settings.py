"""What ``nmt serve`` is told on its command line: where to listen, limits, batching."""

from __future__ import annotations

from dataclasses import dataclass

from nmt_cli.errors import ConfigError

__all__ = ["ServeSettings"]


@dataclass(frozen=True)
class ServeSettings:
    """Every limit is on by default, so a server bound beyond localhost is still bounded.

    ``queue_size`` counts sentences waiting for a decode call; ``batch_tokens`` (None:
    the checkpoint's ``decode.max_tokens``, or the device's budget where that is 0) is the
    source-token budget of one micro-batch; ``batch_wait_ms`` is the longest a micro-batch
    is held open for more sentences once the decoder is free, ``batch_idle_ms`` closes it
    sooner when no sentence has arrived for that long. ``max_terms`` bounds a request's
    glossary entries, ``max_constraints`` the phrases one sentence asks for or avoids (each
    alternative and each glossary match counted), ``max_term_chars`` each such phrase.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 1_048_576
    max_sentences: int = 64
    max_chars: int = 1000
    max_beam: int = 16
    max_terms: int = 256
    max_constraints: int = 32
    max_term_chars: int = 200
    queue_size: int = 256
    max_connections: int = 1024
    request_timeout_s: float = 30.0
    batching: bool = True
    batch_wait_ms: float = 30.0
    batch_idle_ms: float = 2.0
    batch_tokens: int | None = None
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        positive = {"max_body_bytes": self.max_body_bytes, "max_sentences": self.max_sentences,
                    "max_chars": self.max_chars, "max_beam": self.max_beam, "max_terms": self.max_terms,
                    "max_constraints": self.max_constraints, "max_term_chars": self.max_term_chars,
                    "queue_size": self.queue_size,
                    "max_connections": self.max_connections,
                    "request_timeout_s": self.request_timeout_s, "retry_after_s": self.retry_after_s}
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"serve: {name} must be positive, got {value}")
        for name, value in {"batch_wait_ms": self.batch_wait_ms, "batch_idle_ms": self.batch_idle_ms}.items():
            if value < 0:
                raise ConfigError(f"serve: {name} must be >= 0, got {value}")
        if self.batch_tokens is not None and self.batch_tokens < 1:
            raise ConfigError(f"serve: batch_tokens must be at least 1, got {self.batch_tokens}")
        if self.queue_size < self.max_sentences:
            raise ConfigError(f"serve: queue_size ({self.queue_size}) must hold at least max_sentences "
                              f"({self.max_sentences}), or a full request could never be queued")
