"""Label-smoothed cross entropy over real target tokens."""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_cross_entropy(
    logits: Tensor, target: Tensor, mask: Tensor, smoothing: float
) -> tuple[Tensor, Tensor]:
    """Summed smoothed loss and summed negative log-likelihood over positions where ``mask``.

    The smoothed target puts ``1 - eps`` on the reference and ``eps / V`` on every word:
    ``loss_t = (1 - eps) * (-log p(y_t)) + (eps / V) * sum_v (-log p(v))``
    (the same definition as ``torch.nn.functional.cross_entropy(label_smoothing=eps)``).
    Sums, not means: the caller divides by the number of target tokens of the whole
    update (all accumulated batches and processes), so every token weighs the same.
    Works without boolean indexing, hence without a device synchronisation.

    logits (B, T, V), target (B, T) long, mask (B, T) bool -> (loss_sum, nll_sum) scalars.
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    uniform = -log_probs.mean(dim=-1)  # (B, T): (1/V) sum_v -log p(v)
    loss = (1.0 - smoothing) * nll + smoothing * uniform  # (B, T)
    weights = mask.to(loss.dtype)  # (B, T)
    return (loss * weights).sum(), (nll * weights).sum()
