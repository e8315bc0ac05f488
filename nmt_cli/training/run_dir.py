"""The run directory: what a run writes there, where it resumes from, what ``--restart`` clears.

Layout (docs/ARCHITECTURE.md): ``config.yaml``, ``train.log``, ``metrics.jsonl``,
``learning_curve.png``, ``summary.json``, ``tensorboard/`` and ``checkpoints/``.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import ContextManager

from nmt_cli.checkpoint import STATE, WEIGHTS, list_checkpoints
from nmt_cli.config import Config
from nmt_cli.data.prepare import MANIFEST
from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_write_text, output_lock

__all__ = ["RunDirectory", "RUN_OUTPUTS"]

#: files of a run directory that ``--restart`` removes
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "train.log", "learning_curve.png", "tensorboard")


class RunDirectory:
    """One run's output directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def check(self) -> None:
        """Refuse a directory that holds something other than a run: prepared data, a
        checkpoint, or a ``config.yaml`` that no run wrote (a run writes ``train.log`` first)."""
        if self.path.exists() and not self.path.is_dir():
            raise NmtError(f"{self.path}: exists and is not a directory; choose another --out for the run")
        names = {entry.name for entry in self.path.iterdir()} if self.path.is_dir() else set()
        if MANIFEST in names:
            raise NmtError(f"{self.path}: holds prepared data ({MANIFEST}); choose another --out for the run")
        if names & {STATE, WEIGHTS}:
            raise NmtError(f"{self.path}: is a checkpoint directory ({', '.join(sorted(names & {STATE, WEIGHTS}))}), "
                           "not a run directory; choose another --out for the run")
        if "config.yaml" in names and "train.log" not in names:
            raise NmtError(f"{self.path}: holds a config.yaml that no training run wrote (no train.log); "
                           "choose another --out for the run")

    def session(self, writer: bool) -> ContextManager:
        """Hold the directory while a session trains into it (the ``writer``, rank 0): a second
        ``nmt train`` into it fails at once, naming the first one's pid."""
        return output_lock(self.path) if writer else contextlib.nullcontext()

    def clear(self) -> None:
        """Remove what earlier sessions of the run wrote (``--restart``), and nothing else."""
        for name in RUN_OUTPUTS:
            output = self.path / name
            if output.is_dir():
                shutil.rmtree(output)
            elif output.exists():
                output.unlink()

    def resume_point(self) -> Path | None:
        """The newest complete checkpoint (None: the run starts fresh)."""
        existing = list_checkpoints(self.path)
        return existing[-1] if existing else None

    def write_config(self, config: Config) -> None:
        """The resolved settings, so the run can be repeated or resumed."""
        atomic_write_text(self.path / "config.yaml", config.to_yaml())
