"""Progress of long data passes: a tqdm bar on a terminal, periodic log lines otherwise.

Logs of big runs (stderr redirected to a file) still get a line every ``interval``
seconds with the count, the rate and, when the total is known, the ETA.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


class Progress:
    """Counts items of one pass; ``enabled=False`` keeps it silent."""

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

    def _log(self) -> None:
        self._last_log = now = time.monotonic()
        elapsed = max(now - self.started, 1e-9)
        rate = self.count / elapsed
        line = f"{self.description}: {self.count:,} {self.unit}, {rate:,.0f} {self.unit}/s, {_duration(elapsed)}"
        if self.total and rate > 0:
            line += f", ETA {_duration(max(self.total - self.count, 0) / rate)}"
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
