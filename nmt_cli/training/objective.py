"""What training minimises: the objective turns a batch into summed loss terms.

The loop calls ``objective(module, model, batch)`` for each batch and back-propagates
``terms.loss`` (scaled by the update's normaliser); ``terms.nll`` feeds perplexity. An
objective runs the forward pass itself, so one that needs more of the model than its
features (cross-attention for alignment supervision, a second model) asks for it
there, and the loop stays the same. ``module`` is what to call (the model, or its DDP
or compiled wrapper); ``model`` is the bare model, for ``output_layer()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from nmt_cli.config import Config
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.training.batching import Batch
from nmt_cli.training.loss import label_smoothed_cross_entropy

__all__ = ["LossTerms", "TranslationObjective", "build_objective"]


@dataclass
class LossTerms:
    """Sums over the batch's target tokens: the loss to minimise and the plain NLL."""

    loss: Tensor
    nll: Tensor


class TranslationObjective:
    """Label-smoothed cross-entropy of every target token given the source and its prefix.

    ``loss = sum_t (1 - eps) * -log p(y_t) + eps * mean_v -log p(v)``; with ``eps = 0`` it
    is the NLL itself (validation).
    """

    def __init__(self, label_smoothing: float):
        self.label_smoothing = label_smoothing

    def __call__(self, module, model: Seq2SeqModel, batch: Batch) -> LossTerms:
        features, _ = module(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, features_only=True)
        loss, nll = label_smoothed_cross_entropy(features, model.output_layer(), batch.tgt_out, batch.tgt_mask,
                                                 self.label_smoothing)
        return LossTerms(loss, nll)


def build_objective(config: Config) -> TranslationObjective:
    """The training objective ``config`` asks for."""
    return TranslationObjective(config.train.label_smoothing)
