"""The run directory: what a run writes there, where it resumes from, what ``--restart`` clears.

Layout (docs/ARCHITECTURE.md): ``config.yaml``, ``train.log``, ``metrics.jsonl``,
``learning_curve.png``, ``summary.json``, ``tensorboard/`` and ``checkpoints/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nmt_cli.checkpoint import list_checkpoints
from nmt_cli.config import Config
from nmt_cli.fileio import atomic_write_text

__all__ = ["RunDirectory", "RUN_OUTPUTS"]

#: files of a run directory that ``--restart`` removes
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "train.log", "learning_curve.png", "tensorboard")


class RunDirectory:
    """One run's output directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

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
