"""Ctrl-C and SIGTERM during training: the first asks the loop to stop after its update (it
saves and exits cleanly), the second aborts at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

__all__ = ["StopRequest"]


class StopRequest:
    """``requested`` turns True on the first SIGINT / SIGTERM while :meth:`listening`; the
    second raises ``KeyboardInterrupt``. Off the main thread, signals cannot be caught and
    nothing is installed."""

    def __init__(self) -> None:
        self.requested = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
