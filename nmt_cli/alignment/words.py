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

__all__ = ["word_spans", "words_from_pieces", "word_masses", "target_word_means", "aggregate_to_words",
           "normalise_rows"]


def words_from_pieces(pieces: Sequence[str]) -> list[str]:
    """The words the pieces spell, marker removed: ``["\u2581the", "\u2581ca", "t"] -> ["the", "cat"]``."""
    return ["".join(pieces[k] for k in span).replace(WORD_BOUNDARY, "") for span in word_spans(pieces)]


def word_masses(attention: np.ndarray, src_pieces: Sequence[str], tgt_pieces: Sequence[str]) -> np.ndarray:
    """Piece matrix (T_pieces, S_pieces) -> word matrix (T_words, S_words), not renormalised:
    source piece columns of a word summed, target piece rows of a word averaged."""
    attention = np.asarray(attention, dtype=np.float64)
    if attention.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"attention has shape {attention.shape} but there are {len(tgt_pieces)} target "
            f"and {len(src_pieces)} source pieces"
        )
    by_src_word = np.stack([attention[:, span].sum(axis=1) for span in word_spans(src_pieces)], axis=1)  # (T_p, S_w)
    return target_word_means(by_src_word, tgt_pieces)  # (T_w, S_w)


def target_word_means(rows: np.ndarray, tgt_pieces: Sequence[str]) -> np.ndarray:
    """The mean of each target word's piece rows: (T_pieces, ...) -> (T_words, ...)."""
    return np.stack([np.asarray(rows)[span].mean(axis=0) for span in word_spans(tgt_pieces)], axis=0)


def aggregate_to_words(attention: np.ndarray, src_pieces: Sequence[str], tgt_pieces: Sequence[str]) -> np.ndarray:
    """Piece matrix (T_pieces, S_pieces) -> word matrix (T_words, S_words); rows sum to one.

    :func:`word_masses`, then rows renormalised (see the module docstring for why).
    """
    return normalise_rows(word_masses(attention, src_pieces, tgt_pieces))


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Divide every row by its sum; an all-zero row becomes uniform."""
    totals = matrix.sum(axis=1, keepdims=True)  # (T, 1)
    uniform = np.full_like(matrix, 1.0 / max(matrix.shape[1], 1))
    return np.where(totals > 0, matrix / np.where(totals > 0, totals, 1.0), uniform)
