"""Inverted dropout whose random mask is cheap to draw on a CPU.

Dropout (Srivastava et al. 2014), as the Transformer and RNN papers apply it: during training
each element is zeroed with probability ``p`` and the kept ones are scaled by ``1 / (1 - p)``,
so that ``E[dropout(x)] = x``; at inference it is the identity.

torch's CPU dropout draws a 32-bit Mersenne Twister number per element (``bernoulli_``),
which costs many times more than multiplying by the mask, and a Transformer has dozens of
dropout sites. Here one 64-bit draw makes the mask of four elements. It is cut into 16-bit
words, and an element is dropped when the low 15 bits of its word, uniform on
``0 .. 32767``, fall below ``t = round(p * 32768)``. The drop probability is ``t / 32768``,
``p`` rounded to a multiple of 2^-15 (at most 1.6e-5 away), and the kept elements are
scaled by ``32768 / (32768 - t)``, so the expectation stays exactly ``x``. The mask comes
from torch's default generator, so ``torch.manual_seed`` and the saved RNG states of a
checkpoint reproduce it. For float32 and float64 the mask is drawn in that dtype with the
scale in it, so that applying it, forward and backward, is one product with no conversion
(an element of that dtype kept for the backward pass, not a byte); for other dtypes it is a bool mask
applied as a product with its bytes and the scale. A residual connection's ``x + dropout(y)``
is one ``addcmul`` (:func:`add_dropout`). Other devices, and a ``p`` that rounds to 0 or 1, use
torch's own dropout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Dropout", "dropout", "add_dropout"]

_LEVELS = 1 << 15  # values of the 15 random bits of a 16-bit word
_LOW_BITS = _LEVELS - 1


def _keep_mask(shape: torch.Size, drop_levels: int, scaled: torch.dtype | None) -> Tensor:
    """A mask of ``shape``, each element dropped with probability ``drop_levels / 2^15``.

    ``random_`` fills an int64 with 63 random bits (the sign bit is 0); each of its four
    16-bit words therefore has 15 random low bits, whatever the byte order. With a dtype
    ``scaled`` (:func:`_scaled_mask_dtype`) the mask is of that dtype and holds the kept
    elements' scale ``2^15 / (2^15 - drop_levels)`` (0 where dropped); without, it is a bool
    mask (kept: True).
    """
    count = shape.numel()
    words = torch.empty((count + 3) // 4, dtype=torch.int64).random_().view(torch.int16)[:count]
    low_bits = words.bitwise_and_(_LOW_BITS)
    if scaled is None:
        return (low_bits >= drop_levels).view(shape)
    kept = torch.ge(low_bits, drop_levels, out=torch.empty(count, dtype=scaled))
    return kept.mul_(_LEVELS / (_LEVELS - drop_levels)).view(shape)


def _scaled_mask_dtype(*tensors: Tensor) -> torch.dtype | None:
    """The dtype of a scaled mask for these tensors, all float32 or all float64; None (a bool mask) otherwise."""
    dtypes = {tensor.dtype for tensor in tensors}
    return dtypes.pop() if len(dtypes) == 1 and dtypes <= {torch.float32, torch.float64} else None


def _scale_kept(x: Tensor, keep: Tensor, scale: float) -> Tensor:
    """``where(keep, x, 0) * scale`` for finite ``x``, as a product with the mask (a scaled one's
    values, or a bool one's bytes), which a CPU runs faster than ``where`` with a scalar; like
    torch's dropout, a dropped inf or NaN gives NaN."""
    if keep.dtype != torch.bool:
        return x * keep
    return (x * keep.view(torch.uint8)).mul_(scale)


class _ScaleKept(torch.autograd.Function):
    """:func:`_scale_kept` of ``x``; the gradient is the same map of the incoming one."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return _scale_kept(x, keep, scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (keep,) = ctx.saved_tensors
        return _scale_kept(grad, keep, ctx.scale), None, None


class _AddScaledKept(torch.autograd.Function):
    """``x + y * keep * scale`` in one ``addcmul``, the residual connection's ``x + dropout(y)``;
    the gradient of ``x`` is the incoming one, that of ``y`` its dropout map (:func:`_scale_kept`)."""

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale, ctx.y_dtype = scale, y.dtype
        if keep.dtype != torch.bool:
            return torch.addcmul(x, y, keep)
        return torch.addcmul(x, y, keep.view(torch.uint8), value=scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (keep,) = ctx.saved_tensors
        grad_y = _scale_kept(grad, keep, ctx.scale).to(ctx.y_dtype) if ctx.needs_input_grad[1] else None
        return grad, grad_y, None, None


def _drop_levels(x: Tensor, p: float) -> int | None:
    """``round(p * 2^15)`` where the cheap mask applies (CPU, ``0 < p < 1`` after rounding); None elsewhere."""
    drop_levels = round(p * _LEVELS)
    return drop_levels if x.device.type == "cpu" and 0 < drop_levels < _LEVELS else None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout of ``x`` with drop probability ``p`` while ``training``; ``x`` itself otherwise."""
    if not training or p == 0:
        return x
    drop_levels = _drop_levels(x, p)
    if drop_levels is None:
        return F.dropout(x, p, training=True)
    mask = _keep_mask(x.shape, drop_levels, _scaled_mask_dtype(x))
    return _ScaleKept.apply(x, mask, _LEVELS / (_LEVELS - drop_levels))


def add_dropout(x: Tensor, y: Tensor, p: float, training: bool) -> Tensor:
    """``x + dropout(y, p, training)``, one ``addcmul`` on a CPU (a residual connection).

    The same mask as :func:`dropout` draws. Where ``x`` and ``y`` are both float32 (or float64)
    ``addcmul`` multiplies by the scaled mask and adds, and may skip rounding the product (a
    fused multiply-add): the sum differs from ``x + dropout(y)`` by at most that rounding. Where
    the sum would first round ``dropout(y)`` to ``y``'s lower precision (a bf16 sublayer output
    added to autocast's float32 stream, or both bf16) ``y * scale`` is rounded once, in the
    result's dtype, and that rounding is skipped, so bf16 training differs from the unfused
    sum in the last bits. Shapes that differ (a broadcast ``x``) take the sum with :func:`dropout`.
    """
    if not training or p == 0:
        return x + y
    drop_levels = _drop_levels(y, p)
    if drop_levels is None or x.shape != y.shape:
        return x + dropout(y, p, training)
    mask = _keep_mask(y.shape, drop_levels, _scaled_mask_dtype(x, y))
    return _AddScaledKept.apply(x, y, mask, _LEVELS / (_LEVELS - drop_levels))


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` (its argument check and repr) whose forward is :func:`dropout` (never in place)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def add_to(self, x: Tensor, y: Tensor) -> Tensor:
        """``x + self(y)``, fused where :func:`add_dropout` can."""
        return add_dropout(x, y, self.p, self.training)
