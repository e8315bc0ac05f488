"""Reading hypothesis and reference files line by line, with one-line errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from nmt_cli.errors import InputError, NmtError


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 file without line ends; only ``\\n`` separates lines.

    (``str.splitlines`` would also split at U+2028, form feeds and lone ``\\r``, and
    then line N of the file would no longer be line N of the list.)
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "not valid UTF-8", line=data[: exc.start].count(b"\n") + 1) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_parallel(hypothesis_path: str | os.PathLike,
                  reference_paths: Sequence[str | os.PathLike]) -> tuple[list[str], list[list[str]]]:
    """Hypotheses and reference streams; every file must have the same number of lines."""
    if not reference_paths:
        raise NmtError("no reference file given")
    hypotheses = read_lines(hypothesis_path)
    references = [read_lines(path) for path in reference_paths]
    for path, stream in zip(reference_paths, references):
        check_same_length(hypothesis_path, len(hypotheses), path, len(stream))
    return hypotheses, references


def check_same_length(first_path: str | os.PathLike, first_lines: int,
                      second_path: str | os.PathLike, second_lines: int) -> None:
    """Fail with one line naming both files and counts when they differ."""
    if first_lines != second_lines:
        raise NmtError(
            f"{first_path} has {first_lines} lines but {second_path} has {second_lines}; "
            "they must match line by line"
        )


__all__ = ["read_lines", "read_parallel", "check_same_length"]
