"""``bench/time_to_quality.py``'s choices, on made-up runs: which checkpoint stands for a budget,
when a learning curve reaches a BLEU, and which outputs count as at each toolkit's length limit
(the runs themselves: ``test_bench_quick.py``)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from time_to_quality import (PEER_RECIPES, Arm, SeedRun, TrainedRun, arms_for,  # noqa: E402
                             checkpoint_for, describe_recipe, figure_path, length_limits, nmt_cli_recipe,
                             reach_note, time_to_reach, warmup_note)
from translate_speed import Quality, text_quality  # noqa: E402  (bench/ is not a package)

from nmt_cli.config import DecodeConfig, load_config  # noqa: E402


def test_a_budget_takes_the_last_checkpoint_dated_at_or_before_it() -> None:
    # progress every 50 updates, a checkpoint every 100; one more (230) saved on SIGTERM with no line of its own
    run = TrainedRun(progress=[(50, 20.0, 1e4), (100, 31.0, 1e4), (150, 44.0, 1e4), (200, 60.0, 1e4)],
                     checkpoints={100: "c100", 200: "c200", 230: "c230"}, parameters=None, settings={},
                     load_average=[0.0, 0.0, 0.0])
    dated = run.dated_checkpoints()
    assert dated == {100: 31.0, 200: 60.0}  # 230 has no progress line: undated, never chosen
    assert checkpoint_for(dated, 30.9) is None  # no checkpoint yet
    assert checkpoint_for(dated, 31.0) == 100  # dated exactly at the budget: counts
    assert checkpoint_for(dated, 59.9) == 100
    assert checkpoint_for(dated, 60.0) == checkpoint_for(dated, 600.0) == 200
    assert run.tokens_until(100) == 2e4 and run.tokens_until(200) == 4e4


def test_a_run_recorded_as_json_reads_back_with_its_updates_as_numbers(tmp_path: Path) -> None:
    record = tmp_path / "trained.json"
    record.write_text('{"progress": [[100, 31.0, 10000.0]], "checkpoints": {"100": "c100"}, "parameters": 7, '
                      '"settings": {"save_every": 100}, "load_average": [1.0, 2.0, 3.0]}')
    run = TrainedRun.load(record)
    assert run.dated_checkpoints() == {100: 31.0} and run.checkpoints == {100: "c100"}
    assert run.settings == {"save_every": 100} and run.parameters == 7


def test_the_time_to_a_bleu_is_interpolated_between_the_checkpoints_that_straddle_it() -> None:
    curve = [(300.0, 10.0), (120.0, 4.0), (600.0, 16.0), (900.0, 15.0)]  # out of order, and a dip at the end
    assert time_to_reach(curve, 13.0) == pytest.approx(450.0)  # halfway from (300, 10) to (600, 16)
    assert time_to_reach(curve, 10.0) == 300.0  # reached exactly at a checkpoint
    assert time_to_reach(curve, 2.0) == pytest.approx(60.0)  # before the first checkpoint: from BLEU 0 at 0 s
    assert time_to_reach(curve, 15.5) == pytest.approx(575.0)  # the first crossing, not the later point
    assert time_to_reach(curve, 16.5) is None  # never reached
    assert time_to_reach([(60.0, 0.0), (120.0, 0.0)], 0.0) == 0.0  # a peer at BLEU 0: reached before any update


def test_each_toolkit_is_held_to_its_own_length_limit() -> None:
    sources = [1, 7, 40, 300]
    ours = Arm("nmt-cli", None, nmt_cli_recipe(PEER_RECIPES["tiny", "fairseq"].spec))
    decode = DecodeConfig()  # nmt translate's rule: floor(a * |x| + b)
    assert length_limits(ours, sources) == [math.floor(decode.max_len_a * n + decode.max_len_b) for n in sources]
    assert length_limits(Arm("fairseq", None, PEER_RECIPES["tiny", "fairseq"], "fairseq"), sources) == [200] * 4
    opennmt = Arm("OpenNMT-py", None, PEER_RECIPES["tiny", "opennmt"], "opennmt")
    assert length_limits(opennmt, sources) == [6, 13, 55, 250]


def test_the_share_at_the_limit_compares_each_output_with_its_own_sentence_limit() -> None:
    texts = ["the cat sat on the mat today", "a dog ran in the park", "birds sing"]
    references = ["the cat sat on the mat today", "a dog ran in the big park", "birds sing loudly"]
    measured = text_quality(texts, [2, 3, 1], references, [2, 10, 1])  # the first and the last hit theirs
    assert measured.at_limit == pytest.approx(2 / 3)
    assert text_quality(texts, [2, 3, 1], references, 3).at_limit == pytest.approx(1 / 3)  # one limit for all
    assert 0 < measured.bleu < 100 and 0 < measured.chrf < 100
    with pytest.raises(ValueError, match="2 length limits for 3 outputs"):
        text_quality(texts, [2, 3, 1], references, [2, 10])


def _seed_run(bleu_by_update: dict[int, float], seconds_per_update: float) -> SeedRun:
    """A run with a progress line and an evaluated checkpoint every 100 updates."""
    updates = sorted(bleu_by_update)
    run = TrainedRun(progress=[(update, update * seconds_per_update, 1e4) for update in updates],
                     checkpoints={update: f"c{update}" for update in updates}, parameters=None, settings={},
                     load_average=[0.0, 0.0, 0.0])
    return SeedRun(run, {update: Quality(bleu, 0.0, 0.0) for update, bleu in bleu_by_update.items()})


OURS_POST = Arm("nmt-cli", None, nmt_cli_recipe(PEER_RECIPES["tiny", "fairseq"].spec))
FAIRSEQ = Arm("fairseq", None, PEER_RECIPES["tiny", "fairseq"], "fairseq")


def test_the_time_to_a_peers_bleu_is_given_in_minutes_and_as_a_share_of_the_budget() -> None:
    ours = _seed_run({100: 2.0, 200: 6.0, 300: 9.0}, seconds_per_update=1.0)  # 6.0 at 200 s
    peer = _seed_run({100: 1.0, 200: 6.0}, seconds_per_update=2.0)  # 6.0 at 400 s, the 400-second budget
    note = reach_note(FAIRSEQ, [peer], OURS_POST, [ours], largest=400 / 60)
    assert "fairseq's 6.66667-minute BLEU (6.00)" in note
    assert "reached it after 3.33 minutes, 50% of the budget" in note


def test_no_time_is_given_to_reach_a_peer_that_does_not_translate_yet() -> None:
    ours = _seed_run({100: 2.0, 200: 6.0}, seconds_per_update=1.0)
    peer = _seed_run({100: 0.0, 200: 0.4}, seconds_per_update=1.0)
    note = reach_note(FAIRSEQ, [peer], OURS_POST, [ours], largest=200 / 60)
    assert "(0.40): not given" in note and "reached it" not in note


def test_the_warmup_note_says_when_every_run_ended_within_its_warmup() -> None:
    arms = [OURS_POST, FAIRSEQ]  # both recipes warm up over 4,000 updates
    short = {OURS_POST.name: [_seed_run({1300: 12.0}, 1.0)], FAIRSEQ.name: [_seed_run({800: 3.7}, 1.0)]}
    note = warmup_note(arms, short)
    assert "nmt-cli post-norm 1,300 of 4,000; fairseq post-norm 800 of 4,000" in note
    assert "every run ended within its warm-up" in note
    long = {**short, OURS_POST.name: [_seed_run({4100: 20.0}, 1.0)]}
    assert "every run ended within" not in warmup_note(arms, long)


@pytest.mark.parametrize("has_bf16_units, precision, figure", [(True, "bf16", "time_to_quality-bf16.png"),
                                                                (False, "fp32", "time_to_quality.png")])
def test_nmt_cli_trains_at_its_default_precision_for_this_cpu_with_a_figure_of_its_own(
        monkeypatch: pytest.MonkeyPatch, has_bf16_units: bool, precision: str, figure: str) -> None:
    # train.precision auto: bf16 for a Transformer where the CPU has bf16 units; the peers stay fp32
    monkeypatch.setattr("nmt_cli.precision.cpu_has_native_bf16", lambda: has_bf16_units)
    recipe = nmt_cli_recipe(PEER_RECIPES["tiny", "fairseq"].spec)
    assert recipe.train.precision == precision
    assert f"train.precision auto is {precision} on this CPU" in recipe.source
    assert describe_recipe(recipe).endswith(f", {precision}")
    assert all(peer.train.precision == "fp32" for peer in PEER_RECIPES.values())
    args = argparse.Namespace(figure=None, quick=False, json=None, work=Path("w"))
    assert figure_path(args, recipe.train.precision, ["tiny"]).name == figure


def test_each_rnn_is_paired_with_the_peer_that_has_its_attention() -> None:
    runners = {"opennmt": "opennmt runner", "fairseq": "fairseq runner"}
    arms = arms_for(runners, ["tiny", "rnn"])
    assert [(arm.label, arm.architecture) for arm in arms] == [
        ("nmt-cli", "pre-norm"), ("OpenNMT-py 3.5.1", "pre-norm"), ("nmt-cli", "post-norm"),
        ("fairseq-fixed 0.12.3.1", "post-norm"), ("nmt-cli", "Bahdanau RNN"), ("OpenNMT-py 3.5.1", "Bahdanau RNN"),
        ("nmt-cli", "Luong RNN"), ("fairseq-fixed 0.12.3.1", "Luong RNN")]
    for ours, peer in zip(arms[::2], arms[1::2]):  # the same shape, each toolkit's own settings
        assert ours.recipe.spec.describe() == peer.recipe.spec.describe() and ours.peer is None
    assert len({arm.folder for arm in arms}) == len(arms)  # every run has a folder of its own
    alone = arms_for({}, ["rnn"])  # no peer: nmt-cli in the architecture of the first peer, OpenNMT-py's
    assert [(arm.label, arm.architecture, arm.peer) for arm in alone] == [("nmt-cli", "Bahdanau RNN", None)]


def test_nmt_clis_rnn_trains_with_its_multi30k_recipes_settings_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nmt_cli.precision.cpu_has_native_bf16", lambda: True)  # only the Transformer takes bf16
    recipe = nmt_cli_recipe(PEER_RECIPES["rnn", "opennmt"].spec)
    written = load_config(REPO / "recipes" / "multi30k-rnn-bahdanau.yaml")
    assert written.train.schedule == "plateau"  # halved only after a validation, which a timed run never makes
    train = recipe.train
    assert (train.optimizer, train.schedule, train.warmup) == (written.train.optimizer, "constant", 0)
    assert (train.lr, train.clip_norm, train.label_smoothing) == (
        written.train.lr, written.train.clip_norm, written.train.label_smoothing)
    assert recipe.spec.dropout == written.model.dropout and recipe.spec.cell == "lstm"  # the peers' shape
    assert train.precision == "fp32" and "recipes/multi30k-rnn-bahdanau.yaml" in recipe.source
    assert "lr 1.00e-03 throughout" in describe_recipe(recipe) and "warm-up" not in describe_recipe(recipe)
    luong = nmt_cli_recipe(PEER_RECIPES["rnn", "fairseq"].spec)
    assert luong.spec.attention == "general" and "multi30k-rnn-luong-local-p.yaml" in luong.source
    opennmt = PEER_RECIPES["rnn", "opennmt"].train  # onmt_train's defaults
    assert (opennmt.optimizer, opennmt.schedule, opennmt.lr, opennmt.clip_norm) == ("sgd", "constant", 1.0, 5.0)
    assert describe_recipe(PEER_RECIPES["rnn", "opennmt"]).split(": ", 1)[1].startswith(
        "sgd, lr 1.00e+00 throughout, loss per sentence")
    # its documented Transformer settings divide by target tokens, as nmt-cli's recipes do
    assert ", loss per target token," in describe_recipe(PEER_RECIPES["tiny", "opennmt"])
    assert ", loss per target token," in describe_recipe(recipe)
    args = argparse.Namespace(figure=None, quick=False, json=None, work=Path("w"))
    assert figure_path(args, "fp32", ["rnn"]).name == "time_to_quality-rnn.png"
    assert figure_path(args, "bf16", ["tiny", "rnn"]).name == "time_to_quality-tiny-rnn-bf16.png"


def test_the_warmup_note_leaves_out_runs_with_no_warmup() -> None:
    ours = Arm("nmt-cli", None, nmt_cli_recipe(PEER_RECIPES["rnn", "opennmt"].spec))
    peer = Arm("OpenNMT-py", None, PEER_RECIPES["rnn", "opennmt"], "opennmt")
    runs = {ours.name: [_seed_run({900: 10.0}, 1.0)], peer.name: [_seed_run({700: 5.0}, 1.0)]}
    assert warmup_note([ours, peer], runs) is None  # both constant: no warm-up to speak of
    fairseq = Arm("fairseq", None, PEER_RECIPES["rnn", "fairseq"], "fairseq")
    note = warmup_note([ours, fairseq], {**runs, fairseq.name: [_seed_run({800: 3.0}, 1.0)]})
    assert "fairseq Luong RNN 800 of 4,000 (each of these ended within its warm-up" in note
    assert note.endswith("; with no warm-up, at a constant learning rate: nmt-cli Bahdanau RNN")
