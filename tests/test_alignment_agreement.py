"""Readings chosen by agreement between directions: the ranking, each direction read its own
way by the Aligner, ``nmt align --agree-heads`` and the bootstrap's first-stage links."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from nmt_cli.alignment.agreement import (AgreedReadings, agreed_options, agreeing_aligner,
                                         agreed_readings, rank_by_agreement)
from nmt_cli.alignment.api import Aligner, AlignOptions
from nmt_cli.alignment.model import AlignmentModel
from nmt_cli.alignment.reader import AttentionReading, HeadSelection
from nmt_cli.alignment.sweep import DirectionReading, candidate_selections
from nmt_cli.checkpoint import save_checkpoint
from nmt_cli.cli import cli
from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.models import build_model

SRC = ["der hund schläft", "die katze", "ein kleiner hund läuft schnell"]
TGT = ["the dog sleeps", "the cat", "a small dog runs fast"]
TINY = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
        "model.decoder_layers": 2, "model.dropout": 0.0}


def _reading(layer, head, shift=False):
    return DirectionReading(HeadSelection(layer, None if head is None else (head,)), shift)


def test_the_readings_whose_links_match_rank_first():
    diagonal, crossed = _reading(0, 0), _reading(0, 1)
    back_diagonal, back_sparse = _reading(1, 0, True), _reading(1, None)
    forward = {diagonal: [{(0, 0), (1, 1)}, {(0, 0)}], crossed: [{(0, 1), (1, 1)}, {(0, 0)}]}
    reverse = {back_diagonal: [{(0, 0), (1, 1)}, {(0, 0)}], back_sparse: [{(1, 0)}, set()]}
    ranked = rank_by_agreement(forward, reverse)
    assert [(choice.forward, choice.reverse) for choice in ranked] == [
        (diagonal, back_diagonal), (crossed, back_diagonal), (diagonal, back_sparse), (crossed, back_sparse)]
    # Dice of the link sets over all pairs: 2 |F & R| / (|F| + |R|)
    assert [choice.agreement for choice in ranked] == pytest.approx([1.0, 2 * 2 / 6, 0.0, 0.0])
    assert rank_by_agreement({diagonal: [set()]}, {back_sparse: [set()]})[0].agreement == 0.0
    assert ranked[0].describe() == ("forward layer=0 heads=0 shift=off, reverse layer=1 heads=0 shift=on "
                                    "(agreement 1.0000)")


@pytest.fixture
def plain_pair(tiny_prepared, tmp_path):
    """Two untrained models of opposite directions (random heads disagree in many ways)."""
    data = PreparedData(tiny_prepared)
    paths = []
    for name in ("forward", "reverse"):
        config = Config().with_overrides(TINY)
        torch.manual_seed(len(paths))
        model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True)
        paths.append(save_checkpoint(tmp_path / name, model.state_dict(), config, data.tokenizer, {"step": 1}))
    return paths


def _links(checkpoint, reading: DirectionReading, src, tgt):
    options = AlignOptions(reading=AttentionReading(reading.selection), shift=reading.shift)
    return [set(sentence.links) for sentence in Aligner(checkpoint, options).align(src, tgt)]


def test_every_reading_of_both_directions_is_ranked_by_the_dice_of_their_links(plain_pair):
    forward_path, reverse_path = plain_pair
    forward, reverse = AlignmentModel(forward_path), AlignmentModel(reverse_path)
    ranked = agreed_readings(forward, reverse, SRC, TGT)
    per_direction = 2 * len(candidate_selections(*forward.layers_and_heads))  # shift off and on
    assert len(ranked) == per_direction ** 2 == (2 * (2 * 2 + 2 + 1)) ** 2
    agreements = [choice.agreement for choice in ranked]
    assert agreements == sorted(agreements, reverse=True) and 0 <= agreements[-1] <= agreements[0] <= 1
    # the best pair's agreement is what the two models read that way give, one by one
    best = ranked[0]
    links = _links(forward_path, best.forward, SRC, TGT)
    back = [{(i, j) for j, i in sentence} for sentence in _links(reverse_path, best.reverse, TGT, SRC)]
    dice = 2 * sum(len(a & b) for a, b in zip(links, back)) / sum(len(a) + len(b) for a, b in zip(links, back))
    assert best.agreement == pytest.approx(dice)


def test_each_direction_is_read_the_way_the_choice_says(plain_pair):
    forward_path, reverse_path = plain_pair
    choice = AgreedReadings(_reading(0, 1, shift=True), _reading(-1, None), 0.5)
    options = agreed_options(AlignOptions(symmetrization="intersection"), choice)
    aligner = Aligner(forward_path, options, "cpu", reverse_path)
    settings = aligner.settings
    assert (settings["selection"], settings["shift"]) == ("layer=0 heads=1", True)
    assert (settings["reverse_selection"], settings["reverse_shift"]) == ("layer=-1 heads=all", False)
    # the intersection of the two directions read alone so
    links = _links(forward_path, choice.forward, SRC, TGT)
    back = [{(i, j) for j, i in sentence} for sentence in _links(reverse_path, choice.reverse, TGT, SRC)]
    assert [set(sentence.links) for sentence in aligner.align(SRC, TGT)] == [a & b for a, b in zip(links, back)]
    # without a reverse reading, both directions are read alike (as before)
    alike = Aligner(forward_path, AlignOptions(reading=AttentionReading(HeadSelection(0, (1,)))), "cpu", reverse_path)
    assert alike.settings["reverse_selection"] == "layer=0 heads=1"


def test_the_agreeing_aligner_loads_each_model_once_and_reads_the_best_pair(plain_pair, monkeypatch):
    forward_path, reverse_path = plain_pair
    expected = agreed_readings(AlignmentModel(forward_path), AlignmentModel(reverse_path), SRC, TGT)
    loaded = []
    load = AlignmentModel.__init__

    def counting_load(self, path, *args, **kwargs):
        loaded.append(path)
        load(self, path, *args, **kwargs)

    monkeypatch.setattr(AlignmentModel, "__init__", counting_load)
    options = AlignOptions(symmetrization="intersection")
    aligner, ranked = agreeing_aligner(options, forward_path, reverse_path, SRC, TGT)
    assert loaded == [forward_path, reverse_path]
    assert ranked == expected
    by_paths = Aligner(forward_path, agreed_options(options, ranked[0]), "cpu", reverse_path)
    assert aligner.settings == by_paths.settings
    assert [s.links for s in aligner.align(SRC, TGT)] == [s.links for s in by_paths.align(SRC, TGT)]


def test_nmt_align_agree_heads_reads_the_most_agreeing_pair(plain_pair, tmp_path):
    forward_path, reverse_path = plain_pair
    src, tgt = tmp_path / "src.de", tmp_path / "tgt.en"
    src.write_text("\n".join(SRC) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(TGT) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["align", "--checkpoint", str(forward_path), "--reverse-checkpoint",
                                      str(reverse_path), "--agree-heads", "--src", str(src), "--tgt", str(tgt),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    _, (best, *_) = agreeing_aligner(AlignOptions(), forward_path, reverse_path, SRC, TGT)
    assert f"agreed readings: {best.describe()}" in result.output
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    assert settings["selection"] == best.forward.selection.describe()
    assert settings["reverse_selection"] == best.reverse.selection.describe()
    assert (settings["shift"], settings["reverse_shift"]) == (best.forward.shift, best.reverse.shift)


@pytest.mark.parametrize("extra, problem", [
    ([], "--agree-heads needs one --checkpoint and one --reverse-checkpoint"),
    (["--reverse-checkpoint", "R", "--reverse-checkpoint", "R2"], "--agree-heads needs one --checkpoint"),
    (["--reverse-checkpoint", "R", "--layer", "0"], "leave out --layer, --heads and --shift"),
    (["--reverse-checkpoint", "R", "--shift"], "leave out --layer, --heads and --shift"),
])
def test_agree_heads_refuses_what_it_cannot_choose_for(tmp_path, extra, problem):
    src = tmp_path / "src.de"
    src.write_text("der hund\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["align", "--checkpoint", "F", "--agree-heads", "--src", str(src), "--tgt",
                                      str(src), "--out", str(tmp_path / "out"), *extra])
    assert result.exit_code == 2 and problem in result.output
    assert not (tmp_path / "out").exists()
