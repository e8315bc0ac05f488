"""The one alignment reader: which attention is read, and how it becomes word links.

Every path from attention to alignments goes through here: ``nmt align`` (forced
decoding of a given target), ``nmt translate --alignments`` and the translation service
(the attention of the model's own translation, :func:`hypothesis_alignment`) and ``nmt
align sweep``.

1. :class:`HeadSelection` picks decoder layers and heads of the piece attention
   (L, H, T, S) and averages them into (T, S). The default, the same for every
   command, is the last decoder layer with its heads averaged; ``nmt align sweep``
   finds the best reading of a given model on gold-aligned sentences.
2. :func:`nmt_cli.alignment.words.aggregate_to_words` turns the (T, S) piece matrix into
   a (T_words, S_words) word matrix whose rows sum to one.
3. :func:`nmt_cli.alignment.hard.hard_links` picks the links (argmax or threshold).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from nmt_cli.alignment.hard import METHODS, hard_links
from nmt_cli.alignment.pharaoh import Link
from nmt_cli.alignment.words import aggregate_to_words, words_from_pieces
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.errors import NmtError
from nmt_cli.tokenization import Tokenizer

__all__ = ["HeadSelection", "AttentionReading", "SentenceAlignment", "read_alignment", "hypothesis_alignment"]


@dataclass(frozen=True)
class HeadSelection:
    """Which decoder layers and heads to average: ``layer`` None = all, ``heads`` None = all."""

    layer: int | None = -1
    heads: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, layer: str, heads: str) -> "HeadSelection":
        """From option text: ``layer`` ``"-1"``/``"2"``/``"all"``, ``heads`` ``"all"``/``"0,3"``."""
        try:
            chosen_layer = None if layer.strip().lower() == "all" else int(layer)
            chosen_heads = (
                None if heads.strip().lower() == "all" else tuple(int(h) for h in heads.split(",") if h.strip())
            )
        except ValueError:
            raise NmtError(f"bad --layer {layer!r} or --heads {heads!r}: use an integer or 'all', "
                           "and a comma-separated list of head indices or 'all'") from None
        if chosen_heads == ():
            raise NmtError("--heads lists no head; use e.g. --heads 0,3 or --heads all")
        return cls(chosen_layer, chosen_heads)

    @property
    def layer_text(self) -> str:
        """The ``--layer`` value that selects this: ``"-1"``, ``"all"``."""
        return "all" if self.layer is None else str(self.layer)

    @property
    def heads_text(self) -> str:
        """The ``--heads`` value that selects this: ``"all"``, ``"0,3"``."""
        return "all" if self.heads is None else ",".join(map(str, self.heads))

    def describe(self) -> str:
        return f"layer={self.layer_text} heads={self.heads_text}"

    def check(self, layers: int, heads: int) -> None:
        """Fail with one line when the selection does not exist in a model of this size."""
        if self.layer is not None and not -layers <= self.layer < layers:
            raise NmtError(f"--layer {self.layer} is out of range: the model has {layers} decoder layer(s)")
        bad = [h for h in self.heads or () if not 0 <= h < heads]
        if bad:
            raise NmtError(f"--heads {bad[0]} is out of range: the model has {heads} head(s) per layer")

    def apply(self, attention: np.ndarray) -> np.ndarray:
        """(L, H, T, S) -> (T, S): the mean over the selected layers and heads."""
        layers = attention if self.layer is None else attention[[self.layer]]  # (L', H, T, S)
        heads = layers if self.heads is None else layers[:, list(self.heads)]  # (L', H', T, S)
        return heads.mean(axis=(0, 1))


@dataclass(frozen=True)
class AttentionReading:
    """The heads to read and the rule that turns their word matrix into hard links."""

    selection: HeadSelection = field(default_factory=HeadSelection)
    method: str = "argmax"
    threshold: float = 0.2

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise NmtError(f"unknown alignment method {self.method!r}; choose one of: {', '.join(METHODS)}")


@dataclass
class SentenceAlignment:
    """One aligned pair: the words of both sides, the soft matrix and the hard links."""

    src_words: list[str]
    tgt_words: list[str]
    matrix: np.ndarray  # (T_words, S_words), each row sums to one over source words
    links: list[Link]  # (source word, target word), 0-based


def read_alignment(src_pieces: Sequence[str], tgt_pieces: Sequence[str], attention: np.ndarray,
                   reading: AttentionReading) -> SentenceAlignment:
    """Words, soft word matrix and links of one pair from its selected piece attention (T, S).

    ``attention`` must be (len(tgt_pieces), len(src_pieces)); a pair with an empty side
    gets an empty matrix and no links.
    """
    src_words, tgt_words = words_from_pieces(src_pieces), words_from_pieces(tgt_pieces)
    if not src_pieces or not tgt_pieces:
        matrix = np.zeros((len(tgt_words), len(src_words)))
    else:
        matrix = aggregate_to_words(attention, src_pieces, tgt_pieces)  # (T_words, S_words)
    return SentenceAlignment(src_words, tgt_words, matrix, hard_links(matrix, reading.method, reading.threshold))


def hypothesis_alignment(source: str, hypothesis: Hypothesis, tokenizer: Tokenizer,
                         reading: AttentionReading) -> SentenceAlignment:
    """Words, soft word matrix and links between a source line and its translation, read
    from the attention the translation was decoded with (``hypothesis.attention``,
    (L, H, T, S)); a blank source or an empty translation has no links."""
    src_pieces = tokenizer.src_pieces(tokenizer.encode_src(source)) if source.strip() else []
    tgt_pieces = tokenizer.tgt_pieces(hypothesis.tokens)
    attention = None
    if src_pieces and tgt_pieces:
        reading.selection.check(*hypothesis.attention.shape[:2])
        attention = reading.selection.apply(hypothesis.attention)  # (T, S)
    return read_alignment(src_pieces, tgt_pieces, attention, reading)

