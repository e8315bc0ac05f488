"""Reading sentence pairs for alignment: two parallel files, or ``source ||| target`` lines."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from nmt_cli.errors import InputError

__all__ = ["read_lines", "read_parallel", "split_pairs", "PAIR_SEPARATOR"]

PAIR_SEPARATOR = "|||"


def read_lines(path: str | os.PathLike) -> list[str]:
    """Every line of a UTF-8 text file, without its line break."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found")
    lines = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as exc:
                raise InputError(path, f"not valid UTF-8 ({exc.reason} at byte {exc.start})", number) from None
    return lines


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Source and target lines; different line counts fail with one line naming both files."""
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise InputError(
            tgt_path, f"has {len(tgt_lines)} lines but {src_path} has {len(src_lines)}; they must pair line by line"
        )
    return src_lines, tgt_lines


def split_pairs(lines: Iterable[str], name: str = "<stdin>") -> tuple[list[str], list[str]]:
    """``"source ||| target"`` lines -> source and target lines."""
    src_lines, tgt_lines = [], []
    for number, line in enumerate(lines, start=1):
        source, separator, target = line.rstrip("\r\n").partition(PAIR_SEPARATOR)
        if not separator:
            raise InputError(name, f"expected 'source {PAIR_SEPARATOR} target'", number)
        src_lines.append(source.strip())
        tgt_lines.append(target.strip())
    return src_lines, tgt_lines
