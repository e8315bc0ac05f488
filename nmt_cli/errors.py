"""User-facing errors: one line that names the file, the line and the problem."""

from __future__ import annotations

import os


class NmtError(Exception):
    """An error caused by the user's input or settings, shown as one line without a traceback."""


class InputError(NmtError):
    """Bad input data: the message names the file and (when known) the 1-based line."""

    def __init__(self, path: str | os.PathLike, problem: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class ConfigError(NmtError):
    """A bad configuration key or value; the message lists the valid keys or choices."""
