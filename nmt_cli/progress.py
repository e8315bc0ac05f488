"""Progress of long work: a tqdm bar on a terminal, periodic log lines otherwise.

Every command that works through many items (pairs read, sentences encoded or
translated) reports through :class:`Progress`, and every duration a person reads is
written by :func:`format_duration`. Logs of big runs (stderr redirected to a file) get a
line every ``interval`` seconds with the count, the rate and, when the total is known,
the ETA.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from tqdm import tqdm

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float | None) -> str:
    """``3725`` -> ``1:02:05``; unknown -> ``-``."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Counts the items of one pass; ``enabled=False`` keeps it silent."""

    def __init__(self, description: str, total: int | None = None, unit: str = "pairs",
                 enabled: bool = True, interval: float = 30.0, stream: TextIO | None = None):
        self.description, self.total, self.unit = description, total, unit
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interval = interval
        self.count = 0
        self.started = self._last_log = time.monotonic()
        self._bar = None
        if enabled and self.stream.isatty():
            self._bar = tqdm(total=total, desc=description, unit=f" {unit}", unit_scale=True,
                             file=self.stream, dynamic_ncols=True, mininterval=0.5)

    def update(self, n: int = 1) -> None:
        self.count += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.enabled and time.monotonic() - self._last_log >= self.interval:
            self._log()

    def rate(self) -> float:
        """Items per second since the start."""
        return self.count / max(time.monotonic() - self.started, 1e-9)

    def _log(self) -> None:
        self._last_log = time.monotonic()
        rate = self.rate()
        line = (f"{self.description}: {self.count:,} {self.unit}, {rate:,.1f} {self.unit}/s, "
                f"elapsed {format_duration(self._last_log - self.started)}")
        if self.total and rate > 0 and self.count < self.total:
            line += f", eta {format_duration((self.total - self.count) / rate)}"
        print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            self._log()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
