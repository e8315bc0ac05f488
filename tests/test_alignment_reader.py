"""The one alignment reader: selected piece attention -> words, soft word matrix, links."""

from __future__ import annotations

import numpy as np
import pytest

from nmt_cli.alignment.reader import AttentionReading, HeadSelection, read_alignment
from nmt_cli.config import Config
from nmt_cli.errors import NmtError

B = "\u2581"


def test_pieces_become_words_and_every_target_word_gets_its_best_source_word():
    src = [f"{B}das", f"{B}hau", "s"]
    tgt = [f"{B}the", f"{B}house"]
    attention = np.array([[0.7, 0.2, 0.1],
                          [0.1, 0.3, 0.6]])  # (T, S) pieces
    aligned = read_alignment(src, tgt, attention, AttentionReading())
    assert (aligned.src_words, aligned.tgt_words) == (["das", "haus"], ["the", "house"])
    np.testing.assert_allclose(aligned.matrix, [[0.7, 0.3], [0.1, 0.9]])
    assert aligned.links == [(0, 0), (1, 1)]
    loose = read_alignment(src, tgt, attention, AttentionReading(method="threshold", threshold=0.25))
    assert loose.links == [(0, 0), (1, 0), (1, 1)]


def test_an_empty_side_gives_no_links_and_an_empty_matrix():
    aligned = read_alignment([], [f"{B}x", f"{B}y"], None, AttentionReading())
    assert aligned.links == [] and aligned.matrix.shape == (2, 0) and aligned.src_words == []


def test_an_unknown_method_is_refused():
    with pytest.raises(NmtError, match="unknown alignment method 'mean'"):
        AttentionReading(method="mean")


def test_the_default_reading_of_a_model_without_guided_alignment_is_the_last_layer_with_its_heads_averaged():
    attention = np.arange(2 * 3 * 1 * 2, dtype=float).reshape(2, 3, 1, 2)  # (L, H, T, S)
    default = AttentionReading().for_model(Config())
    np.testing.assert_allclose(default.selection.apply(attention), attention[-1].mean(axis=0))
    assert HeadSelection.parse("-1", "all") == default.selection == AttentionReading().for_model(None).selection
