"""Word alignment of one translation as the service returns it: Pharaoh links and the soft matrix."""

from __future__ import annotations

from dataclasses import dataclass

from nmt_cli.alignment.pharaoh import format_links
from nmt_cli.alignment.words import aggregate_to_words, word_alignment, words_from_pieces
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.tokenization import Tokenizer

__all__ = ["WordAlignment", "hypothesis_alignment"]


@dataclass(frozen=True)
class WordAlignment:
    """``links`` as ``nmt translate --alignments`` writes them; ``matrix[target word][source word]``, rows sum to 1."""

    links: str
    source_words: list[str]
    target_words: list[str]
    matrix: list[list[float]]


def hypothesis_alignment(source: str, hypothesis: Hypothesis, tokenizer: Tokenizer) -> WordAlignment:
    """Word links and soft word alignment between ``source`` and its translation, from the attention.

    The links are those of ``nmt translate --alignments``; the matrix is the piece attention
    aggregated to words (:func:`nmt_cli.alignment.words.aggregate_to_words`).
    """
    src_pieces = tokenizer.src_pieces(tokenizer.encode_src(source))
    tgt_pieces = tokenizer.tgt_pieces(hypothesis.tokens)
    if hypothesis.attention is None or not src_pieces or not tgt_pieces:
        return WordAlignment("", words_from_pieces(src_pieces), words_from_pieces(tgt_pieces), [])
    attention = hypothesis.attention[: len(tgt_pieces), : len(src_pieces)]
    matrix = aggregate_to_words(attention, src_pieces, tgt_pieces)
    return WordAlignment(
        links=format_links(word_alignment(src_pieces, tgt_pieces, hypothesis.attention)),
        source_words=words_from_pieces(src_pieces),
        target_words=words_from_pieces(tgt_pieces),
        matrix=[[round(float(weight), 4) for weight in row] for row in matrix],
    )
