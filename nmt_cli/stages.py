"""Pipelines of resumable stages: one JSON file records what each stage read and wrote,
whether it finished and what it cost.

A pipeline (``nmt align bootstrap``, ``nmt distill``) runs named stages in order into
one directory. It declares each stage as a :class:`Stage` (its name, and the paths it reads
and writes, relative to that directory) and, once the stage is done, records it with
:meth:`PipelineRecord.finish`, which rewrites the record at once (atomically): a rerun asks
:meth:`PipelineRecord.finished` and skips what is done, so an interrupted pipeline goes on
where it stopped. A stage that trains a model resumes as its run does instead:
:func:`run_finished` says whether the run has made its steps and :func:`training_seconds`
what preparing its data and training it cost, as those steps recorded them, so a rerun
keeps each stage's own cost. The same reader serves whoever reports on a pipeline (the
bench adds up :meth:`PipelineRecord.cumulative_seconds`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmt_cli.checkpoint import list_checkpoints, load_checkpoint_state
from nmt_cli.data.prepare import MANIFEST
from nmt_cli.fileio import atomic_write_json

__all__ = ["PipelineRecord", "Stage", "StageRecord", "run_finished", "training_seconds"]

#: the keys of a stage's entry that :class:`StageRecord` owns; the others are its details
RECORD_KEYS = ("inputs", "outputs", "finished", "seconds")


@dataclass(frozen=True)
class Stage:
    """A stage as its pipeline declares it: a name, and the paths (relative to the
    pipeline's directory; absolute where another run of it made them) that it reads and writes."""

    name: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class StageRecord:
    """What the record says of a stage: its declaration, whether it finished, its cost in
    seconds, and what else the stage reported (``details``: its step, the links it wrote ...)."""

    stage: Stage
    finished: bool
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.details, "inputs": list(self.stage.inputs), "outputs": list(self.stage.outputs),
                "finished": self.finished, "seconds": self.seconds}

    @classmethod
    def from_json(cls, name: str, entry: dict[str, Any]) -> StageRecord:
        """An entry of the record; one written before stages declared their paths and flag
        (an early bootstrap.json) recorded only finished stages."""
        stage = Stage(name, tuple(entry.get("inputs", ())), tuple(entry.get("outputs", ())))
        details = {key: value for key, value in entry.items() if key not in RECORD_KEYS}
        return cls(stage, bool(entry.get("finished", True)), float(entry["seconds"]), details)


class PipelineRecord:
    """The record of one pipeline's stages (in the order they first ran) and of what the
    pipeline made (``results``), kept in the JSON file ``path``; read back when it exists."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        data = json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file() else {}
        self.stages: dict[str, StageRecord] = {
            name: StageRecord.from_json(name, entry) for name, entry in data.get("stages", {}).items()}
        self.results: dict[str, Any] = {key: value for key, value in data.items() if key != "stages"}

    @property
    def root(self) -> Path:
        """The pipeline's directory: stage paths are relative to it."""
        return self.path.parent

    def finished(self, stage: Stage) -> bool:
        """Whether ``stage`` is recorded as finished and every output it declares is there."""
        recorded = self.stages.get(stage.name)
        return (recorded is not None and recorded.finished
                and all((self.root / output).exists() for output in stage.outputs))

    def finish(self, stage: Stage, seconds: float, details: dict[str, Any] | None = None) -> StageRecord:
        """Record ``stage`` as finished at a cost of ``seconds`` (to a tenth) and write the record."""
        recorded = StageRecord(stage, True, round(seconds, 1), dict(details or {}))
        self.stages[stage.name] = recorded
        self.save()
        return recorded

    def save_results(self, **results: Any) -> None:
        """Record what the pipeline made (bootstrap: its aligner) and write the record."""
        self.results.update(results)
        self.save()

    def save(self) -> None:
        atomic_write_json(self.path, self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {"stages": {name: recorded.to_json() for name, recorded in self.stages.items()}, **self.results}

    def cumulative_seconds(self) -> dict[str, float]:
        """Each stage's cost together with every stage recorded before it: what a result
        taken after that stage cost."""
        spent, cost = 0.0, {}
        for name, recorded in self.stages.items():
            spent += recorded.seconds
            cost[name] = spent
        return cost


def run_finished(run_dir: str | os.PathLike, max_steps: int) -> bool:
    """Whether the training run ``run_dir`` has a checkpoint at ``max_steps`` or later (a
    config without a step limit never counts as finished here: its run resumes)."""
    return bool(list_checkpoints(run_dir)) and 0 < max_steps <= load_checkpoint_state(run_dir)["step"]


def training_seconds(prepared_dir: str | os.PathLike, run_dir: str | os.PathLike) -> float:
    """What a training stage cost: data preparation plus the run's training time, each as
    recorded (the prepared manifest, the run's newest checkpoint), whatever the reruns."""
    manifest = json.loads((Path(prepared_dir) / MANIFEST).read_text(encoding="utf-8"))
    return manifest["elapsed_seconds"] + load_checkpoint_state(run_dir)["elapsed_seconds"]
