"""Which layer, heads and shift align best? Score every choice against gold links.

Transformer heads specialise: a few cross-attention heads align words well, others
attend to punctuation or spread out, and which ones depends on the trained model. With
a small gold-aligned development set this runs forced decoding twice (shift off and on),
then scores, for each reading, every single head, every layer's head average and the
average of all layers, and returns them best first. Pass the winner to ``nmt align``
as ``--layer/--heads/--shift``; report AER on other sentences than those it was picked on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from nmt_cli.alignment.aer import AlignmentScore, score_alignments
from nmt_cli.alignment.model import AlignmentModel
from nmt_cli.alignment.reader import AttentionReading, HeadSelection, SentenceAlignment
from nmt_cli.pharaoh import GoldAlignment
from nmt_cli.textio import check_same_length

__all__ = ["DirectionReading", "SweepResult", "candidate_selections", "read_every_candidate", "sweep"]


@dataclass(frozen=True)
class DirectionReading:
    """The heads and shift one model is read with."""

    selection: HeadSelection
    shift: bool

    def describe(self) -> str:
        return f"{self.selection.describe()} shift={'on' if self.shift else 'off'}"

    def options(self) -> str:
        """The ``nmt align`` options that reproduce this reading."""
        return (f"--layer {self.selection.layer_text} --heads {self.selection.heads_text} "
                f"--{'shift' if self.shift else 'no-shift'}")


@dataclass(frozen=True)
class SweepResult:
    """One reading of the attention and how well it aligns."""

    reading: DirectionReading
    score: AlignmentScore


def candidate_selections(layers: int, heads: int) -> list[HeadSelection]:
    """Every single head, every layer's average, and the average of everything."""
    singles = [HeadSelection(layer, (head,)) for layer in range(layers) for head in range(heads)] if heads > 1 else []
    return singles + [HeadSelection(layer, None) for layer in range(layers)] + [HeadSelection(None, None)]


def read_every_candidate(model: AlignmentModel, src_lines: Sequence[str], tgt_lines: Sequence[str],
                         method: str = "argmax", threshold: float = 0.2,
                         ) -> Iterator[tuple[DirectionReading, list[SentenceAlignment]]]:
    """Each candidate reading (:func:`candidate_selections`, shift off and on) and the
    sentence pairs read with it: forced decoding runs once per shift, not per reading."""
    pairs = model.encode(src_lines, tgt_lines)
    for shift in (False, True):
        attentions = model.attention(pairs, shift)  # (L, H, T, S) each
        for selection in candidate_selections(*model.layers_and_heads):
            reading = AttentionReading(selection, method, threshold).for_model(model.config)
            yield (DirectionReading(selection, shift),
                   [pair.read(selection.apply(attention), reading) for pair, attention in zip(pairs, attentions)])


def sweep(
    model: AlignmentModel,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    gold: Sequence[GoldAlignment],
    method: str = "argmax",
    threshold: float = 0.2,
) -> list[SweepResult]:
    """Score every candidate reading against the gold links; best (lowest AER) first."""
    check_same_length("the sentence pairs", len(src_lines), "the gold alignments", len(gold))
    results = []
    for reading, aligned in read_every_candidate(model, src_lines, tgt_lines, method, threshold):
        lengths = [(len(sentence.src_words), len(sentence.tgt_words)) for sentence in aligned]
        results.append(SweepResult(reading, score_alignments(gold, [sentence.links for sentence in aligned], lengths)))
    return sorted(results, key=lambda result: result.score.aer)
