"""Hard word links from a soft word matrix (target words x source words).

* ``argmax``: every target word ``j`` is linked to its most attended source word,
  ``i = argmax_i A[j, i]`` (one link per target word, as read off the seed's alignment
  matrix figure);
* ``threshold``: every cell with ``A[j, i] >= threshold`` is a link, so a target word
  may have several source words or none.

Links are ``(i, j)`` = (source word, target word), the Pharaoh order.
"""

from __future__ import annotations

import numpy as np

from nmt_cli.pharaoh import Link

__all__ = ["METHODS", "argmax_links", "threshold_links", "hard_links"]

METHODS = ("argmax", "threshold")


def argmax_links(matrix: np.ndarray) -> list[Link]:
    """One link per target word to its highest-weight source word, sorted."""
    matrix = np.asarray(matrix)
    if matrix.size == 0:
        return []
    best_source = matrix.argmax(axis=1)  # (T,)
    return sorted((int(i), j) for j, i in enumerate(best_source))


def threshold_links(matrix: np.ndarray, threshold: float) -> list[Link]:
    """Every (source, target) cell whose weight is at least ``threshold``, sorted."""
    targets, sources = np.nonzero(np.asarray(matrix) >= threshold)
    return sorted((int(i), int(j)) for j, i in zip(targets, sources))


def hard_links(matrix: np.ndarray, method: str = "argmax", threshold: float = 0.2) -> list[Link]:
    """Dispatch to :func:`argmax_links` or :func:`threshold_links`."""
    if method == "argmax":
        return argmax_links(matrix)
    if method == "threshold":
        return threshold_links(matrix, threshold)
    raise ValueError(f"unknown alignment method {method!r}; choose one of: {', '.join(METHODS)}")
