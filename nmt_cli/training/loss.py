"""Label-smoothed cross entropy of the output layer, computed a block of rows at a time.

The logits of a batch are large (2,000 target tokens x an 8k vocabulary is 64 MiB in
float32) and only the loss needs them. Projecting the decoder features block by block,
and taking each block's gradient while its logits are still in cache, never holds the
whole (N, V) matrix, so the softmax, its ``exp`` and the gradient pass read the logits
from cache instead of waiting on memory. The idea is the "fused linear cross entropy" of Liger Kernel and of Wijmans et
al. 2024 ("Cut Your Losses in Large-Vocabulary Language Models").
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_cli.models.packed import onednn_trains_faster, pack_weight, packed_linear

__all__ = ["label_smoothed_cross_entropy"]

#: logits per block: 4M float32 values (16 MiB) on CPU, small enough for the last-level cache and
#: large enough that the block's products run near their rate (the smallest block measured faster
#: than the half-size one at every shape: bench/train_levers.py); on a GPU bigger blocks keep its
#: matrix multiplications efficient
CPU_BLOCK_ELEMENTS = 2**22
GPU_BLOCK_ELEMENTS = 2**26


def _block_rows(device: torch.device, vocab: int) -> int:
    return max(1, (CPU_BLOCK_ELEMENTS if device.type == "cpu" else GPU_BLOCK_ELEMENTS) // vocab)


#: the smallest target probability whose ``log`` gives the log-partition exactly enough: far
#: above float32's smallest normal number (1.2e-38), below which ``softmax`` loses digits
SMALLEST_TARGET_PROB = 1e-30


def _log_partition(probs: Tensor, labels: Tensor, target_logits: Tensor,
                   row_max: Tensor | Callable[[], Tensor]) -> Tensor:
    """``logsumexp_v z_v`` of each row of a block, from the softmax ``probs`` of its logits.

    ``lse = z_y - log p_y`` for the target ``y``, when every row's ``p_y`` is at least
    :data:`SMALLEST_TARGET_PROB`: two gathers (``z_y``, ``p_y``) instead of two passes over the
    ``(n, V)`` block (``max z``, ``max p``), which on a CPU are what the loss spends most on apart
    from its products. It is taken on a CPU only, where the rows are real target tokens (padding
    rows, whose target may well underflow, were left out) and the check waits for no device.
    Otherwise ``lse = max z - log max p``: ``max p >= 1 / V`` cannot underflow. ``row_max`` is ``max z``
    (n,), or a function that computes it (the logits themselves are gone: the softmax overwrote them).
    """
    if probs.device.type == "cpu":
        target_probs = probs.gather(-1, labels).squeeze(-1)
        if bool((target_probs >= SMALLEST_TARGET_PROB).all()):
            return target_logits - target_probs.log()
    return (row_max() if callable(row_max) else row_max) - probs.amax(dim=-1).log()


class _OutputProducts:
    """A block's two products with the output layer's weight ``W`` (V, F): the logits ``x W^T + b``
    (in ``exact``) and the rows' gradient ``dz W``.

    On a CPU in float32 where oneDNN trains faster than MKL (not on Intel CPUs:
    :func:`~nmt_cli.models.packed.onednn_trains_faster`) both run through oneDNN with ``W``
    reordered once per loss call (:func:`~nmt_cli.models.packed.pack_weight`); ``W`` is the
    largest operand of the update. Elsewhere, torch's products, which write the logits (float32 or
    float64) into one array that every block of the call reuses: the product is slower into a newly
    allocated array (bench/train_levers.py, lever "loss logits: an array per block").
    """

    def __init__(self, projection: Tensor, offset: Tensor | None, exact: torch.dtype, rows_hint: int,
                 with_gradient: bool):
        self.projection, self.offset, self.exact = projection, offset, exact
        self.onednn = projection.dtype == torch.float32 and onednn_trains_faster(projection.device)
        self.reuses_array = not self.onednn and projection.dtype == exact
        self.logits_array: Tensor | None = None  # made by the first block, the largest
        if self.onednn:
            self.logits_weight = pack_weight(projection, rows_hint)  # z = x W^T
            self.gradient_weight = pack_weight(projection.t(), rows_hint) if with_gradient else None  # dz W

    def logits(self, inputs: Tensor) -> Tensor:
        """(n, V) logits of ``inputs`` (n, F), in the array the next block's logits overwrite."""
        if not self.reuses_array:
            return self.fresh_logits(inputs)
        if self.logits_array is None:
            self.logits_array = inputs.new_empty(inputs.size(0), self.projection.size(0))
        out = self.logits_array[:inputs.size(0)]
        if self.offset is None:
            return torch.mm(inputs, self.projection.t(), out=out)
        return torch.addmm(self.offset, inputs, self.projection.t(), out=out)

    def fresh_logits(self, inputs: Tensor) -> Tensor:
        """(n, V) logits of ``inputs`` (n, F) in a new array, leaving the block's untouched."""
        if self.onednn:
            return packed_linear(inputs, self.logits_weight, self.offset)
        return F.linear(inputs, self.projection, self.offset).to(self.exact)

    def row_max(self, inputs: Tensor) -> Tensor:
        """(n,) the largest logit of each row, the product taken again (the block's array holds its softmax)."""
        return self.fresh_logits(inputs).amax(dim=-1)

    def rows_gradient(self, grad: Tensor, out: Tensor) -> None:
        """``out = grad W``: (n, V) -> (n, F), for products in ``exact``."""
        if self.onednn:
            out.copy_(packed_linear(grad, self.gradient_weight))
        else:
            torch.mm(grad, self.projection, out=out)


