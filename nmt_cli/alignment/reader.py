"""The one alignment reader: which attention is read, and how it becomes word links.

Every path from attention to alignments goes through here: ``nmt align`` (forced
decoding of a given target), ``nmt translate --alignments`` and the translation service
(the attention of the model's own translation,
:func:`nmt_cli.translation.hypothesis_alignment`) and ``nmt
align sweep``.

1. :class:`HeadSelection` picks decoder layers and heads of the piece attention
   (L, H, T, S) and averages them into (T, S). The default, the same for every
   command, depends on the model and is decided here only (:func:`default_selection`):
   the head a model learned word links with (guided alignment, recorded in its
   checkpoint's config), else the last decoder layer with its heads averaged; and which
   decoder step is read for a target word (:func:`default_shift`), in a causal or a
   full-context decoder pass (:func:`default_full_context`), and whether the attention
   has a learned null position that can leave a word unaligned (:func:`default_null`).
   ``nmt align sweep`` finds the best reading of a given model on gold-aligned sentences.
2. :func:`nmt_cli.alignment.words.aggregate_to_words` turns the (T, S) piece matrix into
   a (T_words, S_words) word matrix whose rows sum to one.
3. :func:`nmt_cli.alignment.hard.hard_links` picks the links (argmax or threshold). A
   model with a null position (``model.alignment_null``) is read over its source words
   and the null: a target word whose null weight beats its best source word gets no
   link under argmax (:func:`read_alignment`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from nmt_cli.alignment.hard import METHODS, hard_links
from nmt_cli.alignment.words import normalise_rows, target_word_means, word_masses, words_from_pieces
from nmt_cli.config import Config
from nmt_cli.errors import NmtError
from nmt_cli.pharaoh import Link

__all__ = ["HeadSelection", "AttentionReading", "SentenceAlignment", "default_selection", "default_shift",
           "default_full_context", "default_null", "read_alignment", "combine_alignments"]


@dataclass(frozen=True)
class HeadSelection:
    """Which decoder layers and heads to average: ``layer`` None = all, ``heads`` None = all."""

    layer: int | None = -1
    heads: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, layer: str | None, heads: str | None) -> "HeadSelection | None":
        """From option text: ``layer`` ``"-1"``/``"2"``/``"all"``, ``heads`` ``"all"``/``"0,3"``.

        Neither given (both None): None, the model's default (:func:`default_selection`);
        one given: the other is the last layer / all heads.
        """
        if layer is None and heads is None:
            return None
        layer, heads = "-1" if layer is None else layer, "all" if heads is None else heads
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


def _guided(config: Config | None) -> bool:
    """Whether the model trained with ``config`` has a head guided by word links (``train.alignment_weight`` > 0)."""
    return config is not None and config.train.alignment_weight > 0


def default_selection(config: Config | None) -> HeadSelection:
    """The heads read when none are named: the head trained on word links (guided
    alignment: ``model.alignment_layer``/``alignment_head`` when ``train.alignment_weight``
    > 0), else the last decoder layer with its heads averaged (also without a config)."""
    if _guided(config):
        return HeadSelection(config.model.alignment_layer, (config.model.alignment_head,))
    return HeadSelection()


def default_shift(config: Config | None) -> bool:
    """Whether a target word is read at the step where it is the decoder input (shift-att)
    rather than the step that predicts it: where its guided head learned the links
    (``model.alignment_shift``); never for a model without guided alignment."""
    return _guided(config) and config.model.alignment_shift


def default_full_context(config: Config | None) -> bool:
    """Whether attention is read in a decoder pass that sees the whole target: where the
    guided head learned the links (``model.alignment_full_context``); a model without
    guided alignment learned its attention causally and is read so."""
    return _guided(config) and config.model.alignment_full_context


def default_null(config: Config | None) -> bool:
    """Whether the attention is read with its null position (``model.alignment_null``), where
    the guided head learned to put the weight of the words the links leave unaligned."""
    return _guided(config) and config.model.alignment_null


@dataclass(frozen=True)
class AttentionReading:
    """The heads to read and the rule that turns their word matrix into hard links.

    ``selection`` None reads the model's default heads; ``null``: the attention has the
    null position's column last (:func:`default_null`). :meth:`for_model` fills in both.
    """

    selection: HeadSelection | None = None
    method: str = "argmax"
    threshold: float = 0.2
    null: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise NmtError(f"unknown alignment method {self.method!r}; choose one of: {', '.join(METHODS)}")

    def for_model(self, config: Config | None) -> "AttentionReading":
        """This reading of the model trained with ``config``: its default heads unless others
        are named, and its null position if it has one."""
        selection = default_selection(config) if self.selection is None else self.selection
        return replace(self, selection=selection, null=default_null(config))


@dataclass
class SentenceAlignment:
    """One aligned pair: the words of both sides, the soft matrix and the hard links.

    ``null_share``: each target word's weight on the null position, normalised together with
    its source words' (None for a model without one); :meth:`link_weights` combines the two.
    """

    src_words: list[str]
    tgt_words: list[str]
    matrix: np.ndarray  # (T_words, S_words), each row sums to one over source words
    links: list[Link]  # (source word, target word), 0-based
    null_share: np.ndarray | None = None  # (T_words,); None: no null position

    def link_weights(self) -> np.ndarray:
        """(T_words, S_words): each target word's weight on each source word beside the null,
        so a row sums to one minus the word's null share (to one without a null)."""
        if self.null_share is None:
            return self.matrix
        return self.matrix * (1.0 - self.null_share)[:, None]


