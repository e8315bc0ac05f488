"""Training objectives: the registry's choice and its default, and the seam an objective with a
second model uses (a teacher loaded through its context, a term of its own in the log)."""

from __future__ import annotations

import io
import math

import pytest
import torch

from nmt_cli.checkpoint import load_checkpoint
from nmt_cli.config import Config
from nmt_cli.errors import ConfigError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.registry import OBJECTIVES
from nmt_cli.training import train
from nmt_cli.training.batching import Batch
from nmt_cli.training.loss import label_smoothed_cross_entropy
from nmt_cli.training.objectives import LossTerms, ObjectiveContext
from nmt_cli.training.objectives.cross_entropy import CrossEntropyObjective
from nmt_cli.training.progress import read_metrics
from tests.test_trainer import QUICK, TINY_TRANSFORMER


class TeacherNll(CrossEntropyObjective):
    """The cross-entropy objective, logging a frozen teacher's NLL of the same batch as ``teacher_nll``
    (the seam a distillation objective uses; its loss is the plain one)."""

    terms = ("teacher_nll",)
    teacher_path = ""  # set by the test
    built: list["TeacherNll"] = []

    def __init__(self, label_smoothing: float, teacher: Seq2SeqModel):
        super().__init__(label_smoothing)
        self.teacher = teacher

    @classmethod
    def from_config(cls, config: Config, context: ObjectiveContext) -> "TeacherNll":
        objective = cls(config.train.label_smoothing, context.load_model(cls.teacher_path))
        cls.built.append(objective)
        return objective

    def __call__(self, module, model: Seq2SeqModel, batch: Batch) -> LossTerms:
        terms = super().__call__(module, model, batch)
        with torch.no_grad():
            features, _ = self.teacher(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, features_only=True)
            _, teacher_nll = label_smoothed_cross_entropy(features, self.teacher.output_layer(), batch.tgt_out,
                                                          batch.tgt_mask, 0.0)
        return LossTerms(terms.loss, terms.nll, {"teacher_nll": teacher_nll})


@pytest.fixture
def teacher_objective():
    """:class:`TeacherNll` registered as ``test_teacher_nll`` for one test only: an entry left in the
    registry would show in every later config check and in the generated config reference."""
    OBJECTIVES.register("test_teacher_nll")(TeacherNll)
    yield TeacherNll
    OBJECTIVES._entries.pop("test_teacher_nll")


def test_auto_is_guided_alignment_exactly_when_a_weight_is_set():
    assert Config().train.objective == "auto" and Config().train.objective_name == "cross_entropy"
    old = Config.from_dict({"train": {"alignment_weight": 0.05}, "model": {"alignment_layer": 0}})  # no objective
    assert old.train.objective_name == "guided_alignment"
    assert Config().with_overrides({"train.objective": "cross_entropy"}).train.objective_name == "cross_entropy"
    with pytest.raises(ConfigError) as error:  # reported with the config's other problems
        Config().with_overrides({"train.objective": "cross_entropy", "train.alignment_weight": 0.05,
                                 "decode.nbest": 9})
    assert [line.split(":")[0] for line in str(error.value).splitlines()] == [
        "config key 'train.objective'", "config key 'decode.nbest'"]
    with pytest.raises(ConfigError, match=r"'train.objective': cross_entropy does not use train.alignment_weight"):
        Config().with_overrides({"train.objective": "cross_entropy", "train.alignment_weight": 0.05})
    with pytest.raises(ConfigError, match=r"'train.alignment_weight': train.objective=guided_alignment needs"):
        Config().with_overrides({"train.objective": "guided_alignment"})
    with pytest.raises(ConfigError, match=r"'train.objective': 'distil' is not one of: auto, cross_entropy"):
        Config().with_overrides({"train.objective": "distil"})


def test_an_objective_brings_a_frozen_teacher_and_logs_its_own_term(tiny_prepared, tmp_path, monkeypatch,
                                                                    teacher_objective):
    settings = {**QUICK, **TINY_TRANSFORMER, "model.dropout": 0.3, "train.max_steps": 4, "train.log_every": 2,
                "train.valid_every": 0, "train.early_stop_metric": "loss"}
    train(Config().with_overrides(settings), tiny_prepared, tmp_path / "teacher", stream=io.StringIO())
    monkeypatch.setattr(TeacherNll, "teacher_path", str(tmp_path / "teacher"))
    monkeypatch.setattr(TeacherNll, "built", [])
    log = io.StringIO()
    student = Config().with_overrides({**settings, "train.objective": "test_teacher_nll"})
    train(student, tiny_prepared, tmp_path / "student", stream=log)

    records = [r for r in read_metrics(tmp_path / "student") if r["kind"] == "train"]
    assert [r["step"] for r in records] == [2, 4]
    assert all(math.isfinite(r["teacher_nll"]) and r["teacher_nll"] > 0 for r in records)
    assert list(records[0])[:6] == ["kind", "step", "epoch", "loss", "ppl", "teacher_nll"]
    assert any(f"| teacher_nll {records[-1]['teacher_nll']:.4f} |" in line for line in log.getvalue().splitlines())
    # the teacher is the trained checkpoint, frozen and in evaluation mode, untouched by training
    (objective,) = TeacherNll.built
    teacher = objective.teacher
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    trained = load_checkpoint(tmp_path / "teacher").weights
    assert all(torch.equal(value, trained[name]) for name, value in teacher.state_dict().items() if name in trained)
    # loading it drew no random number: the student trains (dropout included) as the teacher run did
    teacher_losses = [r["loss"] for r in read_metrics(tmp_path / "teacher") if r["kind"] == "train"]
    assert [r["loss"] for r in records] == teacher_losses
