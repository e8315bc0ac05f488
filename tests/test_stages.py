"""A pipeline's record of its stages: written at each stage, read back to resume and to cost,
including records written before stages declared their inputs and outputs."""

from __future__ import annotations

import json
from pathlib import Path

from nmt_cli.checkpoint import FORMAT_VERSION
from nmt_cli.config import Config
from nmt_cli.stages import PipelineRecord, Stage, run_finished, training_seconds


def test_a_finished_stage_is_recorded_at_once_and_read_back(tmp_path):
    record = PipelineRecord(tmp_path / "pipeline.json")
    links = Stage("links", inputs=("forward/run",), outputs=("links/train.align",))
    assert not record.finished(links) and not record.path.exists()
    record.finish(Stage("forward", ("data: synthetic",), ("forward/run",)), 12.34, {"step": 4})
    record.finish(links, 2.0, {"links": 7})
    record.save_results(aligner="forward/run")
    again = PipelineRecord(tmp_path / "pipeline.json")
    assert again.to_json() == record.to_json()
    assert again.stages["forward"].seconds == 12.3 and again.stages["forward"].details == {"step": 4}
    assert again.stages["links"].stage == links and again.results == {"aligner": "forward/run"}
    assert again.cumulative_seconds() == {"forward": 12.3, "links": 14.3}
    # finished: recorded so, and every output it declares is there
    assert not again.finished(links)
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "train.align").write_text("0-0\n", encoding="utf-8")
    assert again.finished(links) and not again.finished(Stage("guided"))


def test_a_record_written_before_stages_declared_their_paths_still_reads(tmp_path):
    """An early bootstrap.json: each stage's details and seconds only, and only finished stages."""
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps({"stages": {
        "forward": {"step": 2, "stop_reason": "max_steps", "seconds": 0.6},
        "links": {"reading": "layer=0 heads=1 shift=on", "links": 30, "pairs": 10, "seconds": 5.4}},
        "aligner": "/runs/guided/run"}), encoding="utf-8")
    record = PipelineRecord(path)
    assert list(record.stages) == ["forward", "links"]
    assert record.finished(Stage("links")) and record.finished(Stage("forward"))
    assert record.stages["links"].details == {"reading": "layer=0 heads=1 shift=on", "links": 30, "pairs": 10}
    assert record.cumulative_seconds() == {"forward": 0.6, "links": 6.0}
    assert record.results["aligner"] == "/runs/guided/run"
    # the stage declares its outputs now: a missing one means the stage runs again
    assert not record.finished(Stage("links", outputs=("links/train.align",)))


def _run_at_step(run: Path, step: int, elapsed: float) -> None:
    checkpoint = run / "checkpoints" / f"step-{step:08d}"
    checkpoint.mkdir(parents=True)
    state = {"format": FORMAT_VERSION, "config": Config().to_dict(), "step": step, "elapsed_seconds": elapsed}
    (checkpoint / "state.json").write_text(json.dumps(state), encoding="utf-8")
    (checkpoint / "model.safetensors").write_bytes(b"")


def test_a_training_stage_is_finished_at_its_steps_and_costs_what_its_steps_recorded(tmp_path):
    run, prepared = tmp_path / "run", tmp_path / "prepared"
    assert not run_finished(run, 4)
    _run_at_step(run, 4, elapsed=5.5)
    assert run_finished(run, 4) and not run_finished(run, 5)
    assert not run_finished(run, 0)  # no step limit: the run resumes
    prepared.mkdir()
    (prepared / "manifest.json").write_text(json.dumps({"elapsed_seconds": 1.25}), encoding="utf-8")
    assert training_seconds(prepared, run) == 6.75
