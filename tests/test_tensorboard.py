"""TensorBoard logging: the same scalars as ``metrics.jsonl``, and a resumed run repeats no step."""

from __future__ import annotations

import pytest

from nmt_cli.training import train
from nmt_cli.training.progress import RunLog, read_metrics
from tests.test_trainer import TINY_TRANSFORMER, _config

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="TensorBoard is not installed (pip install -e '.[test]' installs it)",
)


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of the event files under ``log_dir``: tag -> [(step, value), ...]."""
    events = event_accumulator.EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_training_writes_the_metrics_as_tensorboard_scalars(tiny_prepared, tmp_path):
    config = _config(**TINY_TRANSFORMER, train__max_steps=20, train__log_every=10, train__valid_every=10)
    train(config, tiny_prepared, tmp_path / "run")

    scalars = _scalars(tmp_path / "run" / "tensorboard")
    records = read_metrics(tmp_path / "run")
    for kind, key in [("train", "loss"), ("train", "lr"), ("train", "tokens_per_s"), ("valid", "loss"),
                      ("valid", "bleu")]:
        expected = [(r["step"], r[key]) for r in records if r["kind"] == kind]
        assert [step for step, _ in expected] == [10, 20]
        assert scalars[f"{kind}/{key}"] == [(step, pytest.approx(value, rel=1e-6)) for step, value in expected]


def test_a_resumed_log_replaces_the_steps_after_its_checkpoint(tmp_path):
    first = RunLog(tmp_path)
    for step, loss in [(10, 5.0), (20, 4.0), (30, 3.0)]:  # killed after step 30, checkpoint at 10
        first.record({"kind": "train", "step": step, "loss": loss})
    first.close()

    resumed = RunLog(tmp_path, resume_step=10)
    resumed.record({"kind": "train", "step": 20, "loss": 4.5})
    resumed.close()

    assert _scalars(tmp_path / "tensorboard")["train/loss"] == [(10, 5.0), (20, 4.5)]
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [(10, 5.0), (20, 4.5)]
