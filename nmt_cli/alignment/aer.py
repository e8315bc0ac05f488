"""Alignment error rate, precision and recall (Och & Ney 2003), summed over a corpus.

With hypothesis links ``A``, sure gold links ``S`` and possible gold links ``P``
(``S ⊆ P``), each summed over all sentences before dividing::

    precision = |A ∩ P| / |A|
    recall    = |A ∩ S| / |S|
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

A perfect hypothesis (``A = S = P``) has AER 0; an empty one has AER 1.

One kind of error is counted apart: links of target words the gold leaves unaligned
(no sure or possible link), which an aligner that must give every word a link (an
attention argmax) cannot avoid.

Gold links that point outside their sentence (an index at or beyond its word count,
known when the tokenised sentences are given) are reported and left out, never fatal.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from nmt_cli.errors import InputError
from nmt_cli.pharaoh import GoldAlignment, Link, read_alignments
from nmt_cli.textio import check_same_length, iter_lines

__all__ = ["AlignmentCounts", "AlignmentScore", "score_alignments", "score_files", "sentence_lengths"]


@dataclass(frozen=True)
class AlignmentScore:
    """Corpus-level figures and the counts they come from."""

    aer: float
    precision: float
    recall: float
    sentences: int
    predicted: int  # |A|
    sure: int  # |S|
    possible: int  # |P|
    predicted_sure: int  # |A ∩ S|
    predicted_possible: int  # |A ∩ P|
    out_of_range: int  # gold links outside their sentence, left out
    out_of_range_example: str | None  # the first of them, "line N: i-j (...)"
    predicted_unaligned: int  # links of A whose target word has no gold link at all

    @property
    def wrong(self) -> int:
        """|A \\ P|: predicted links that are not even possible."""
        return self.predicted - self.predicted_possible

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """``AER 0.1234  precision 0.9000  recall 0.8000  (447 sentences, ...)``."""
        text = (
            f"AER {self.aer:.4f}  precision {self.precision:.4f}  recall {self.recall:.4f}  "
            f"({self.sentences} sentences, {self.predicted} predicted, {self.sure} sure, "
            f"{self.possible} possible links; {self.predicted_unaligned} of the {self.wrong} wrong links are on "
            "target words the gold leaves unaligned)"
        )
        if self.out_of_range:
            text += (f"; {self.out_of_range} gold link(s) outside their sentence left out, "
                     f"first at {self.out_of_range_example}")
        return text


def _in_range(link: Link, length: tuple[int, int]) -> bool:
    return 0 <= link[0] < length[0] and 0 <= link[1] < length[1]


class AlignmentCounts:
    """The counts of :class:`AlignmentScore`, summed a sentence pair at a time (a corpus is
    scored as it streams past)."""

    def __init__(self) -> None:
        self.sentences = self.predicted = self.sure = self.possible = 0
        self.predicted_sure = self.predicted_possible = self.predicted_unaligned = self.out_of_range = 0
        self.example: str | None = None

    def add(self, gold: GoldAlignment, hypothesis: Iterable[Link], length: tuple[int, int] | None = None) -> None:
        """Count one pair; ``length`` = (source words, target words) leaves out gold links outside it."""
        self.sentences += 1
        gold_sure, gold_possible = set(gold.sure), set(gold.possible) | set(gold.sure)
        if length is not None:
            outside = sorted(link for link in gold_possible if not _in_range(link, length))
            if outside and self.example is None:
                i, j = outside[0]
                self.example = (f"line {self.sentences}: {i}-{j} (source {length[0]} words, "
                                f"target {length[1]} words)")
            self.out_of_range += len(outside)
            gold_sure -= set(outside)
            gold_possible -= set(outside)
        links = set(hypothesis)
        self.predicted += len(links)
        self.sure += len(gold_sure)
        self.possible += len(gold_possible)
        self.predicted_sure += len(links & gold_sure)
        self.predicted_possible += len(links & gold_possible)
        linked_targets = {j for _, j in gold_possible}
        self.predicted_unaligned += sum(j not in linked_targets for _, j in links)

    def score(self) -> AlignmentScore:
        """The figures of the pairs counted so far."""
        predicted, sure = self.predicted, self.sure
        return AlignmentScore(
            aer=1.0 - (self.predicted_sure + self.predicted_possible) / (predicted + sure) if predicted + sure else 0.0,
            precision=self.predicted_possible / predicted if predicted else 0.0,
            recall=self.predicted_sure / sure if sure else 0.0,
            sentences=self.sentences,
            predicted=predicted,
            sure=sure,
            possible=self.possible,
            predicted_sure=self.predicted_sure,
            predicted_possible=self.predicted_possible,
            out_of_range=self.out_of_range,
            out_of_range_example=self.example,
            predicted_unaligned=self.predicted_unaligned,
        )


def score_alignments(
    gold: Sequence[GoldAlignment],
    hypotheses: Sequence[Iterable[Link]],
    lengths: Sequence[tuple[int, int]] | None = None,
) -> AlignmentScore:
    """Score hypothesis links against gold; ``lengths`` = (source words, target words) per pair."""
    if len(gold) != len(hypotheses):
        raise ValueError(f"{len(gold)} gold alignments but {len(hypotheses)} hypotheses")
    if lengths is not None and len(lengths) != len(gold):
        raise ValueError(f"{len(gold)} gold alignments but {len(lengths)} sentence lengths")
    counts = AlignmentCounts()
    for index, (gold_pair, hypothesis) in enumerate(zip(gold, hypotheses)):
        counts.add(gold_pair, hypothesis, None if lengths is None else lengths[index])
    return counts.score()


def sentence_lengths(path: str | os.PathLike) -> list[int]:
    """Whitespace token count of every line of a tokenised text file."""
    return [len(line.split()) for line in iter_lines(path)]


def score_files(
    gold_path: str | os.PathLike,
    hyp_path: str | os.PathLike,
    src_path: str | os.PathLike | None = None,
    tgt_path: str | os.PathLike | None = None,
) -> AlignmentScore:
    """Score a Pharaoh hypothesis file against a gold file (with ``ipj`` possible links).

    With the tokenised source and target files, gold links outside their sentence are
    reported and left out; without them they count as ordinary (unreachable) gold links.
    """
    gold = read_alignments(gold_path)
    hypotheses = [pair.possible for pair in read_alignments(hyp_path)]
    check_same_length(gold_path, len(gold), hyp_path, len(hypotheses))
    if not any(pair.possible for pair in gold):
        raise InputError(gold_path, "no gold links (an empty file?): the alignment error rate is undefined")
    lengths = None
    if (src_path is None) != (tgt_path is None):
        raise InputError(src_path or tgt_path, "give both --src and --tgt (the tokenised sentences), or neither")
    if src_path is not None and tgt_path is not None:
        src_lengths, tgt_lengths = sentence_lengths(src_path), sentence_lengths(tgt_path)
        check_same_length(gold_path, len(gold), src_path, len(src_lengths))
        check_same_length(gold_path, len(gold), tgt_path, len(tgt_lengths))
        lengths = list(zip(src_lengths, tgt_lengths))
    return score_alignments(gold, hypotheses, lengths)
