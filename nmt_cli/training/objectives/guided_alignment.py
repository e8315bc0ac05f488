"""Guided alignment (Garg et al. 2019), ``train.objective=guided_alignment``: the translation loss
plus the cross-entropy between one cross-attention head and the training split's word links."""

from __future__ import annotations

import torch
from torch import Tensor

from nmt_cli.config import Config
from nmt_cli.errors import NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.registry import OBJECTIVES
from nmt_cli.training.batching import Batch
from nmt_cli.training.loss import label_smoothed_cross_entropy
from nmt_cli.training.objectives.base import LossTerms, ObjectiveContext
from nmt_cli.training.objectives.cross_entropy import CrossEntropyObjective

__all__ = ["GuidedAlignmentObjective", "alignment_cross_entropy", "null_cross_entropy"]

#: attention weights below this count as this in the log (a link to a weight of exactly 0)
MIN_ATTENTION = 1e-9


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


@OBJECTIVES.register("guided_alignment")
class GuidedAlignmentObjective(CrossEntropyObjective):
    """The translation loss plus ``weight`` times :func:`alignment_cross_entropy` of one
    cross-attention head and the batch's word links; the log shows that cross-entropy per
    target token as ``align_loss``.

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

    terms = ("align_loss",)

    def __init__(self, label_smoothing: float, weight: float, layer: int, head: int, shift: bool = False,
                 full_context: bool = False, null: bool = False):
        super().__init__(label_smoothing)
        self.weight, self.layer, self.head, self.shift = weight, layer, head, int(shift)
        self.full_context, self.null = full_context, null

    @classmethod
    def from_config(cls, config: Config, context: ObjectiveContext) -> "GuidedAlignmentObjective":
        """Refuses a training split without word links, before anything is trained."""
        data = context.data
        if data.split("train").links is None:
            raise NmtError(f"{data.path}: train.alignment_weight > 0 needs word links for the training split; "
                           "prepare with data.alignment_path (a folder holding train.align), or again with --force "
                           "when it was prepared before nmt-cli stored links")
        model = config.model
        return cls(config.train.label_smoothing, config.train.alignment_weight, model.alignment_layer,
                   model.alignment_head, model.alignment_shift, model.alignment_full_context, model.alignment_null)

    def __call__(self, module, model: Seq2SeqModel, batch: Batch) -> LossTerms:
        features, attention = module(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, need_attention=True,
                                     features_only=True,
                                     full_context_attention=self.full_context)  # (B, T, F), (B, L, H, T, S)
        loss, nll = label_smoothed_cross_entropy(features, model.output_layer(), batch.tgt_out, batch.tgt_mask,
                                                 self.label_smoothing)
        head = attention[:, self.layer, self.head]  # (B, T, S)
        alignment = alignment_cross_entropy(head, batch.links, batch.link_weights, self.shift)
        if self.null:
            alignment = alignment + null_cross_entropy(head, batch.links, batch.tgt_mask, self.shift)
        return LossTerms(loss + self.weight * alignment.to(loss.dtype), nll, {"align_loss": alignment.detach()})
