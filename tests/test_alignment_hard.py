"""Hard links, the Pharaoh format and symmetrization on hand cases."""

from __future__ import annotations

import numpy as np
import pytest

from nmt_cli.alignment.hard import argmax_links, hard_links, threshold_links
from nmt_cli.alignment.symmetrize import average_links, describe, symmetrize
from nmt_cli.errors import InputError
from nmt_cli.pharaoh import format_links, parse_links, read_alignments, write_alignments, write_reversed_alignments

MATRIX = np.array(  # target words x source words
    [
        [0.1, 0.7, 0.2],
        [0.6, 0.3, 0.1],
    ]
)


def test_argmax_links_one_per_target_word():
    assert argmax_links(MATRIX) == [(0, 1), (1, 0)]


def test_threshold_links_may_give_several_or_no_links():
    assert threshold_links(MATRIX, 0.25) == [(0, 1), (1, 0), (1, 1)]
    assert threshold_links(MATRIX, 0.9) == []
    assert hard_links(MATRIX, "threshold", 0.65) == [(1, 0)]
    with pytest.raises(ValueError, match="argmax, threshold"):
        hard_links(MATRIX, "max")


def test_pharaoh_round_trip(tmp_path):
    sentences = [[(2, 0), (0, 1)], [], [(10, 3)]]
    write_alignments(tmp_path / "a.align", sentences)
    assert (tmp_path / "a.align").read_text() == "0-1 2-0\n\n10-3\n"
    assert [sorted(pair.sure) for pair in read_alignments(tmp_path / "a.align")] == [sorted(s) for s in sentences]


def test_pharaoh_reader_accepts_possible_links_both_ways():
    pair = parse_links("0-0 1p2 3?4")
    assert pair.sure == {(0, 0)}
    assert pair.possible == {(0, 0), (1, 2), (3, 4)}
    assert format_links(pair.sure, pair.possible) == "0-0 1p2 3p4"


def test_pharaoh_reader_names_file_and_line(tmp_path):
    (tmp_path / "bad").write_text("0-0\n1-x\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad:2: bad alignment link '1-x'"):
        read_alignments(tmp_path / "bad")


FORWARD = {(0, 0), (1, 1), (2, 1)}
REVERSE = {(0, 0), (1, 1), (1, 2), (3, 3)}


def test_intersection_and_union():
    assert symmetrize(FORWARD, REVERSE, "intersection", 4, 4) == [(0, 0), (1, 1)]
    assert symmetrize(FORWARD, REVERSE, "union", 4, 4) == [(0, 0), (1, 1), (1, 2), (2, 1), (3, 3)]


def test_grow_diag_adds_neighbours_of_the_intersection_with_a_free_word():
    # (2,1) and (1,2) neighbour (1,1) and each has one unaligned word; (3,3) is isolated.
    assert symmetrize(FORWARD, REVERSE, "grow-diag", 4, 4) == [(0, 0), (1, 1), (1, 2), (2, 1)]


def test_grow_diag_final_adds_isolated_links_with_an_unaligned_word():
    assert symmetrize(FORWARD, REVERSE, "grow-diag-final", 4, 4) == [(0, 0), (1, 1), (1, 2), (2, 1), (3, 3)]


def test_final_and_needs_both_words_unaligned():
    forward = {(0, 0), (2, 2)}
    reverse = {(0, 0), (0, 2)}
    # no neighbours grow; (2,2): both words free -> added by forward's final step;
    # then (0,2): source 0 aligned and target 2 aligned -> not added by either variant.
    assert symmetrize(forward, reverse, "grow-diag-final-and", 3, 3) == [(0, 0), (2, 2)]
    assert symmetrize(forward, reverse, "grow-diag-final", 3, 3) == [(0, 0), (2, 2)]
    # with the reverse direction first in line for (0,2): "or" admits it, "and" does not
    forward, reverse = {(0, 0)}, {(0, 0), (0, 2)}
    assert symmetrize(forward, reverse, "grow-diag-final", 3, 3) == [(0, 0), (0, 2)]
    assert symmetrize(forward, reverse, "grow-diag-final-and", 3, 3) == [(0, 0)]


def test_unknown_symmetrization_lists_the_choices():
    with pytest.raises(ValueError, match="grow-diag-final-and"):
        symmetrize(FORWARD, REVERSE, "diagonal", 4, 4)


def test_average_links_keep_pairs_whose_mean_weight_passes_the_threshold():
    forward = np.array([[0.8, 0.2, 0.0],  # target word 0 -> source 0
                        [0.0, 0.5, 0.1]])  # target word 1: 0.4 of its weight on a null
    reverse = np.array([[0.9, 0.1],  # source word 0 -> target 0
                        [0.1, 0.3],  # source word 1: unsure
                        [0.0, 0.9]])  # source word 2 -> target 1, which forward barely supports
    # means (source x target): [[0.85, 0.05], [0.15, 0.4], [0.0, 0.5]]
    assert average_links(forward, reverse, 0.4) == [(0, 0), (2, 1)]
    assert average_links(forward, reverse, 0.3) == [(0, 0), (1, 1), (2, 1)]
    assert average_links(forward, reverse, 0.9) == []
    with pytest.raises(ValueError, match="do not transpose"):
        average_links(forward, reverse.T, 0.4)
    # how the CLI's summary line and the bench's rows name it
    assert describe("average", 0.4) == "average > 0.4" and describe("grow-diag-final", None) == "grow-diag-final"


def test_reversed_alignments_turn_every_sure_link_of_every_line(tmp_path):
    source = tmp_path / "train.align"
    source.write_text("0-1 2p2 1-2\n\n3-0\n", encoding="utf-8")
    write_reversed_alignments(source, tmp_path / "reverse.align")
    # line for line, each sure link i-j as j-i; possible-only links are not links to learn
    assert (tmp_path / "reverse.align").read_text(encoding="utf-8") == "1-0 2-1\n\n0-3\n"
