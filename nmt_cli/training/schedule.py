"""Optimisers and learning-rate schedules, built from torch's own classes."""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch
from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau

from nmt_cli.config import TrainConfig

__all__ = ["InverseSqrtWarmup", "LearningRateSchedule", "build_optimizer"]


FUSED_DEVICES = ("cpu", "cuda")


def build_optimizer(parameters: Iterable[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam / AdamW (``betas=cfg.adam_betas``, 0.98 by default) or plain SGD at ``cfg.lr``.

    Adam uses torch's fused kernel where it has one (CPU and CUDA): the same update in one
    pass over each tensor instead of a dozen. Without it torch runs, on CPU, a loop of
    separate elementwise ops per parameter, each a full pass over memory.
    """
    parameters = [p for p in parameters if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=cfg.lr, weight_decay=cfg.weight_decay)
    adam = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    beta1, beta2 = cfg.adam_betas
    fused = all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in parameters)
    return adam(parameters, lr=cfg.lr, betas=(beta1, beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                fused=fused or None)


class InverseSqrtWarmup:
    """Multiplier of the peak rate after ``step`` updates (Vaswani et al. 2017, sec. 5.3).

    The paper's ``lrate = d^-0.5 * min(n^-0.5, n * warmup^-1.5)`` for update ``n`` (from 1)
    peaks at ``n = warmup`` with ``d^-0.5 * warmup^-0.5``; dividing by that peak gives
    ``min(n / warmup, sqrt(warmup / n))``, so the learning rate peaks at ``train.lr``.
    A class rather than a closure so ``LambdaLR.state_dict`` records ``warmup_steps``.
    """

    def __init__(self, warmup_steps: int):
        self.warmup_steps = max(warmup_steps, 1)

    def __call__(self, step: int) -> float:
        update = step + 1  # LambdaLR counts finished updates; the next update is number step + 1
        return min(update / self.warmup_steps, math.sqrt(self.warmup_steps / update))


def _constant(step: int) -> float:
    return 1.0


class LearningRateSchedule:
    """One of ``inverse_sqrt`` / ``constant`` (stepped per update) or ``plateau``.

    ``plateau`` is torch's ``ReduceLROnPlateau``, stepped on the validation metric
    (``mode="max"`` for BLEU, ``"min"`` for loss).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig, metric_mode: str):
        self.per_update: LambdaLR | None = None
        self.plateau: ReduceLROnPlateau | None = None
        if cfg.schedule == "plateau":
            self.plateau = ReduceLROnPlateau(
                optimizer, mode=metric_mode, factor=cfg.plateau_factor, patience=cfg.plateau_patience
            )
        else:
            multiplier = InverseSqrtWarmup(cfg.warmup_steps) if cfg.schedule == "inverse_sqrt" else _constant
            self.per_update = LambdaLR(optimizer, multiplier)

    def after_update(self) -> None:
        if self.per_update is not None:
            self.per_update.step()

    def after_validation(self, metric: float) -> None:
        if self.plateau is not None:
            self.plateau.step(metric)

    def state_dict(self) -> dict[str, Any]:
        """Plain numbers and lists only, so it can live in the checkpoint's JSON state."""
        scheduler = self.plateau if self.plateau is not None else self.per_update
        return scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        scheduler = self.plateau if self.plateau is not None else self.per_update
        scheduler.load_state_dict(state)
