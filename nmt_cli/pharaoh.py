"""Pharaoh alignment format: one sentence pair per line, links ``i-j`` separated by spaces.

``i`` is a 0-based source word index and ``j`` a 0-based target word index. Gold files
also mark *possible* links as ``ipj`` (or ``i?j``, as some corpora write them); a bare
``i-j`` is a *sure* link. By the usual convention sure links are possible too (S ⊆ P),
so :attr:`GoldAlignment.possible` always includes :attr:`GoldAlignment.sure`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from nmt_cli.errors import InputError
from nmt_cli.fileio import atomic_open
from nmt_cli.textio import iter_lines

__all__ = ["Link", "GoldAlignment", "parse_links", "format_links", "iter_alignments", "read_alignments",
           "write_alignments", "write_reversed_alignments"]

Link = tuple[int, int]
_LINK = re.compile(r"([0-9]{1,9})([-p?])([0-9]{1,9})")  # word indices: ASCII digits, a sane size


@dataclass(frozen=True)
class GoldAlignment:
    """The links of one sentence pair: ``sure`` (``i-j``) and ``possible`` (all links, S ⊆ P)."""

    sure: frozenset[Link]
    possible: frozenset[Link]


def parse_links(text: str, path: str | os.PathLike = "<string>", line: int | None = None) -> GoldAlignment:
    """Parse one Pharaoh line; a bad token raises :class:`InputError` naming file and line."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for token in text.split():
        match = _LINK.fullmatch(token)
        if match is None:
            raise InputError(path, f"bad alignment link {token!r} (expected i-j, ipj or i?j)", line)
        link = (int(match.group(1)), int(match.group(3)))
        possible.add(link)
        if match.group(2) == "-":
            sure.add(link)
    return GoldAlignment(sure=frozenset(sure), possible=frozenset(possible))


def format_links(sure: Iterable[Link], possible: Iterable[Link] = ()) -> str:
    """``{(0, 1), (2, 0)} -> "0-1 2-0"``; links only in ``possible`` are written ``ipj``."""
    sure = set(sure)
    marked = [(link, "-") for link in sure] + [(link, "p") for link in set(possible) - sure]
    return " ".join(f"{i}{mark}{j}" for (i, j), mark in sorted(marked))


def iter_alignments(path: str | os.PathLike) -> Iterator[GoldAlignment]:
    """The lines of a Pharaoh file, read lazily (an empty line is a pair without links)."""
    for number, text in enumerate(iter_lines(path), start=1):
        yield parse_links(text, path, number)


def read_alignments(path: str | os.PathLike) -> list[GoldAlignment]:
    """All lines of a Pharaoh file (an empty line is a pair without links)."""
    return list(iter_alignments(path))


def write_alignments(path: str | os.PathLike, alignments: Iterable[Iterable[Link]]) -> None:
    """Write one line of sure links per sentence pair, atomically."""
    with atomic_open(path, "w") as handle:
        for links in alignments:
            handle.write(format_links(links) + "\n")


def write_reversed_alignments(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """``source``'s sure links turned around (``i-j`` as ``j-i``), line for line, into
    ``target``: the links of the opposite translation direction."""
    write_alignments(target, (sorted((j, i) for i, j in pair.sure) for pair in iter_alignments(source)))