def read_alignment(src_pieces: Sequence[str], tgt_pieces: Sequence[str], attention: np.ndarray,
                   reading: AttentionReading) -> SentenceAlignment:
    """Words, soft word matrix and links of one pair from its selected piece attention (T, S).

    ``attention`` must be (len(tgt_pieces), len(src_pieces)), with one more column, the
    null position's, under ``reading.null``; a pair with an empty side gets an empty
    matrix and no links. The soft matrix is always over source words alone (rows sum to
    one). With the null the links come from each target word's weights over its source
    words and the null (its piece rows' mean null weight), normalised together; links to
    the null are none: under argmax a word is unaligned when the null weighs more than
    its best source word, under a threshold the null's share lowers every other.
    """
    src_words, tgt_words = words_from_pieces(src_pieces), words_from_pieces(tgt_pieces)
    if not src_pieces or not tgt_pieces:
        matrix = np.zeros((len(tgt_words), len(src_words)))
        return SentenceAlignment(src_words, tgt_words, matrix, [])
    attention = np.asarray(attention, dtype=np.float64)
    source = attention[:, :-1] if reading.null else attention  # (T, S)
    masses = word_masses(source, src_pieces, tgt_pieces)  # (T_words, S_words)
    null = target_word_means(attention[:, -1], tgt_pieces) if reading.null else None  # (T_words,)
    return _word_alignment(src_words, tgt_words, masses, null, reading)


def _word_alignment(src_words: list[str], tgt_words: list[str], masses: np.ndarray, null: np.ndarray | None,
                    reading: AttentionReading) -> SentenceAlignment:
    """The alignment of word masses (T_words, S_words) and, with a null, its weights (T_words,)."""
    matrix = normalise_rows(masses)  # aggregate_to_words
    if null is None:
        return SentenceAlignment(src_words, tgt_words, matrix, hard_links(matrix, reading.method, reading.threshold))
    with_null = normalise_rows(np.concatenate([masses, null[:, None]], axis=1))  # (T_words, S_words + 1)
    links = [(i, j) for i, j in hard_links(with_null, reading.method, reading.threshold) if i < len(src_words)]
    return SentenceAlignment(src_words, tgt_words, matrix, links, null_share=with_null[:, -1])


def combine_alignments(members: Sequence[SentenceAlignment], reading: AttentionReading) -> SentenceAlignment:
    """One pair's alignment by an ensemble: the mean of its models' link weights (and null
    shares, zero for a model without a null), read by ``reading``'s hard-link rule as one
    model's would be. Words are whitespace tokens, so models with different vocabularies
    combine; they must only read the pair as the same words (the same text normalisation)."""
    first = members[0]
    if len(members) == 1:
        return first
    for member in members[1:]:
        if (member.src_words, member.tgt_words) != (first.src_words, first.tgt_words):
            raise NmtError(f"the ensemble's models read a pair as different words ({' '.join(first.src_words)!r} "
                           f"vs {' '.join(member.src_words)!r}, or their targets): their text normalisation differs")
    if not first.src_words or not first.tgt_words:
        return first
    weights = np.mean([member.link_weights() for member in members], axis=0)  # (T_words, S_words)
    nulls = [member.null_share for member in members]
    null = None if all(share is None for share in nulls) else np.mean(
        [np.zeros(len(first.tgt_words)) if share is None else share for share in nulls], axis=0)
    return _word_alignment(first.src_words, first.tgt_words, weights, null, reading)
