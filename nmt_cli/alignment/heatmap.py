"""Alignment heatmaps like figure 3 of Bahdanau et al. (2015), written as PNG.

Source words run along the x axis (on top), target words down the y axis; each cell
is the weight ``alpha_{t,i}`` on a grey scale from black (0) to white (1). Hard links
can be drawn on top (red squares), and gold links (filled dots for sure links, rings
for possible ones) to see where the attention agrees with a human.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np

from nmt_cli.fileio import atomic_open
from nmt_cli.pharaoh import GoldAlignment, Link

__all__ = ["save_heatmap"]

CELL_INCHES = 0.28  # a 30 x 30 matrix is about 8.5 inches of cells: labels stay readable
MARGIN_INCHES = 1.6  # room for the tick labels
DPI = 100


def _links_xy(links: Iterable[Link]) -> tuple[list[int], list[int]]:
    """Pharaoh links (source i, target j) -> x (= i) and y (= j) coordinates."""
    links = sorted(links)
    return [i for i, _ in links], [j for _, j in links]


def save_heatmap(
    path: str | os.PathLike,
    matrix: np.ndarray,
    src_words: Sequence[str],
    tgt_words: Sequence[str],
    links: Iterable[Link] | None = None,
    gold: GoldAlignment | None = None,
    title: str | None = None,
) -> None:
    """Draw ``matrix`` (target words x source words) with its words on both axes; write a PNG.

    matplotlib is imported here, not with the module: ``nmt align`` imports this module on
    every run, draws heatmaps only when asked, and would otherwise spend much of its start-up on it.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape != (len(tgt_words), len(src_words)):
        raise ValueError(
            f"matrix {matrix.shape} does not match {len(tgt_words)} target x {len(src_words)} source words"
        )
    width = CELL_INCHES * max(len(src_words), 1) + MARGIN_INCHES
    height = CELL_INCHES * max(len(tgt_words), 1) + MARGIN_INCHES
    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    axes.imshow(matrix, cmap="gray", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    axes.xaxis.tick_top()
    axes.set_xticks(range(len(src_words)), labels=src_words, rotation=90, fontsize=8)
    axes.set_yticks(range(len(tgt_words)), labels=tgt_words, fontsize=8)
    overlays = False
    if gold is not None:
        possible_only = set(gold.possible) - set(gold.sure)
        axes.scatter(*_links_xy(gold.sure), s=18, c="tab:green", label="gold sure")
        axes.scatter(*_links_xy(possible_only), s=18, facecolors="none", edgecolors="tab:green", label="gold possible")
        overlays = True
    if links is not None:
        axes.scatter(*_links_xy(links), s=60, marker="s", facecolors="none", edgecolors="tab:red", label="hard links")
        overlays = True
    if overlays:
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 0.0), fontsize=7, frameon=False)
    if title:
        axes.set_title(title, fontsize=9, pad=12)
    figure.tight_layout()
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png")
