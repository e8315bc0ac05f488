"""Which heads to read two plain directions with, found without gold links: agreement.

A Transformer trained only to translate has a few cross-attention heads that align words
well, and which ones differs from model to model (``nmt align sweep`` finds them on gold
links). Without gold links, the two directions can pick them for each other: a head that
aligns well links the same word pairs as a good head of the opposite model, while heads
that attend to punctuation, neighbours or everything disagree. Each direction is read with
every candidate of the sweep (every single head, every layer's average, all layers; shift
off and on), and the pair of readings whose argmax links agree most, by Dice
``2 |F & R| / (|F| + |R|)``, is chosen: the agreement principle of Liang et al. 2006
(alignment by agreement), used here to choose heads instead of training them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from nmt_cli.alignment.api import Aligner, AlignOptions
from nmt_cli.alignment.model import AlignmentModel
from nmt_cli.alignment.sweep import DirectionReading, read_every_candidate
from nmt_cli.pharaoh import Link

__all__ = ["AGREEMENT_SAMPLE", "AgreedReadings", "agreed_options", "agreed_readings",
           "agreeing_aligner", "rank_by_agreement"]

#: sentence pairs the readings are chosen on (the first ones of the text to align)
AGREEMENT_SAMPLE = 2000


@dataclass(frozen=True)
class AgreedReadings:
    """A reading of each direction and how well their links agree (Dice of the link sets)."""

    forward: DirectionReading
    reverse: DirectionReading
    agreement: float

    def describe(self) -> str:
        return (f"forward {self.forward.describe()}, reverse {self.reverse.describe()} "
                f"(agreement {self.agreement:.4f})")


#: each candidate reading's argmax links of every pair, as (source word, target word) sets
LinkSets = Mapping[DirectionReading, Sequence[set[Link]]]


def rank_by_agreement(forward: LinkSets, reverse: LinkSets) -> list[AgreedReadings]:
    """Every forward reading paired with every reverse one, most agreeing first (ties keep
    the candidates' order). Both directions' links are given as (source, target) words."""
    ranked = []
    for forward_reading, forward_links in forward.items():
        for reverse_reading, reverse_links in reverse.items():
            agreed = sum(len(links & back) for links, back in zip(forward_links, reverse_links))
            total = sum(len(links) + len(back) for links, back in zip(forward_links, reverse_links))
            ranked.append(AgreedReadings(forward_reading, reverse_reading, 2 * agreed / total if total else 0.0))
    return sorted(ranked, key=lambda choice: -choice.agreement)


def _candidate_links(model: AlignmentModel, src_lines: Sequence[str], tgt_lines: Sequence[str],
                     turned: bool) -> dict[DirectionReading, list[set[Link]]]:
    """The argmax links of every candidate reading of ``model``; ``turned``: the model aligns
    the other way, and its (target, source) links are turned into (source, target)."""
    return {reading: [{(i, j) for j, i in sentence.links} if turned else set(sentence.links) for sentence in aligned]
            for reading, aligned in read_every_candidate(model, src_lines, tgt_lines)}


def agreed_readings(forward: AlignmentModel, reverse: AlignmentModel, src_lines: Sequence[str],
                    tgt_lines: Sequence[str]) -> list[AgreedReadings]:
    """Every pair of readings of ``forward`` (source -> target) and ``reverse`` on these
    sentence pairs, most agreeing first (:func:`rank_by_agreement`)."""
    return rank_by_agreement(_candidate_links(forward, src_lines, tgt_lines, turned=False),
                             _candidate_links(reverse, tgt_lines, src_lines, turned=True))


def agreed_options(options: AlignOptions, choice: AgreedReadings) -> AlignOptions:
    """``options`` reading each direction as ``choice`` says (argmax or threshold links as before)."""
    return replace(options, reading=replace(options.reading, selection=choice.forward.selection),
                   shift=choice.forward.shift,
                   reverse_reading=replace(options.reading, selection=choice.reverse.selection),
                   reverse_shift=choice.reverse.shift)


def agreeing_aligner(options: AlignOptions, checkpoint: str | os.PathLike, reverse_checkpoint: str | os.PathLike,
                     src_lines: Sequence[str], tgt_lines: Sequence[str],
                     device: str = "cpu") -> tuple[Aligner, list[AgreedReadings]]:
    """An aligner of the two models reading each direction as they agree most over the first
    :data:`AGREEMENT_SAMPLE` pairs (``nmt align --agree-heads``, the bootstrap's links), and
    every pair of readings, most agreeing first. Each model is loaded once."""
    sample = slice(0, AGREEMENT_SAMPLE)
    forward, reverse = (AlignmentModel(path, device, options.batch_size) for path in (checkpoint, reverse_checkpoint))
    ranked = agreed_readings(forward, reverse, src_lines[sample], tgt_lines[sample])
    return Aligner(forward, agreed_options(options, ranked[0]), device, reverse), ranked
