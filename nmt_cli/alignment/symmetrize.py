"""Combine the links of two translation directions into one alignment (Koehn et al. 2003).

Both inputs are in source-target orientation: ``forward`` from the source->target model,
``reverse`` from the target->source model with each link ``(j, i)`` already turned into
``(i, j)``.

* ``intersection``: links both directions agree on (high precision);
* ``union``: links either direction proposes (high recall);
* ``grow-diag``: start from the intersection and repeatedly add union links that touch
  an existing link horizontally, vertically or diagonally, provided the new link's
  source word or its target word is still unaligned;
* ``grow-diag-final``: then, for each direction's links in turn, add a link whose
  source word *or* target word is unaligned;
* ``grow-diag-final-and``: the same, but the source word *and* the target word must
  both be unaligned.

Those combine hard links. :func:`average_links` combines the two directions' soft weights
instead (``nmt align --symmetrize average``): a link where their mean exceeds a threshold,
the bidirectional averaging of Nagata et al. (2020), so a pair either direction is sure of
and the other leans to survives, and one that both only half-believe does not.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from nmt_cli.pharaoh import Link

__all__ = ["AVERAGE", "AVERAGE_THRESHOLD", "SYMMETRIZATIONS", "average_links", "describe", "symmetrize"]

SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
#: the soft symmetrization, beside the hard ones (:func:`average_links`), and its default threshold
AVERAGE = "average"
AVERAGE_THRESHOLD = 0.4
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


class _Alignment:
    """A growing link set that knows which source and target words are aligned."""

    def __init__(self, links: Iterable[Link]):
        self.links: set[Link] = set()
        self.src_aligned: set[int] = set()
        self.tgt_aligned: set[int] = set()
        for link in links:
            self.add(link)

    def add(self, link: Link) -> None:
        self.links.add(link)
        self.src_aligned.add(link[0])
        self.tgt_aligned.add(link[1])

    def may_add(self, link: Link, both_unaligned: bool) -> bool:
        src_free = link[0] not in self.src_aligned
        tgt_free = link[1] not in self.tgt_aligned
        return link not in self.links and ((src_free and tgt_free) if both_unaligned else (src_free or tgt_free))


def _grow_diag(alignment: _Alignment, union: set[Link], src_len: int, tgt_len: int) -> None:
    """Add union links next to existing links until nothing changes (grid order, as in Moses)."""
    changed = True
    while changed:
        changed = False
        for i in range(src_len):
            for j in range(tgt_len):
                if (i, j) not in alignment.links:
                    continue
                for di, dj in _NEIGHBOURS:
                    candidate = (i + di, j + dj)
                    if candidate in union and alignment.may_add(candidate, both_unaligned=False):
                        alignment.add(candidate)
                        changed = True


def _final(alignment: _Alignment, direction: set[Link], both_unaligned: bool) -> None:
    """Add the direction's links whose words are still unaligned (or/and, see module doc)."""
    for link in sorted(direction):
        if alignment.may_add(link, both_unaligned):
            alignment.add(link)


def symmetrize(
    forward: Iterable[Link], reverse: Iterable[Link], method: str, src_len: int, tgt_len: int
) -> list[Link]:
    """Symmetrised links, sorted; ``src_len``/``tgt_len`` are the sentence lengths in words."""
    forward, reverse = set(forward), set(reverse)
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrization {method!r}; choose one of: {', '.join(SYMMETRIZATIONS)}")
    if method == "union":
        return sorted(forward | reverse)
    alignment = _Alignment(forward & reverse)
    if method != "intersection":
        _grow_diag(alignment, forward | reverse, src_len, tgt_len)
    if method.startswith("grow-diag-final"):
        both = method == "grow-diag-final-and"
        _final(alignment, forward, both)
        _final(alignment, reverse, both)
    return sorted(alignment.links)


def describe(method: str, threshold: float | None) -> str:
    """How two directions were combined, for people: ``grow-diag-final``, ``average > 0.4``."""
    return f"{method} > {threshold}" if method == AVERAGE else method


def average_links(forward: np.ndarray, reverse: np.ndarray, threshold: float) -> list[Link]:
    """Links ``(i, j)`` where ``(forward[j, i] + reverse[i, j]) / 2 > threshold``, sorted.

    ``forward``: (T, S) weights of each target word ``j`` on each source word ``i`` from the
    source->target model; ``reverse``: (S, T) weights of each source word ``i`` on each
    target word ``j`` from the target->source model. Rows sum to at most one (a null
    position may keep the rest), so a mean above one half needs both directions' support.
    """
    if forward.shape[::-1] != reverse.shape:
        raise ValueError(f"forward weights {forward.shape} and reverse weights {reverse.shape} do not transpose")
    mean = (forward.T + reverse) / 2.0  # (S, T)
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(mean > threshold))]
