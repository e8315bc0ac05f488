"""Label-smoothed cross-entropy, the translation objective (``train.objective=cross_entropy``)."""

from __future__ import annotations

from nmt_cli.config import Config
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.registry import OBJECTIVES
from nmt_cli.training.batching import Batch
from nmt_cli.training.loss import label_smoothed_cross_entropy
from nmt_cli.training.objectives.base import LossTerms, Objective, ObjectiveContext

__all__ = ["CrossEntropyObjective"]


@OBJECTIVES.register("cross_entropy")
class CrossEntropyObjective(Objective):
    """Label-smoothed cross-entropy of every target token given the source and its prefix.

    ``loss = sum_t (1 - eps) * -log p(y_t) + eps * mean_v -log p(v)``; with ``eps = 0`` it
    is the NLL itself (validation).
    """

    def __init__(self, label_smoothing: float):
        self.label_smoothing = label_smoothing

    @classmethod
    def from_config(cls, config: Config, context: ObjectiveContext) -> "CrossEntropyObjective":
        return cls(config.train.label_smoothing)

    def __call__(self, module, model: Seq2SeqModel, batch: Batch) -> LossTerms:
        features, _ = module(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, features_only=True)
        loss, nll = label_smoothed_cross_entropy(features, model.output_layer(), batch.tgt_out, batch.tgt_mask,
                                                 self.label_smoothing)
        return LossTerms(loss, nll)
