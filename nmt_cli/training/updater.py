"""One optimizer update from accumulated gradients: backward, clipping, step, schedule.

:class:`Updater` owns the optimizer, the learning-rate schedule and the fp16 loss
scaler, and saves and restores them together.
"""

from __future__ import annotations

from typing import Any

import torch

from nmt_cli.config import TrainConfig
from nmt_cli.precision import Precision
from nmt_cli.training.schedule import LearningRateSchedule, build_optimizer

__all__ = ["Updater"]


class Updater:
    """Optimizer, schedule and precision of one model's training.

    ``metric_mode`` (``max`` for BLEU, ``min`` for loss) drives the ``plateau`` schedule.
    """

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, precision: Precision, metric_mode: str):
        self.model, self.cfg, self.precision = model, cfg, precision
        self.optimizer = build_optimizer(model.parameters(), cfg)
        self.schedule = LearningRateSchedule(self.optimizer, cfg, metric_mode)

    @property
    def learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradients of ``loss`` (scaled first under fp16)."""
        scaler = self.precision.scaler
        (scaler.scale(loss) if scaler is not None else loss).backward()

    def step(self) -> bool:
        """Clip and step; False when the fp16 loss scaler found inf/NaN gradients and skipped it.

        A skipped update leaves the weights, the optimizer and the learning-rate schedule as
        they were (as fairseq does), and the scaler halves the loss scale. Its batches are
        consumed, so a run that overflows at the same place after a resume skips it again.
        """
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)  # clip the true gradients
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        applied = True
        if scaler is None:
            self.optimizer.step()
        else:
            scale = scaler.get_scale()
            scaler.step(self.optimizer)
            scaler.update()
            applied = scaler.get_scale() >= scale  # update() lowers the scale only after an overflow
        self.optimizer.zero_grad(set_to_none=True)
        if applied:
            self.schedule.after_update()
        return applied

    def after_validation(self, metric: float) -> None:
        self.schedule.after_validation(metric)

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(``optimizer.pt`` content, the schedule's JSON state)."""
        scaler = self.precision.scaler
        saved = {"optimizer": self.optimizer.state_dict(),
                 "grad_scaler": scaler.state_dict() if scaler is not None else None}
        return saved, self.schedule.state_dict()

    def restore(self, saved: dict[str, Any], schedule_state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self.restore_optimizer(saved)
        self.schedule.load_state_dict(schedule_state)

    def restore_optimizer(self, saved: dict[str, Any]) -> None:
        """The optimizer (and fp16 scaler) part of :meth:`state` alone."""
        self.optimizer.load_state_dict(saved["optimizer"])
        if self.precision.scaler is not None and saved.get("grad_scaler"):
            self.precision.scaler.load_state_dict(saved["grad_scaler"])
