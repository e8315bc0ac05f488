"""Run the application under uvicorn: bind, log, and shut down cleanly on SIGTERM or SIGINT.

On the first signal the server stops accepting connections, lets the requests in flight
finish (their sentences are decoded), stops the decoding thread and returns, so the
command exits 0. A second SIGINT quits without waiting.
"""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType
from typing import Callable

import uvicorn

from nmt_cli.errors import NmtError
from nmt_cli.serve.app import LOGGER, create_app
from nmt_cli.serve.model import ServedModel
from nmt_cli.serve.settings import ServeSettings

__all__ = ["run_server", "GracefulServer"]


class GracefulServer(uvicorn.Server):
    """uvicorn's server, except that a signal ends it with a normal return instead of being re-raised."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True
        LOGGER.info("%s received: finishing the requests in flight, then exiting", signal.Signals(sig).name)

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                LOGGER.info("listening on http://%s:%d (web page at /, API docs at /docs)",
                            f"[{host}]" if ":" in host else host, port)


def configure_logging() -> None:
    """Our lines and uvicorn's warnings to stderr, one line each, with a timestamp."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    for name, level in (("nmt_cli.serve", logging.INFO), ("uvicorn", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False


def run_server(load: Callable[[], ServedModel], settings: ServeSettings) -> None:
    """Serve until a signal; NmtError when the model cannot be loaded or the port cannot be bound."""
    configure_logging()
    failures: list[BaseException] = []

    def stop_on_failure(exc: BaseException) -> None:
        failures.append(exc)
        server.should_exit = True

    app = create_app(load, settings, on_load_failed=stop_on_failure)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=int(settings.request_timeout_s) + 5,
                            limit_concurrency=settings.max_connections, lifespan="on")
    server = GracefulServer(config)
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind; it has logged why
        raise NmtError(f"could not serve on {settings.host}:{settings.port} (see the message above)") from None
    if failures:
        raise NmtError(f"the model could not be loaded: {failures[0]}")
