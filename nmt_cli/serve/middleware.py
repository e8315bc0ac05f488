"""ASGI middleware of the server: the request-body limit, and one log line plus metrics per request."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Awaitable, Callable

from nmt_cli.serve.metrics import ServiceMetrics

__all__ = ["BodyLimit", "RequestLog", "error_body"]

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def error_body(message: str) -> bytes:
    """The JSON every error response carries: ``{"error": "..."}`` (as LibreTranslate answers)."""
    return json.dumps({"error": message}, ensure_ascii=False).encode("utf-8")


async def _send_error(send: Send, status: int, message: str) -> None:
    body = error_body(message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse (413) a request body above ``max_bytes``, whether it announces its length or streams.

    The body is read here, at most ``max_bytes`` of it, and handed to the app from memory.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        too_large = f"request body is larger than {self.max_bytes:,} bytes (--max-body-bytes)"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _send_error(send, 413 if declared.isdigit() else 400,
                              too_large if declared.isdigit() else "bad Content-Length header")
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _send_error(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


class RequestLog:
    """One log line per request (method, path, status, sentences, ms) and the request metrics.

    Handlers put the number of sentences in ``request.state.sentences``. Paths outside
    ``known_paths`` are counted as ``other``, so hostile URLs cannot grow the metrics.
    """

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, known_paths: set[str], logger: logging.Logger):
        self.app = app
        self.metrics = metrics
        self.known_paths = known_paths
        self.logger = logger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            seconds = time.perf_counter() - started
            sentences = int(scope.get("state", {}).get("sentences", 0))
            path = scope["path"] if scope["path"] in self.known_paths else "other"
            self.metrics.observe_request(path, status, seconds, sentences)
            shown = json.dumps(scope["path"][:200])[1:-1]  # control characters escaped: one line per request
            self.logger.info("%s %s %d %d sentences %.1f ms", scope["method"], shown, status, sentences,
                             seconds * 1000)
