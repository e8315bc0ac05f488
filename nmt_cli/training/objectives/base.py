"""What every training objective shares: the terms it returns, its interface, and the context
it is built in.

The loop calls ``objective(module, model, batch)`` for each batch and back-propagates
``terms.loss`` (scaled by the update's normaliser); ``terms.nll`` feeds perplexity, and
``terms.logged`` holds the sums of the extra terms the objective names in
``Objective.terms``, which the log shows per target token under those names (guided
alignment's ``align_loss``). An objective runs the forward pass itself, so one that needs
more of the model than its features (cross-attention for alignment supervision) or a
second model (a teacher, loaded through its :class:`ObjectiveContext`) asks for it
there, and the loop stays the same. ``module`` is what to call (the model, or its DDP or
compiled wrapper); ``model`` is the bare model, for ``output_layer()``.

A new objective is a module in this package with a class registered by
``@OBJECTIVES.register("name")`` whose ``from_config(config, context)`` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from nmt_cli.checkpoint import load_checkpoint
from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.registry import OBJECTIVES
from nmt_cli.training.batching import Batch

__all__ = ["LossTerms", "Objective", "ObjectiveContext", "build_objective"]


@dataclass
class LossTerms:
    """Sums over the batch's target tokens: the loss to minimise, the plain NLL, and the
    objective's extra terms by name (``Objective.terms``), for the log only."""

    loss: Tensor
    nll: Tensor
    logged: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class ObjectiveContext:
    """What an objective may need besides the config: the training device, the prepared data
    (its splits and tokenizer) and other trained models (:meth:`load_model`)."""

    device: torch.device
    data: PreparedData

    def load_model(self, path: str | Path) -> Seq2SeqModel:
        """The trained model of a checkpoint or run directory on the training device, in
        evaluation mode and frozen (a teacher).

        Building it draws no number from the random generators, so the run's dropout and
        an exact resume are the same with it as without it.
        """
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            model = load_checkpoint(path).build_model(self.device)
        return model.requires_grad_(False).eval()


class Objective:
    """``objective(module, model, batch) -> LossTerms``; ``terms`` names the sums of
    ``LossTerms.logged``, in the order the log shows them."""

    terms: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_config(cls, config: Config, context: ObjectiveContext) -> "Objective":
        raise NotImplementedError

    def __call__(self, module, model: Seq2SeqModel, batch: Batch) -> LossTerms:
        raise NotImplementedError


def build_objective(config: Config, context: ObjectiveContext) -> Objective:
    """The objective ``train.objective`` names (``auto``: see ``TrainConfig.objective_name``)."""
    return OBJECTIVES.get(config.train.objective_name).from_config(config, context)
