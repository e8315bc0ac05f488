"""Align a parallel corpus with a trained model: soft word matrices and hard links.

``Aligner(checkpoint, options)`` loads a model once (:mod:`nmt_cli.alignment.model`),
aligns batches of sentence pairs by forced decoding (:mod:`nmt_cli.alignment.extract`),
turns piece attention into word matrices (:mod:`nmt_cli.alignment.words`) and picks hard links
(:mod:`nmt_cli.alignment.hard`). Given a model of the opposite direction it also aligns
target -> source and symmetrises the two link sets (:mod:`nmt_cli.alignment.symmetrize`).

Word ``k`` of a sentence is its ``k``-th SentencePiece word (pieces from one ``"\u2581"``
marker to the next), i.e. its ``k``-th whitespace token: Pharaoh indices refer to the
whitespace tokens of the given text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from nmt_cli.alignment.extract import HeadSelection
from nmt_cli.alignment.hard import METHODS, hard_links
from nmt_cli.alignment.model import AlignmentModel
from nmt_cli.alignment.pharaoh import Link
from nmt_cli.alignment.symmetrize import SYMMETRIZATIONS, symmetrize
from nmt_cli.errors import NmtError

__all__ = ["AlignOptions", "SentenceAlignment", "Aligner", "align_corpus"]


@dataclass(frozen=True)
class AlignOptions:
    """How attention becomes alignments.

    ``shift`` is off by default for every family: on the trained synthetic demo
    Transformer, the last layer read without shift gave AER 0.060 and every shifted
    reading was worse (`nmt align sweep`). shift-att (Chen et al. 2020) helps on middle
    layers of deeper models; ``nmt align sweep`` finds the best reading for a model.
    """

    selection: HeadSelection = field(default_factory=HeadSelection)
    shift: bool = False
    method: str = "argmax"
    threshold: float = 0.2
    batch_size: int = 32
    symmetrization: str = "grow-diag-final"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise NmtError(f"unknown alignment method {self.method!r}; choose one of: {', '.join(METHODS)}")
        if self.symmetrization not in SYMMETRIZATIONS:
            raise NmtError(
                f"unknown symmetrization {self.symmetrization!r}; choose one of: {', '.join(SYMMETRIZATIONS)}"
            )


@dataclass
class SentenceAlignment:
    """One aligned pair: the words of both sides, the soft matrix and the hard links."""

    src_words: list[str]
    tgt_words: list[str]
    matrix: np.ndarray  # (T_words, S_words), each row sums to one over source words
    links: list[Link]  # (source word, target word), 0-based


class Aligner:
    """A model (and optionally its reverse-direction partner) ready to align sentence pairs."""

    def __init__(
        self,
        checkpoint: str | os.PathLike,
        options: AlignOptions = AlignOptions(),
        device: str = "cpu",
        reverse_checkpoint: str | os.PathLike | None = None,
    ):
        self.options = options
        self.forward = AlignmentModel(checkpoint, device, options.batch_size)
        self.reverse = AlignmentModel(reverse_checkpoint, device, options.batch_size) if reverse_checkpoint else None
        for model in (self.forward, self.reverse):
            if model is not None:
                model.check(options.selection)

    @property
    def settings(self) -> dict:
        """Everything that decides the output, recorded next to it."""
        record = {
            "checkpoint": str(self.forward.path),
            "step": self.forward.step,
            "arch": self.forward.arch,
            "selection": self.options.selection.describe(),
            "shift": self.options.shift,
            "method": self.options.method,
            "threshold": self.options.threshold if self.options.method == "threshold" else None,
        }
        if self.reverse is not None:
            record.update(reverse_checkpoint=str(self.reverse.path), symmetrization=self.options.symmetrization)
        return record

    def _one_direction(self, model: AlignmentModel, src_lines: Sequence[str],
                       tgt_lines: Sequence[str]) -> list[SentenceAlignment]:
        pairs = model.encode(src_lines, tgt_lines)
        attentions = model.attention(pairs, self.options.shift, self.options.selection)  # (T, S) each
        sentences = []
        for pair, attention in zip(pairs, attentions):
            matrix = pair.word_matrix(attention)  # (T_words, S_words)
            links = hard_links(matrix, self.options.method, self.options.threshold)
            sentences.append(SentenceAlignment(pair.src_words, pair.tgt_words, matrix, links))
        return sentences

    def align(self, src_lines: Sequence[str], tgt_lines: Sequence[str]) -> list[SentenceAlignment]:
        """Align ``src_lines[k]`` with ``tgt_lines[k]`` for every ``k``."""
        sentences = self._one_direction(self.forward, src_lines, tgt_lines)
        if self.reverse is None:
            return sentences
        backward = self._one_direction(self.reverse, tgt_lines, src_lines)
        for number, (sentence, reverse) in enumerate(zip(sentences, backward), start=1):
            if (len(reverse.src_words), len(reverse.tgt_words)) != (len(sentence.tgt_words), len(sentence.src_words)):
                raise NmtError(
                    f"pair {number}: the two models split it into different words ({len(sentence.src_words)}/"
                    f"{len(sentence.tgt_words)} vs {len(reverse.tgt_words)}/{len(reverse.src_words)})"
                )
            reverse_links = [(i, j) for j, i in reverse.links]  # (target, source) -> (source, target)
            sentence.links = symmetrize(
                sentence.links, reverse_links, self.options.symmetrization,
                len(sentence.src_words), len(sentence.tgt_words),
            )
        return sentences


def align_corpus(
    checkpoint: str | os.PathLike,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    options: AlignOptions = AlignOptions(),
    device: str = "cpu",
    reverse_checkpoint: str | os.PathLike | None = None,
) -> list[SentenceAlignment]:
    """Load the model(s) and align every pair; see :class:`Aligner`."""
    return Aligner(checkpoint, options, device, reverse_checkpoint).align(src_lines, tgt_lines)
