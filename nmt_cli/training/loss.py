"""Label-smoothed cross entropy over real target tokens, with a fused backward pass."""

from __future__ import annotations

import torch
from torch import Tensor


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Summed smoothed loss and NLL of rows of logits, with the gradient written out by hand.

    With ``p = softmax(z)``, ``nll = -log p_y`` and ``uniform = (1/V) sum_v -log p_v``:
    ``d nll / dz = p - onehot(y)`` and ``d uniform / dz = p - 1/V``.

    Autograd of ``log_softmax -> gather -> mean`` materialises several (N, V) tensors
    (log-probabilities, a zero-filled gather gradient, the mean's expanded gradient) and
    was half of a small Transformer's training step on CPU; here the forward pass keeps
    only the log-probabilities and the backward pass is ``exp`` of them plus a scatter.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, weights: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
        log_probs = torch.log_softmax(logits, dim=-1)  # (N, V): one fused kernel
        nll = -log_probs.gather(-1, target[:, None]).squeeze(-1)  # (N,)
        loss = nll if smoothing == 0 else (1.0 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)
        ctx.save_for_backward(log_probs, target, weights)
        ctx.smoothing = smoothing
        return (loss * weights).sum(), (nll * weights).sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor | None, grad_nll: Tensor | None):
        log_probs, target, weights = ctx.saved_tensors
        smoothing, vocab = ctx.smoothing, log_probs.size(-1)
        loss_rows = weights * (grad_loss if grad_loss is not None else 0.0)  # (N,)
        nll_rows = weights * (grad_nll if grad_nll is not None else 0.0)  # (N,)
        grad = log_probs.exp()  # (N, V): softmax p
        grad.mul_((loss_rows + nll_rows)[:, None])
        if smoothing:
            grad.sub_((loss_rows * (smoothing / vocab))[:, None])
        grad.scatter_add_(-1, target[:, None], -((1.0 - smoothing) * loss_rows + nll_rows)[:, None])
        return grad, None, None, None


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
    vocab = logits.size(-1)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # the softmax over the vocabulary in float32 under autocast
    rows = logits.reshape(-1, vocab)  # (B*T, V)
    weights = mask.reshape(-1).to(rows.dtype)  # (B*T,)
    return _SmoothedCrossEntropy.apply(rows, target.reshape(-1), weights, float(smoothing))


__all__ = ["label_smoothed_cross_entropy"]
