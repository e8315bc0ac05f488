"""Sentence pairs for alignment from standard input: ``source ||| target`` lines."""

from __future__ import annotations

from typing import Iterable, Iterator

from nmt_cli.errors import InputError

__all__ = ["split_pairs", "PAIR_SEPARATOR"]

PAIR_SEPARATOR = "|||"


def split_pairs(lines: Iterable[str], name: str = "<stdin>") -> Iterator[tuple[str, str]]:
    """``"source ||| target"`` lines -> (source, target) pairs, read lazily."""
    for number, line in enumerate(lines, start=1):
        source, separator, target = line.partition(PAIR_SEPARATOR)
        if not separator:
            raise InputError(name, f"expected 'source {PAIR_SEPARATOR} target'", number)
        yield source.strip(), target.strip()
