"""Checkpoint averaging: one checkpoint whose weights are the mean of several."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from nmt_cli.checkpoint import average_weights, list_checkpoints, load_checkpoint, resolve_checkpoint, save_checkpoint
from nmt_cli.errors import NmtError

__all__ = ["average_checkpoints", "checkpoints_to_average"]


def checkpoints_to_average(inputs: Sequence[str | os.PathLike], last: int | None = None) -> list[Path]:
    """Checkpoint directories named by ``inputs``: one run directory (its ``last`` newest
    checkpoints, all when ``last`` is None) or several checkpoint directories."""
    if not inputs:
        raise NmtError("nothing to average: name a run directory or checkpoint directories")
    if len(inputs) == 1 and list_checkpoints(inputs[0]):
        paths = list_checkpoints(inputs[0])
    else:
        paths = sorted({resolve_checkpoint(path) for path in inputs}, key=lambda p: (p.parent, p.name))
    if last is not None:
        if last < 1:
            raise NmtError(f"--last must be at least 1, got {last}")
        paths = paths[-last:]
    return paths


def average_checkpoints(paths: Sequence[Path], out_dir: str | os.PathLike) -> Path:
    """Write a checkpoint at ``out_dir`` with the mean weights of ``paths``.

    Config, tokenizer and step come from the newest of ``paths``; the state lists the
    averaged checkpoints and holds no optimizer, so it is for translation, not resuming.
    """
    if not paths:
        raise NmtError("no checkpoints to average")
    newest = load_checkpoint(paths[-1])
    weights = average_weights(paths)
    for alias, target in newest.state.get("tied_weights", {}).items():
        weights[alias] = weights[target]
    newest.weights = weights
    model = newest.build_model("cpu")
    state = {"step": newest.step, "averaged": [str(path) for path in paths]}
    return save_checkpoint(out_dir, model, newest.config, newest.tokenizer, state)
