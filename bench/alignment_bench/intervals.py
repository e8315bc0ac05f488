"""Per-sentence alignment counts and a paired bootstrap interval of an AER difference.

AER is a ratio of sums over a corpus, so a resample of sentences recomputes it from the
summed counts of the sentences drawn, never from an average of per-sentence AERs::

    AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)        (sums over the sentences drawn)

The paired bootstrap (Koehn 2004) draws the same sentences for both systems in every
resample, so the interval of ``AER(a) - AER(b)`` reflects which sentences happen to be in
the test set, not the difference between two independent samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from nmt_cli.alignment import score_alignments
from nmt_cli.pharaoh import GoldAlignment, Link

#: columns of a counts array: |A|, |S|, |A ∩ S|, |A ∩ P| of one sentence
COUNT_COLUMNS = ("predicted", "sure", "predicted_sure", "predicted_possible")
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 12345


def sentence_counts(gold: Sequence[GoldAlignment], links: Sequence[Iterable[Link]],
                    lengths: Sequence[tuple[int, int]]) -> np.ndarray:
    """An (n, 4) int array of :data:`COUNT_COLUMNS` per sentence (gold links outside their
    sentence left out, as :func:`nmt_cli.alignment.score_alignments` does)."""
    rows = []
    for gold_pair, hypothesis, length in zip(gold, links, lengths, strict=True):
        score = score_alignments([gold_pair], [hypothesis], [length])
        rows.append([getattr(score, column) for column in COUNT_COLUMNS])
    return np.asarray(rows, dtype=np.int64).reshape(-1, len(COUNT_COLUMNS))


def aer_of(counts: np.ndarray) -> np.ndarray | float:
    """AER from counts summed over the last-but-one axis: ``1 - (AS + AP) / (A + S)``."""
    total = counts.sum(axis=-2)
    predicted, sure, predicted_sure, predicted_possible = np.moveaxis(total, -1, 0)
    return 1.0 - (predicted_sure + predicted_possible) / np.maximum(predicted + sure, 1)


@dataclass(frozen=True)
class Interval:
    """``AER(a) - AER(b)`` on the whole set and its bootstrap percentile interval."""

    difference: float
    low: float
    high: float
    level: float
    samples: int

    def claim(self, a: str, b: str) -> str:
        """What the interval allows one to say about ``a`` against ``b`` (lower AER is better)."""
        span = f"{self.level:.0%} interval of AER({a}) - AER({b}): [{self.low:+.4f}, {self.high:+.4f}]"
        if self.high < 0:
            return f"{span}; it excludes 0: {a} aligns these pairs better than {b}"
        if self.low > 0:
            return f"{span}; it excludes 0: {b} aligns these pairs better than {a}"
        return (f"{span}; it includes 0: on these pairs neither can be said to align better than the other "
                f"(a difference of {self.difference:+.4f} is within what the choice of sentences moves)")


def paired_bootstrap(a: np.ndarray, b: np.ndarray, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
                     level: float = 0.95) -> Interval:
    """Percentile interval of ``AER(a) - AER(b)`` over ``samples`` resamples of the sentences
    (drawn with replacement, the same draw for both; counts arrays of :func:`sentence_counts`
    over the same sentences, possibly summed over a system's runs)."""
    if a.shape != b.shape:
        raise ValueError(f"the two systems' counts differ in shape: {a.shape} and {b.shape}")
    draws = np.random.default_rng(seed).integers(0, len(a), size=(samples, len(a)))
    differences = aer_of(a[draws]) - aer_of(b[draws])
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(differences, [tail, 100 - tail])
    return Interval(float(aer_of(a) - aer_of(b)), float(low), float(high), level, samples)
