"""Checkpoints of a training run: which to resume or fine-tune from and what of it to take
back, which survive (the last k, the best k) and ``best.json``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from nmt_cli.checkpoint import (OPTIMIZER, STATE, Checkpoint, checkpoint_dir_name, list_checkpoints, load_checkpoint,
                                load_optimizer_state, reading_checkpoint_file)
from nmt_cli.config import Config
from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_write_json
from nmt_cli.tokenization import Tokenizer
from nmt_cli.training.distributed import DistributedContext
from nmt_cli.training.resume import check_same_architecture, check_same_run, restore_rng_state
from nmt_cli.training.state import TrainingState
from nmt_cli.training.updater import Updater

__all__ = ["CheckpointKeeper", "load_initial", "load_resumable", "restore_training", "start_from_initial"]


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


def restore_training(checkpoint: Checkpoint, updater: Updater, context: DistributedContext) -> TrainingState:
    """Take back a checkpoint's optimizer, schedule, counters and this rank's random generators."""
    saved = load_optimizer_state(checkpoint.path)
    if saved is None:
        raise NmtError(f"{checkpoint.path}: no optimizer state, cannot resume training from it")
    with reading_checkpoint_file(checkpoint.path / STATE):  # a missing or bad field: one line naming it
        state = TrainingState.from_checkpoint(checkpoint.state, context.world_size)
        schedule_state, rng = checkpoint.state["scheduler"], checkpoint.state["rng"]
        restore_rng_state(rng[context.rank] if len(rng) == context.world_size else rng[0])
    with reading_checkpoint_file(checkpoint.path / OPTIMIZER):
        updater.restore(saved, schedule_state)
    return state


def start_from_initial(initial: Checkpoint, updater: Updater, kept: tuple[str, ...]) -> dict[str, Any]:
    """Fine-tuning: take the initial checkpoint's optimizer and/or schedule when ``kept``
    (``train.init_keep``) names them; the record of where the run started."""
    if "optimizer" in kept:
        saved = load_optimizer_state(initial.path)
        if saved is None:
            raise NmtError(f"{initial.path}: has no optimizer state to keep (train.init_keep); "
                           "start with a fresh optimizer or use a training checkpoint")
        updater.restore_optimizer(saved)
    if "schedule" in kept:
        if "scheduler" not in initial.state:
            raise NmtError(f"{initial.path}: has no learning-rate schedule to keep (train.init_keep)")
        updater.schedule.load_state_dict(initial.state["scheduler"])
    return {"checkpoint": str(initial.path), "step": initial.step, "kept": list(kept)}
