"""The CPU dropout: drop rate, scaling, gradient, independence of its elements, seeding."""

from __future__ import annotations

import math

import pytest
import torch

from nmt_cli.models.dropout import Dropout, add_dropout, dropout

N = 1 << 20


def _sigma(p: float, n: int = N) -> float:
    """Standard deviation of the observed drop rate of ``n`` independent elements."""
    return math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drop_rate_and_scaling_are_those_of_inverted_dropout(p):
    torch.manual_seed(0)
    x = torch.rand(N) + 0.5  # no zeros of its own
    y = dropout(x, p, training=True)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - p) < 5 * _sigma(p)
    levels = round(p * 32768)
    torch.testing.assert_close(y[~dropped], x[~dropped] * (32768 / (32768 - levels)))
    assert abs(levels / 32768 - p) <= 2**-16  # the drop probability is p rounded to 2^-15


def test_elements_sharing_a_random_draw_are_independent():
    """Four elements come from one 64-bit draw: pairs of them must still be dropped together p^2 of the time."""
    torch.manual_seed(1)
    p = 0.3
    dropped = (dropout(torch.ones(N), p, training=True) == 0).view(-1, 4).float()
    for a in range(4):
        assert abs(dropped[:, a].mean().item() - p) < 5 * _sigma(p, N // 4)
        for b in range(a + 1, 4):
            both = (dropped[:, a] * dropped[:, b]).mean().item()
            assert abs(both - p * p) < 5 * _sigma(p * p, N // 4)


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(2)
    x = torch.randn(64, 33, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(64, 33, dtype=torch.float64)
    y = dropout(x, 0.25, training=True)
    y.backward(upstream)
    kept, scale = y != 0, 32768 / (32768 - 8192)  # p = 0.25 is a multiple of 2^-15
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(y, torch.where(kept, x * scale, 0.0))
    torch.testing.assert_close(x.grad, torch.where(kept, upstream * scale, 0.0))


def test_identity_in_evaluation_and_at_zero_and_seeded_in_training():
    x = torch.randn(8, 16)
    module = Dropout(0.1).eval()
    assert module(x) is x and dropout(x, 0.0, training=True) is x
    module.train()
    torch.manual_seed(3)
    first = module(x)
    torch.manual_seed(3)
    assert torch.equal(module(x), first)  # the default generator's seed reproduces the mask
    assert not torch.equal(module(x), first)  # and the next call draws a new one
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))


def test_keeps_dtype_and_shape_of_non_contiguous_input():
    x = torch.randn(16, 24, dtype=torch.bfloat16).t()  # (24, 16), not contiguous
    y = dropout(x, 0.5, training=True)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] * 2)


def test_rejects_a_probability_outside_0_1():
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_residual_equals_the_sum_with_dropout(dtype):
    """``add_dropout(x, y)`` draws the mask ``dropout(y)`` would and gives ``x + dropout(y)`` and its gradients:
    the same elements dropped and the same gradients exactly; the sum within one rounding of ``y * scale``
    (the fused ``x + y * scale`` may skip it, as a fused multiply-add does)."""
    x = torch.randn(24, 7, 16, dtype=dtype, requires_grad=True)
    y = torch.randn(24, 7, 16, dtype=dtype, requires_grad=True)
    upstream = torch.randn(24, 7, 16, dtype=dtype)
    torch.manual_seed(4)
    fused = add_dropout(x, y, 0.3, training=True)
    fused.backward(upstream)
    fused_grads = x.grad.clone(), y.grad.clone()
    x.grad = y.grad = None
    torch.manual_seed(4)
    dropped = dropout(y, 0.3, training=True)
    reference = x + dropped
    reference.backward(upstream)
    assert torch.equal(fused == x, dropped == 0)  # the same mask
    eps = torch.finfo(dtype).eps
    assert ((fused - reference).abs() <= eps * (reference.abs() + dropped.abs())).all()
    assert torch.equal(fused_grads[0], x.grad) and torch.equal(fused_grads[1], y.grad)
    assert torch.equal(fused_grads[0], upstream)  # x's gradient passes through


def test_fused_residual_of_mixed_precision_rounds_once():
    """A bf16 sublayer output added to a float32 stream: float32 result, bf16 gradient of the sublayer."""
    x = torch.randn(32, 64, requires_grad=True)
    y = torch.randn(32, 64).bfloat16().requires_grad_()
    torch.manual_seed(5)
    out = add_dropout(x, y, 0.1, training=True)
    assert out.dtype == torch.float32
    kept = (out - x) != 0
    assert 0 < kept.sum() < kept.numel()
    scale = 32768 / (32768 - round(0.1 * 32768))
    torch.testing.assert_close(out, x + torch.where(kept, y.float() * scale, 0.0))
    out.backward(torch.ones_like(out))
    assert y.grad.dtype == torch.bfloat16
    torch.testing.assert_close(y.grad.float(), torch.where(kept, scale, 0.0).bfloat16().float())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_float_mask_holds_the_scale_and_other_dtypes_keep_a_bool_one(dtype):
    """float32/float64: the mask kept for the backward pass is of the input's dtype, 0 or the scale (applied
    without a conversion); bf16: a bool mask. The same elements are dropped either way."""
    x = torch.rand(4096, dtype=dtype, requires_grad=True) + 0.5
    torch.manual_seed(3)
    out = dropout(x, 0.25, training=True)
    (mask,) = out.grad_fn.saved_tensors
    scale = 32768 / (32768 - round(0.25 * 32768))
    if dtype == torch.bfloat16:
        assert mask.dtype == torch.bool
        kept = mask
    else:
        assert mask.dtype == dtype
        kept = mask != 0
        assert torch.equal(mask[kept], torch.full_like(mask[kept], scale))
    assert torch.equal(kept, out != 0)
    torch.manual_seed(3)
    assert torch.equal(kept, dropout(torch.ones(4096), 0.25, training=True) != 0)  # same draw, any dtype


def test_fused_residual_is_a_plain_sum_outside_training():
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    assert torch.equal(add_dropout(x, y, 0.3, training=False), x + y)
    assert torch.equal(Dropout(0.3).eval().add_to(x, y), x + y)


def test_fused_residual_of_a_broadcast_stream_is_the_sum_with_dropout():
    """``x`` broadcast against ``y`` (shapes differ): the sum with :func:`dropout`, gradients of each shape."""
    x = torch.randn(1, 7, 16, dtype=torch.float64, requires_grad=True)
    y = torch.randn(24, 7, 16, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(6)
    out = add_dropout(x, y, 0.3, training=True)
    torch.manual_seed(6)
    assert torch.equal(out, x + dropout(y, 0.3, training=True))
    out.sum().backward()
    assert x.grad.shape == x.shape and y.grad.shape == y.shape
    assert torch.equal(x.grad, torch.full_like(x, 24.0))


def test_fused_residual_gives_no_gradient_to_a_sublayer_that_needs_none():
    x = torch.randn(8, 16, requires_grad=True)
    y = torch.randn(8, 16)  # no gradient wanted
    add_dropout(x, y, 0.2, training=True).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x)) and y.grad is None
