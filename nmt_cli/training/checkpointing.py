"""Checkpoints of a training run: which to resume from, which survive (the last k, the best k)
and ``best.json``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from nmt_cli.checkpoint import Checkpoint, checkpoint_dir_name, list_checkpoints, load_checkpoint
from nmt_cli.config import Config
from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_write_json
from nmt_cli.tokenization import Tokenizer
from nmt_cli.training.resume import check_same_architecture, check_same_run

__all__ = ["CheckpointKeeper", "load_initial", "load_resumable"]


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


def load_initial(path: str, config: Config, tokenizer: Tokenizer, prepared_dir: Path) -> Checkpoint:
    """The trained checkpoint a fine-tuning run starts from (``train.init_from``), once it is
    clear that it has the run's architecture and its SentencePiece model encoded the data."""
    checkpoint = load_checkpoint(path)
    check_same_architecture(checkpoint.config, config, str(checkpoint.path))
    if checkpoint.tokenizer.model_files() != tokenizer.model_files():
        raise NmtError(f"{prepared_dir}: was prepared with another SentencePiece model than {checkpoint.path} "
                       f"uses; prepare the data with `nmt prepare --tokenizer-from {path}`")
    return checkpoint


def load_resumable(path: Path, config: Config, tokenizer: Tokenizer, run_dir: Path, prepared_dir: Path) -> Checkpoint:
    """The checkpoint a run resumes from, once it is clear that ``config`` and the prepared
    data's tokenizer are those it was trained with."""
    checkpoint = load_checkpoint(path)
    check_same_run(checkpoint.config, config, str(run_dir))
    if checkpoint.tokenizer.model_files() != tokenizer.model_files():
        raise NmtError(f"{run_dir}: was trained with another SentencePiece model than "
                       f"{prepared_dir}; use --restart or a new --out directory")
    return checkpoint
