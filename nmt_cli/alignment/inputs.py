"""Sentence pairs for alignment from standard input: ``source ||| target`` lines."""

from __future__ import annotations

from typing import Iterable

from nmt_cli.errors import InputError

__all__ = ["split_pairs", "PAIR_SEPARATOR"]

PAIR_SEPARATOR = "|||"


def split_pairs(lines: Iterable[str], name: str = "<stdin>") -> tuple[list[str], list[str]]:
    """``"source ||| target"`` lines -> source and target lines."""
    src_lines, tgt_lines = [], []
    for number, line in enumerate(lines, start=1):
        source, separator, target = line.partition(PAIR_SEPARATOR)
        if not separator:
            raise InputError(name, f"expected 'source {PAIR_SEPARATOR} target'", number)
        src_lines.append(source.strip())
        tgt_lines.append(target.strip())
    return src_lines, tgt_lines