class _ProjectedSmoothedCrossEntropy(torch.autograd.Function):
    """Summed smoothed loss and NLL of ``rows @ weight^T + bias``; the gradient is taken in ``forward``.

    With ``p = softmax(z)``, target ``y``, smoothing ``eps`` over ``V`` words and row weight ``w``:
    ``loss = w * ((1 - eps) * -log p_y + (eps / V) * sum_v -log p_v)``, so
    ``d loss / dz = w * (p - (1 - eps) * onehot(y) - eps / V)``. Per block of rows this
    gradient is pushed through the projection at once (``d rows = dz W``,
    ``d W += dz^T rows``, ``d b += sum dz``) and the block's logits are dropped. ``backward``
    only scales the stored gradients by the incoming one. The NLL is reported, not
    differentiated.

    A block's ``(n, V)`` logits are read as few times as possible, with one ``exp`` each (the
    part of the loss that is not a matrix product): ``softmax`` overwrites the logits with ``p``
    (in place, so a block needs one ``(n, V)`` array, not two); the log-partition
    ``lse`` comes from ``p_y`` where that is safe (:func:`_log_partition`); ``-log p_y = lse -
    z_y``; the mean of the logits over the vocabulary is ``x . mean(W) + mean(b)``, a product
    of ``F`` numbers a row. The row weights ``w`` scale the ``(n, F)``
    rows and results of the gradient products instead of the ``(n, V)`` block, and the
    constant ``-eps / V`` is added through the products' sums (``d rows -= (eps / V) sum_v
    W_v``; ``d W_v -= (eps / V) sum_i w_i x_i`` for every ``v``) instead of to each logit.
    """

    @staticmethod
    def forward(ctx, rows: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, mask: Tensor,
                smoothing: float, with_gradient: bool) -> tuple[Tensor, Tensor]:
        vocab, device = weight.size(0), rows.device
        autocast = torch.is_autocast_enabled(device.type)
        compute_dtype = torch.get_autocast_dtype(device.type) if autocast else rows.dtype
        exact = torch.float64 if compute_dtype == torch.float64 else torch.float32  # softmax and sums
        with torch.autocast(device.type, enabled=False):
            inputs = rows.to(compute_dtype)
            projection = weight.to(compute_dtype)
            offset = None if bias is None else bias.to(compute_dtype)
            row_weights = mask.to(exact)  # (N,): 1 for real target tokens, 0 for padding
            mean_weight = weight.to(exact).mean(dim=0)  # (F,): mean_v z_v = x . mean_weight + mean(b)
            mean_offset = 0.0 if bias is None else bias.to(exact).mean()
            loss_sum = torch.zeros((), dtype=exact, device=device)
            nll_sum = torch.zeros((), dtype=exact, device=device)
            if with_gradient:
                grad_rows = torch.empty(rows.shape, dtype=exact, device=device)
                grad_weight = torch.zeros(weight.shape, dtype=exact, device=device)
                grad_bias = None if bias is None else torch.zeros(vocab, dtype=exact, device=device)
                weighted_input_sum = torch.zeros(rows.size(1), dtype=exact, device=device)  # sum_i w_i x_i
            step = _block_rows(device, vocab)
            products = _OutputProducts(projection, offset, exact, step, with_gradient)
            for start in range(0, rows.size(0), step):
                block = slice(start, start + step)
                logits = products.logits(inputs[block])  # (n, V)
                labels, weights = target[block, None], row_weights[block]  # (n, 1), (n,)
                target_logits = logits.gather(-1, labels).squeeze(-1)  # (n,): z_y
                row_max = (functools.partial(products.row_max, inputs[block])
                           if device.type == "cpu" else logits.amax(dim=-1))  # (n,): max z, on a CPU only if needed
                probs = torch.ops.aten._softmax.out(logits, -1, False, out=logits)  # in place: the logits are gone
                log_partition = _log_partition(probs, labels, target_logits, row_max)  # (n,): logsumexp_v z_v
                nll = log_partition - target_logits  # (n,)
                if smoothing:
                    exact_inputs = inputs[block].to(exact)
                    mean_logits = exact_inputs @ mean_weight + mean_offset  # (n,)
                    loss = (1.0 - smoothing) * nll + smoothing * (log_partition - mean_logits)
                else:
                    loss = nll
                loss_sum += (loss * weights).sum()
                nll_sum += (nll * weights).sum()
                if not with_gradient:
                    continue
                grad = probs.scatter_add_(-1, labels, probs.new_full(labels.shape, -(1.0 - smoothing)))
                weighted_inputs = inputs[block] * weights[:, None].to(compute_dtype)  # (n, F): w_i x_i
                if compute_dtype == exact:  # float32 / float64: straight into the gradient buffers
                    products.rows_gradient(grad, grad_rows[block])  # (n, F), rows not yet weighted
                    grad_weight.addmm_(grad.t(), weighted_inputs)  # (V, F)
                else:  # bf16 / fp16 matrix products, summed in float32
                    grad_low = grad.to(compute_dtype)
                    grad_rows[block] = grad_low @ projection
                    grad_weight += grad_low.t() @ weighted_inputs
                grad_rows[block] *= weights[:, None]
                if grad_bias is not None:
                    grad_bias += grad.t() @ weights  # (V,)
                if smoothing:
                    weighted_input_sum += weighted_inputs.to(exact).sum(dim=0)
            if with_gradient and smoothing:  # the -eps / V of every logit's gradient
                constant = smoothing / vocab
                grad_rows.sub_(row_weights[:, None] * (constant * weight.to(exact).sum(dim=0)))
                grad_weight.sub_(constant * weighted_input_sum)
                if grad_bias is not None:
                    grad_bias.sub_(constant * row_weights.sum())
        if with_gradient:
            ctx.save_for_backward(grad_rows, grad_weight, grad_bias)
            ctx.dtypes = (rows.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor | None):
        grad_rows, grad_weight, grad_bias = ctx.saved_tensors
        rows_dtype, weight_dtype, bias_dtype = ctx.dtypes
        # scaled first, then cast: under fp16 the loss scale keeps small gradients representable
        return ((grad_rows * grad_loss).to(rows_dtype), (grad_weight * grad_loss).to(weight_dtype),
                None if grad_bias is None else (grad_bias * grad_loss).to(bias_dtype), None, None, None, None)


