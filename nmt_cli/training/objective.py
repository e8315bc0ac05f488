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

import torch
from torch import Tensor

from nmt_cli.config import Config
from nmt_cli.errors import NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.training.batching import Batch
from nmt_cli.training.loss import label_smoothed_cross_entropy

__all__ = ["LossTerms", "TranslationObjective", "GuidedAlignmentObjective", "alignment_cross_entropy",
           "null_cross_entropy", "build_objective"]

#: attention weights below this count as this in the log (a link to a weight of exactly 0)
MIN_ATTENTION = 1e-9


@dataclass
class LossTerms:
    """Sums over the batch's target tokens: the loss to minimise and the plain NLL (and, for
    guided alignment, the alignment cross-entropy alone, for the log)."""

    loss: Tensor
    nll: Tensor
    alignment: Tensor | None = None


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


def alignment_cross_entropy(attention: Tensor, links: Tensor, weights: Tensor, shift: int = 0) -> Tensor:
    """Summed cross-entropy between link distributions and attention rows.

    ``attention`` (B, T, S): one head's weights; ``links`` (N, 3) rows ``(sentence, target
    position, source position)`` and ``weights`` (N,) as in :class:`Batch`. For every
    linked target piece ``t`` with link distribution ``q_t`` (uniform over its linked
    source pieces): ``sum_t sum_s -q_t(s) log a_t(s)``, i.e. ``sum_links -w log a``
    (fairseq's and OpenNMT-py's alignment loss). Target pieces without links add nothing.
    ``shift`` 1 reads target piece ``t`` at row ``t + 1``, where it is the decoder input.
    """
    linked = attention[links[:, 0], links[:, 1] + shift, links[:, 2]]  # (N,)
    return -(weights.to(linked.dtype) * linked.float().clamp_min(MIN_ATTENTION).log()).sum()


def null_cross_entropy(attention: Tensor, links: Tensor, tgt_mask: Tensor, shift: int = 0) -> Tensor:
    """Summed ``-log a_t(null)`` over the target pieces the links leave unaligned.

    ``attention`` (B, T, S + 1): one head's weights, the null position's last
    (``model.alignment_null``); ``links`` (N, 3) as in :class:`Batch`; ``tgt_mask`` (B, T)
    the real target positions (pieces and EOS). A piece of a sentence with links but none
    of its own is aligned to nothing, so its link distribution is all on the null, the
    NULL word of the IBM models; sentences without any link (none given, or their words
    did not match their pieces) say nothing about what is unaligned and add nothing.
    ``shift`` as in :func:`alignment_cross_entropy`.
    """
    linked = torch.zeros_like(tgt_mask)
    linked[links[:, 0], links[:, 1]] = True  # (B, T)
    with_links = torch.zeros_like(tgt_mask[:, 0])
    with_links[links[:, 0]] = True  # (B,)
    pieces = tgt_mask.sum(dim=1, keepdim=True) - 1  # (B, 1): target pieces before EOS
    positions = torch.arange(tgt_mask.size(1), device=tgt_mask.device)[None, :]  # (1, T)
    unaligned = (positions < pieces) & ~linked & with_links[:, None]  # (B, T)
    sentence, position = unaligned.nonzero(as_tuple=True)
    null = attention[sentence, position + shift, -1]  # (U,)
    return -null.float().clamp_min(MIN_ATTENTION).log().sum()


class GuidedAlignmentObjective(TranslationObjective):
    """Guided alignment training (Garg et al. 2019): the translation loss plus ``weight`` times
    :func:`alignment_cross_entropy` of one cross-attention head and the batch's word links.

    The head is ``model.alignment_head`` of decoder layer ``model.alignment_layer``; target
    piece ``t`` is read at the step that predicts it (row ``t``) or, with
    ``model.alignment_shift``, at the next step, where it is the decoder input (row
    ``t + 1``); ``nmt align`` reads the same rows. With ``full_context``
    (``model.alignment_full_context``) the head is read in a second decoder pass without
    the future mask, so each step sees the whole target (Garg et al. 2019's full-context
    alignment; the translation loss stays causal). With ``null`` (``model.alignment_null``)
    the head also learns to attend to the null position at the pieces the links leave
    unaligned (:func:`null_cross_entropy`, added to the alignment term). The terms are
    sums over the batch, so the loop's normalisation by target tokens applies to all, as
    in fairseq.
    """

    def __init__(self, label_smoothing: float, weight: float, layer: int, head: int, shift: bool = False,
                 full_context: bool = False, null: bool = False):
        super().__init__(label_smoothing)
        self.weight, self.layer, self.head, self.shift = weight, layer, head, int(shift)
        self.full_context, self.null = full_context, null

    def __call__(self, module, model: Seq2SeqModel, batch: Batch) -> LossTerms:
        if batch.links is None:
            raise NmtError("guided alignment (train.alignment_weight > 0) needs word links in the training split: "
                           "prepare it with data.alignment_path")
        features, attention = module(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, need_attention=True,
                                     features_only=True,
                                     full_context_attention=self.full_context)  # (B, T, F), (B, L, H, T, S)
        loss, nll = label_smoothed_cross_entropy(features, model.output_layer(), batch.tgt_out, batch.tgt_mask,
                                                 self.label_smoothing)
        head = attention[:, self.layer, self.head]  # (B, T, S)
        alignment = alignment_cross_entropy(head, batch.links, batch.link_weights, self.shift)
        if self.null:
            alignment = alignment + null_cross_entropy(head, batch.links, batch.tgt_mask, self.shift)
        return LossTerms(loss + self.weight * alignment.to(loss.dtype), nll, alignment.detach())


def build_objective(config: Config) -> TranslationObjective:
    """The training objective ``config`` asks for: guided alignment when ``train.alignment_weight`` > 0."""
    train = config.train
    if train.alignment_weight > 0:
        model = config.model
        return GuidedAlignmentObjective(train.label_smoothing, train.alignment_weight, model.alignment_layer,
                                        model.alignment_head, model.alignment_shift, model.alignment_full_context,
                                        model.alignment_null)
    return TranslationObjective(train.label_smoothing)
