"""SentencePiece pieces -> words, on both sides of an attention matrix.

A word starts at every piece that begins with SentencePiece's word-start marker
``"\u2581"`` (and at the first piece); the pieces after it up to the next marker belong
to the same word. Word ``k``'s text is its pieces joined with the marker removed.

Aggregation of a piece-level matrix ``alpha`` (target pieces x source pieces) into a
word-level matrix ``A`` (target words x source words):

* source side, **sum** over the word's piece columns: the probability mass the
  decoder puts on a word is the mass it puts on any of its pieces;
* target side, **mean** over the word's piece rows: each piece of a target word votes
  with equal weight, so rows that summed to one still sum to one;
* every row is then **renormalised** to sum to one over source words. Attention rows
  need not sum to one over the real source pieces (the source EOS column was dropped,
  and Luong's local-p attention multiplies the softmax by a Gaussian, so its rows do not
  sum to one by formula); renormalising makes every row a distribution over words.
  A row with no mass at all becomes uniform.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from nmt_cli.tokenization.spm import WORD_BOUNDARY, word_spans

__all__ = ["word_spans", "words_from_pieces", "aggregate_to_words"]


def words_from_pieces(pieces: Sequence[str]) -> list[str]:
    """The words the pieces spell, marker removed: ``["\u2581the", "\u2581ca", "t"] -> ["the", "cat"]``."""
    return ["".join(pieces[k] for k in span).replace(WORD_BOUNDARY, "") for span in word_spans(pieces)]


def aggregate_to_words(attention: np.ndarray, src_pieces: Sequence[str], tgt_pieces: Sequence[str]) -> np.ndarray:
    """Piece matrix (T_pieces, S_pieces) -> word matrix (T_words, S_words); rows sum to one.

    Source piece columns of a word are summed, target piece rows of a word averaged,
    then rows renormalised (see the module docstring for why).
    """
    attention = np.asarray(attention, dtype=np.float64)
    if attention.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"attention has shape {attention.shape} but there are {len(tgt_pieces)} target "
            f"and {len(src_pieces)} source pieces"
        )
    src_spans = word_spans(src_pieces)
    tgt_spans = word_spans(tgt_pieces)
    by_src_word = np.stack([attention[:, span].sum(axis=1) for span in src_spans], axis=1)  # (T_p, S_w)
    by_word = np.stack([by_src_word[span].mean(axis=0) for span in tgt_spans], axis=0)  # (T_w, S_w)
    return _normalise_rows(by_word)


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Divide every row by its sum; an all-zero row becomes uniform."""
    totals = matrix.sum(axis=1, keepdims=True)  # (T, 1)
    uniform = np.full_like(matrix, 1.0 / max(matrix.shape[1], 1))
    return np.where(totals > 0, matrix / np.where(totals > 0, totals, 1.0), uniform)
