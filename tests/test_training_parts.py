"""The parts the training loop is built from, each on its own: state, early stopping,
the updater, the objective and the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt_cli.config import Config, TrainConfig
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import NmtError
from nmt_cli.models import build_model
from nmt_cli.precision import Precision
from nmt_cli.training.batching import collate, make_batches
from nmt_cli.training.distributed import DistributedContext
from nmt_cli.training.loss import label_smoothed_cross_entropy
from nmt_cli.training.meter import IntervalMeter
from nmt_cli.training.objectives.cross_entropy import CrossEntropyObjective
from nmt_cli.training.run_dir import RUN_OUTPUTS, RunDirectory
from nmt_cli.training.state import TrainingState
from nmt_cli.training.trainer import Trainer
from nmt_cli.training.updater import Updater
from nmt_cli.training.validation import EarlyStopping
from tests.test_trainer import QUICK, TINY_TRANSFORMER

SAVED = {"step": 40, "validations": [{"step": 20, "loss": 2.0}], "best": {"step": 20, "metric": "loss", "value": 2.0},
         "bad_validations": 1, "elapsed_seconds": 12.5, "data_position": {"epoch": 3, "batch": 10},
         "world_size": 2, "interval": {"tokens": 7}}


def test_state_round_trips_and_keeps_the_epoch_share_on_another_world_size():
    same = TrainingState.from_checkpoint(SAVED, world_size=2)
    assert same.step == 40 and same.position == {"epoch": 3, "batch": 10} and same.last_validated == 20
    saved = same.to_checkpoint(elapsed=13.0, position={"epoch": 3, "batch": 10}, interval={"tokens": 7},
                               world_size=2, schedule={}, rng=[], prepared=Path("data"))
    assert TrainingState.from_checkpoint(saved, world_size=2) == \
        TrainingState(40, SAVED["validations"], SAVED["best"], 1, 13.0, {"epoch": 3, "batch": 10}, {"tokens": 7})
    assert TrainingState.from_checkpoint(SAVED, world_size=4).position == {"epoch": 3, "batch": 5}
    assert TrainingState().last_validated == -1


def test_an_older_checkpoints_interval_names_guided_alignments_sum():
    old = {**SAVED, "interval": {"loss_sum": 5.0, "nll_sum": 4.0, "alignment_sum": 3.0, "tokens": 7, "seconds": 1.0}}
    interval = TrainingState.from_checkpoint(old, world_size=2).interval
    assert interval == {"loss_sum": 5.0, "nll_sum": 4.0, "tokens": 7, "seconds": 1.0, "terms": {"align_loss": 3.0}}
    meter = IntervalMeter(DistributedContext(), ("align_loss",), interval)
    assert meter.take()["terms"] == {"align_loss": 3.0}


def test_early_stopping_tracks_the_best_and_counts_patience():
    stopping = EarlyStopping(TrainConfig(early_stop_metric="loss", patience=2, valid_bleu=False))
    state = TrainingState()
    assert stopping.record(state, {"step": 1, "loss": 3.0})
    assert not stopping.record(state, {"step": 2, "loss": 3.0})  # a tie is no improvement
    assert not stopping.exhausted(state)
    assert not stopping.record(state, {"step": 3, "loss": 3.5})
    assert stopping.exhausted(state) and state.best == {"step": 1, "metric": "loss", "value": 3.0}
    bleu = EarlyStopping(TrainConfig())
    assert (bleu.metric, bleu.mode, bleu.is_better(30.0, 29.0), bleu.is_better(29.0, 30.0)) == ("bleu", "max", True,
                                                                                                 False)


def test_updater_steps_the_schedule_and_restores_its_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    cfg = TrainConfig(warmup_steps=4, lr=1e-2)
    updater = Updater(model, cfg, Precision("fp32", torch.device("cpu")), "min")
    assert updater.learning_rate == 1e-2 / 4  # update 1 of a 4-update warm-up
    updater.backward(model(torch.ones(1, 3)).sum())
    assert updater.step() and updater.learning_rate == 1e-2 * 2 / 4
    assert all(p.grad is None for p in model.parameters())
    saved, schedule = updater.state()
    other = Updater(torch.nn.Linear(3, 2), cfg, Precision("fp32", torch.device("cpu")), "min")
    other.restore(saved, schedule)
    assert other.learning_rate == updater.learning_rate
    assert other.optimizer.state_dict()["state"][0]["step"] == 1


def test_the_objective_is_the_smoothed_loss_of_the_model_features(tiny_prepared):
    data = PreparedData(tiny_prepared)
    config = Config().with_overrides({**QUICK, **TINY_TRANSFORMER})
    model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True).eval()
    split = data.split("train")
    batch = collate(split, make_batches(split.src.lengths, split.tgt.lengths, 200)[0])
    terms = CrossEntropyObjective(0.1)(model, model, batch)
    features, _ = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, features_only=True)
    loss, nll = label_smoothed_cross_entropy(features, model.output_layer(), batch.tgt_out, batch.tgt_mask, 0.1)
    torch.testing.assert_close((terms.loss, terms.nll), (loss, nll))


def test_restart_clears_only_the_run_outputs(tmp_path):
    run = RunDirectory(tmp_path)
    for name in RUN_OUTPUTS:
        (tmp_path / name).mkdir() if name in ("checkpoints", "tensorboard") else (tmp_path / name).write_text("x")
    (tmp_path / "notes.txt").write_text("mine")
    run.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert run.resume_point() is None


def test_building_a_trainer_writes_no_file(tiny_prepared, tmp_path):
    config = Config().with_overrides({**QUICK, **TINY_TRANSFORMER})
    run_dir = tmp_path / "run"
    Trainer(config, PreparedData(tiny_prepared), RunDirectory(run_dir), DistributedContext())
    assert not run_dir.exists()


def test_validating_without_a_validation_split_fails_at_start(tmp_path):
    config = Config().with_overrides({"data.synthetic_train_size": 50, "data.synthetic_valid_size": 0,
                                      "data.synthetic_test_size": 0, "data.vocab_size": 100})
    prepare(config, tmp_path / "data", progress=False)
    with pytest.raises(NmtError, match=r"no validation split .* train.valid_every=0"):
        Trainer(Config().with_overrides({**QUICK, **TINY_TRANSFORMER, "train.valid_every": 10}),
                PreparedData(tmp_path / "data"), RunDirectory(tmp_path / "run"), DistributedContext())
    assert not (tmp_path / "run").exists()


def test_a_run_resumes_with_another_memory_budget_for_duplicates_but_not_with_other_data():
    from nmt_cli.training.resume import check_same_run

    saved = Config()
    check_same_run(saved, saved.with_overrides({"data.dedup_memory_mb": 1, "train.max_steps": 9}), "run")
    with pytest.raises(NmtError, match="data.vocab_size=8000, the config now says 100"):
        check_same_run(saved, saved.with_overrides({"data.vocab_size": 100}), "run")
