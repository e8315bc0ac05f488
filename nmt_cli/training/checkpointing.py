"""Which checkpoints of a run survive: the last k, the best k, and ``best.json``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from nmt_cli.checkpoint import checkpoint_dir_name, list_checkpoints
from nmt_cli.fileio import atomic_write_json

__all__ = ["CheckpointKeeper", "is_better"]


def is_better(value: float, best: float | None, mode: str) -> bool:
    """Strict improvement of ``value`` over ``best`` (``mode`` ``max`` for BLEU, ``min`` for loss)."""
    if best is None:
        return True
    return value > best if mode == "max" else value < best


class CheckpointKeeper:
    """Prunes ``<run>/checkpoints/step-*`` to the newest ``keep_last`` and the ``keep_best`` best.

    ``validations`` (``[{"step": s, <metric>: v, ...}]``) ranks the validated checkpoints;
    ``best.json`` names the best step, its value and its directory.
    """

    def __init__(self, run_dir: str | os.PathLike, metric: str, mode: str, keep_last: int, keep_best: int):
        self.directory = Path(run_dir) / "checkpoints"
        self.metric, self.mode = metric, mode
        self.keep_last, self.keep_best = max(keep_last, 1), max(keep_best, 0)

    def path(self, step: int) -> Path:
        return self.directory / checkpoint_dir_name(step)

    def best_steps(self, validations: list[dict[str, Any]]) -> list[int]:
        """Validated steps ranked best first (ties: the earlier step first)."""
        scored = [v for v in validations if v.get(self.metric) is not None]
        sign = -1.0 if self.mode == "max" else 1.0
        return [v["step"] for v in sorted(scored, key=lambda v: (sign * v[self.metric], v["step"]))]

    def write_best(self, validations: list[dict[str, Any]]) -> None:
        ranked = self.best_steps(validations)
        if not ranked:
            return
        best = next(v for v in validations if v["step"] == ranked[0])
        atomic_write_json(self.directory / "best.json", {
            "metric": self.metric,
            "mode": self.mode,
            "step": best["step"],
            "value": best[self.metric],
            "checkpoint": checkpoint_dir_name(best["step"]),
        })

    def prune(self, validations: list[dict[str, Any]]) -> None:
        """Delete every checkpoint that is neither among the last nor among the best."""
        existing = list_checkpoints(self.directory)
        keep = {path.name for path in existing[-self.keep_last:]}
        keep |= {checkpoint_dir_name(step) for step in self.best_steps(validations)[: self.keep_best]}
        for path in existing:
            if path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)
