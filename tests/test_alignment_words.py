"""Pieces -> words: spans, word texts and the aggregation of attention matrices."""

from __future__ import annotations

import numpy as np
import pytest

from nmt_cli.alignment.words import aggregate_to_words, word_spans, words_from_pieces

B = "\u2581"


def test_word_spans_follow_the_word_start_marker():
    pieces = [f"{B}the", f"{B}ca", "t", f"{B}", "2", f"{B}sat"]
    assert word_spans(pieces) == [range(0, 1), range(1, 3), range(3, 5), range(5, 6)]
    assert words_from_pieces(pieces) == ["the", "cat", "2", "sat"]


def test_first_piece_starts_a_word_even_without_marker():
    assert words_from_pieces(["ab", "c", f"{B}d"]) == ["abc", "d"]
    assert word_spans([]) == []


def test_aggregation_sums_source_pieces_and_averages_target_pieces():
    src = [f"{B}la", f"{B}mai", "son"]  # words: la | maison
    tgt = [f"{B}the", f"{B}hou", "se"]  # words: the | house
    attention = np.array(
        [
            [0.8, 0.1, 0.1],
            [0.0, 0.6, 0.4],
            [0.2, 0.2, 0.6],
        ]
    )
    words = aggregate_to_words(attention, src, tgt)
    # "the": (0.8, 0.1 + 0.1); "house": mean of (0.0, 1.0) and (0.2, 0.8)
    np.testing.assert_allclose(words, [[0.8, 0.2], [0.1, 0.9]])


def test_rows_are_renormalised_when_pieces_do_not_sum_to_one():
    src = [f"{B}a", f"{B}b"]
    tgt = [f"{B}x", f"{B}y"]
    attention = np.array([[0.2, 0.2], [0.0, 0.0]])  # a dropped EOS column, an empty row
    words = aggregate_to_words(attention, src, tgt)
    np.testing.assert_allclose(words.sum(axis=1), [1.0, 1.0])
    np.testing.assert_allclose(words, [[0.5, 0.5], [0.5, 0.5]])


def test_aggregation_rejects_a_shape_that_does_not_match_the_pieces():
    with pytest.raises(ValueError, match="2 target and 3 source pieces"):
        aggregate_to_words(np.ones((3, 3)), ["a", "b", "c"], ["x", "y"])
