"""AER, precision and recall on hand-computed cases; out-of-range gold links."""

from __future__ import annotations

import pytest

from nmt_cli.alignment.aer import score_alignments, score_files
from nmt_cli.errors import InputError
from nmt_cli.pharaoh import GoldAlignment, parse_links, read_alignments, write_alignments


def gold(text: str) -> GoldAlignment:
    return parse_links(text)


def test_perfect_alignment_has_zero_aer():
    score = score_alignments([gold("0-0 1-1"), gold("0-1")], [{(0, 0), (1, 1)}, {(0, 1)}])
    assert (score.aer, score.precision, score.recall) == (0.0, 1.0, 1.0)


def test_empty_hypothesis_has_aer_one():
    score = score_alignments([gold("0-0 1-1 2p2")], [set()])
    assert score.aer == 1.0
    assert score.precision == 0.0 and score.recall == 0.0


def test_possible_links_count_for_precision_but_not_recall():
    # S = {0-0, 1-1}, P = S + {1-2}; A = {0-0, 1-2, 2-2}
    score = score_alignments([gold("0-0 1-1 1p2")], [{(0, 0), (1, 2), (2, 2)}])
    assert score.predicted_sure == 1  # |A ∩ S|
    assert score.predicted_possible == 2  # |A ∩ P|
    assert score.precision == pytest.approx(2 / 3)
    assert score.recall == pytest.approx(1 / 2)
    assert score.aer == pytest.approx(1 - (1 + 2) / (3 + 2))


def test_links_of_target_words_the_gold_leaves_unaligned_are_counted_apart():
    # sentence 1: target word 2 has no gold link, word 1 only a possible one; sentence 2: word 0 has none
    score = score_alignments([gold("0-0 1p1"), gold("0-1")],
                             [{(0, 0), (1, 2), (0, 2), (2, 1)}, {(1, 0), (0, 1)}])
    assert score.wrong == 4  # 1-2, 0-2, 2-1 and 1-0 are not even possible
    # 1-2 and 0-2 link sentence 1's target word 2, 1-0 sentence 2's target word 0: both unaligned in the gold
    assert score.predicted_unaligned == 3
    assert "3 of the 4 wrong links are on target words the gold leaves unaligned" in score.summary()


def test_corpus_figures_sum_counts_before_dividing():
    # sentence 1: A = S = {0-0}; sentence 2: S = {0-0, 1-1, 2-2}, A = {}
    score = score_alignments([gold("0-0"), gold("0-0 1-1 2-2")], [{(0, 0)}, set()])
    assert score.recall == pytest.approx(1 / 4)  # not the mean of 1 and 0
    assert score.aer == pytest.approx(1 - 2 / 5)


def test_out_of_range_gold_links_are_reported_and_left_out():
    lengths = [(2, 2), (3, 13)]
    score = score_alignments([gold("0-0 1-1"), gold("0-0 12p16 2-16")], [{(0, 0), (1, 1)}, {(0, 0)}], lengths)
    assert score.out_of_range == 2
    assert score.out_of_range_example == "line 2: 2-16 (source 3 words, target 13 words)"
    assert score.aer == 0.0
    assert "2 gold link(s) outside their sentence" in score.summary()


def test_score_files_reads_pharaoh_and_names_mismatched_files(tmp_path):
    (tmp_path / "gold").write_text("0-0 1p1\n0-0\n", encoding="utf-8")
    (tmp_path / "hyp").write_text("0-0 1-1\n\n", encoding="utf-8")
    (tmp_path / "src").write_text("a b\nc\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("x y\nz\n", encoding="utf-8")
    score = score_files(tmp_path / "gold", tmp_path / "hyp", tmp_path / "src", tmp_path / "tgt")
    assert (score.predicted, score.sure, score.possible) == (2, 2, 3)
    assert score.aer == pytest.approx(1 - (1 + 2) / (2 + 2))
    (tmp_path / "short").write_text("0-0\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"short: has 1 lines but .*gold has 2"):
        score_files(tmp_path / "gold", tmp_path / "short")


def test_real_hansards_gold_counts_and_possible_only_hypothesis(shared_data, tmp_path):
    folder = shared_data / "gold-align" / "en-fr"
    gold = read_alignments(folder / "gold")
    assert len(gold) == 447
    assert sum(len(pair.sure) for pair in gold) == 4038  # figures from the data README
    assert sum(len(pair.possible) for pair in gold) == 17438  # all links: S ⊆ P
    sure_only = score_files(folder / "gold", folder / "gold", folder / "src", folder / "tgt")
    assert (sure_only.aer, sure_only.out_of_range) == (0.0, 0)
    possible_only = [pair.possible - pair.sure for pair in gold]
    write_alignments(tmp_path / "hyp", possible_only)
    score = score_files(folder / "gold", tmp_path / "hyp", folder / "src", folder / "tgt")
    assert score.precision == 1.0 and score.recall == 0.0
    assert score.aer == pytest.approx(1 - 13400 / (13400 + 4038))
