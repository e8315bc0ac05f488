"""Reading line-based text the one way every command reads it.

A line ends at ``\\n`` only (a ``\\r`` before it is dropped), so line N of a file is item
N of what these functions return: ``str.splitlines`` would also split at U+2028, form
feeds or a lone ``\\r`` and shift every later line. Text is UTF-8; a line that is not
fails with :class:`~nmt_cli.errors.InputError` naming the file, the line and the byte.
``"-"`` reads standard input.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from typing import IO, Iterable, Iterator, TypeVar

from nmt_cli.errors import InputError

__all__ = ["STDIN", "CHUNK_LINES", "iter_raw_lines", "count_lines", "decode_line", "iter_lines", "read_lines",
           "read_parallel",
           "iter_parallel", "iter_chunks", "check_same_length", "display_name", "one_line"]

STDIN = "-"
#: lines read and processed at a time by the commands that stream files (translate, score, align)
CHUNK_LINES = 2000

Item = TypeVar("Item")


def display_name(path: str | os.PathLike) -> str:
    """How errors name an input: ``<stdin>`` for ``-``, else the path as given."""
    return "<stdin>" if str(path) == STDIN else str(path)


@contextlib.contextmanager
def _open_binary(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    if str(path) == STDIN:
        yield sys.stdin.buffer
        return
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a text file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror})") from None
    with handle:
        yield handle


def iter_raw_lines(path: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
    """``(1-based line number, bytes without the line end)`` for every line, lazily."""
    with _open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            yield number, raw.removesuffix(b"\n").removesuffix(b"\r")


def count_lines(path: str | os.PathLike) -> int:
    """The lines :func:`iter_lines` reads of a file, counted without decoding them (the total
    of a streaming command's progress)."""
    return sum(1 for _ in iter_raw_lines(path))


def decode_line(raw: bytes, path: str | os.PathLike, number: int) -> str:
    """UTF-8 text of one line; invalid bytes fail with the file, line, byte and column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
        raise InputError(display_name(path), problem, number) from None


def iter_lines(path: str | os.PathLike) -> Iterator[str]:
    """The lines of a UTF-8 file (or stdin for ``-``) without line ends, read lazily."""
    for number, raw in iter_raw_lines(path):
        yield decode_line(raw, path, number)


def read_lines(path: str | os.PathLike) -> list[str]:
    """Every line of a UTF-8 file, without line ends."""
    return list(iter_lines(path))


def check_same_length(first_path: str | os.PathLike, first_lines: int,
                      second_path: str | os.PathLike, second_lines: int) -> None:
    """Fail with one line naming both files and their counts when they differ."""
    if first_lines != second_lines:
        raise InputError(second_path, f"has {second_lines} lines but {first_path} has {first_lines}; "
                                      "they must pair line by line")


def iter_parallel(*paths: str | os.PathLike) -> Iterator[tuple[str, ...]]:
    """The lines of several files that must pair line by line, a tuple per line, read
    lazily; when one ends before the others, the rest of those are counted and the error
    is :func:`check_same_length`'s."""
    readers = [iter_lines(path) for path in paths]
    count = 0
    for lines in itertools.zip_longest(*readers):
        if None in lines:
            counts = [count if line is None else count + 1 + sum(1 for _ in reader)
                      for line, reader in zip(lines, readers)]
            for path, lines_in_path in zip(paths[1:], counts[1:]):
                check_same_length(display_name(paths[0]), counts[0], display_name(path), lines_in_path)
        count += 1
        yield lines


def iter_chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """``items`` in lists of ``size`` (the last may be shorter), taken lazily: the most a
    command that streams holds at a time."""
    items = iter(items)
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def read_parallel(*paths: str | os.PathLike) -> list[list[str]]:
    """The lines of several files that must pair line by line (same count each)."""
    streams = [read_lines(path) for path in paths]
    for path, stream in zip(paths[1:], streams[1:]):
        check_same_length(paths[0], len(streams[0]), path, len(stream))
    return streams



def one_line(text: str) -> str:
    """Text that keeps a file's line structure: line breaks inside it become spaces."""
    return text.replace("\r", " ").replace("\n", " ")
