"""What a training run carries from one session to the next, saved in every checkpoint.

:class:`TrainingState` holds the counters and histories the loop updates: the step,
the validation results, the best one and the validations since it, the training time
of earlier sessions, where the batch stream stands and the unfinished logging
interval. Weights, optimizer, schedule and random generators are saved beside it
(:mod:`nmt_cli.training.checkpointing`); together they make a resumed run repeat the
uninterrupted one exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TrainingState"]


@dataclass
class TrainingState:
    """Counters of a run; :meth:`from_checkpoint` reads them back from ``state.json``."""

    step: int = 0
    validations: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None  # {"step", "metric", "value"}
    bad_validations: int = 0  # validations since the best one
    elapsed_before: float = 0.0  # training seconds of earlier sessions
    position: dict[str, int] = field(default_factory=lambda: {"epoch": 1, "batch": 0})
    interval: dict[str, Any] | None = None  # the logging interval a checkpoint interrupted
    init_from: dict[str, Any] | None = None  # fine-tuning: {"checkpoint", "step", "kept"} it started from

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any], world_size: int) -> "TrainingState":
        """The state a checkpoint saved; on another number of processes the run goes on in
        the same epoch, at the same proportion of it."""
        position = dict(state["data_position"])
        if state["world_size"] != world_size:
            position["batch"] = position["batch"] * state["world_size"] // world_size
        return cls(
            step=int(state["step"]),
            validations=list(state["validations"]),
            best=state["best"],
            bad_validations=int(state["bad_validations"]),
            elapsed_before=float(state["elapsed_seconds"]),
            position=position,
            interval=_named_terms(state["interval"]),
            init_from=state.get("init_from"),
        )

    @property
    def last_validated(self) -> int:
        """The step of the newest validation (-1: none yet)."""
        return self.validations[-1]["step"] if self.validations else -1

    def to_checkpoint(self, elapsed: float, position: dict[str, int], interval: dict[str, Any], world_size: int,
                      schedule: dict[str, Any], rng: list[dict[str, Any]], prepared: Path) -> dict[str, Any]:
        """The training fields of ``state.json``: this state, and the number of processes,
        the schedule's state, each rank's random generators and the prepared data it saw."""
        return {
            "step": self.step,
            "epoch": position["epoch"],
            "data_position": position,
            "validations": self.validations,
            "best": self.best,
            "bad_validations": self.bad_validations,
            "elapsed_seconds": elapsed,
            "interval": interval,
            "init_from": self.init_from,
            "world_size": world_size,
            "scheduler": schedule,
            "rng": rng,
            "prepared": str(prepared),
        }


def _named_terms(interval: dict[str, Any] | None) -> dict[str, Any] | None:
    """The saved logging interval with its objective's sums by name (``terms``): checkpoints
    written before objectives named their terms saved guided alignment's as ``alignment_sum``."""
    if interval is None or "alignment_sum" not in interval:
        return interval
    named = {key: value for key, value in interval.items() if key != "alignment_sum"}
    return {**named, "terms": {"align_loss": interval["alignment_sum"]}}