def label_smoothed_cross_entropy(
    features: Tensor, output_layer: nn.Linear, target: Tensor, mask: Tensor, smoothing: float
) -> tuple[Tensor, Tensor]:
    """Summed smoothed loss and summed negative log-likelihood over positions where ``mask``.

    ``logits = output_layer(features)``; the smoothed target puts ``1 - eps`` on the
    reference and ``eps / V`` on every word:
    ``loss_t = (1 - eps) * (-log p(y_t)) + (eps / V) * sum_v (-log p(v))``
    (the definition of ``torch.nn.functional.cross_entropy(label_smoothing=eps)``).
    Sums, not means: the caller divides by the number of target tokens of the whole
    update (all accumulated batches and processes), so every token weighs the same.
    Only the loss carries a gradient. On a CPU the padding rows are left out before the
    products (a few percent of a batch's rows); elsewhere they stay in with weight 0, as
    leaving them out would wait for the device to count them.

    features (B, T, F), target (B, T) long, mask (B, T) bool -> (loss_sum, nll_sum) scalars
    (float32; float64 for float64 inputs).
    """
    rows, target, mask = features.reshape(-1, features.size(-1)), target.reshape(-1), mask.reshape(-1)  # (B*T, ...)
    if rows.device.type == "cpu" and not bool(mask.all()):
        real = mask.nonzero().squeeze(1)
        rows, target, mask = rows.index_select(0, real), target.index_select(0, real), mask.index_select(0, real)
    weight, bias = output_layer.weight, output_layer.bias
    with_gradient = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (rows, weight, bias)
    )
    return _ProjectedSmoothedCrossEntropy.apply(rows, weight, bias, target, mask, float(smoothing), with_gradient)
