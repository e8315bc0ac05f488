"""Scaled dot-product and multi-head attention against naive loops of their formulas."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nmt_cli.models.attention import multihead
from nmt_cli.models.attention.common import masked_softmax
from nmt_cli.models.attention.multihead import (
    MultiHeadAttention,
    SoftmaxAttention,
    explicit_attention,
    fused_attention,
    short_softmax,
)

B, H, T, S, DK = 3, 2, 4, 6, 5


@pytest.fixture
def qkv():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, T, DK, generator=gen, dtype=torch.float64)
    k = torch.randn(B, H, S, DK, generator=gen, dtype=torch.float64)
    v = torch.randn(B, H, S, DK, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 4])
    key_mask = torch.arange(S)[None, :] < lengths[:, None]  # (B, S)
    return q, k, v, key_mask


def naive_attention(q, k, v, allowed):
    """Per (batch, head, query): softmax over allowed keys of q.k_j / sqrt(d_k), then sum_j a_j v_j."""
    batch, heads, queries, d_k = q.shape
    weights = torch.zeros(batch, heads, queries, k.size(2), dtype=q.dtype)
    context = torch.zeros(batch, heads, queries, v.size(-1), dtype=q.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(queries):
                keys = [j for j in range(k.size(2)) if allowed(b, i, j)]
                scores = torch.stack([q[b, h, i] @ k[b, h, j] / math.sqrt(d_k) for j in keys])
                alpha = torch.softmax(scores, dim=0)
                for a, j in zip(alpha, keys):
                    weights[b, h, i, j] = a
                    context[b, h, i] += a * v[b, h, j]
    return context, weights


def test_read_matches_naive_loop(qkv):
    q, k, v, key_mask = qkv
    kernel = SoftmaxAttention()
    context, weights = kernel.read(q, kernel.summarize(k, v, key_mask), need_weights=True)
    expected_context, expected_weights = naive_attention(q, k, v, lambda b, i, j: bool(key_mask[b, j]))
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(context, expected_context)


@pytest.fixture(params=["fused", "explicit"])
def kernel_choice(request, monkeypatch):
    """Each test using it runs once with ``scaled_dot_product_attention`` and once with
    :func:`explicit_attention` for the weightless paths (whichever the key length would pick)."""
    monkeypatch.setattr(multihead, "EXPLICIT_MAX_KEYS", 0 if request.param == "fused" else 10**6)
    return request.param


def test_fast_path_equals_explicit_path_with_gradients(qkv, kernel_choice):
    q, k, v, key_mask = (t.requires_grad_() if t.is_floating_point() else t for t in qkv)
    kernel = SoftmaxAttention()
    summary = kernel.summarize(k, v, key_mask)
    fast, no_weights = kernel.read(q, summary, need_weights=False)
    explicit, _ = kernel.read(q, summary, need_weights=True)
    assert no_weights is None
    torch.testing.assert_close(fast, explicit)
    upstream = torch.randn_like(fast)
    fast_grads = torch.autograd.grad(fast, (q, k, v), upstream)
    explicit_grads = torch.autograd.grad(explicit, (q, k, v), upstream)
    for fast_grad, explicit_grad in zip(fast_grads, explicit_grads):
        torch.testing.assert_close(fast_grad, explicit_grad)


def test_short_keys_on_a_cpu_take_the_explicit_kernel_and_long_keys_the_fused_one(monkeypatch):
    calls = []
    monkeypatch.setattr(multihead, "explicit_attention", lambda *a, **k: calls.append("explicit") or a[0])
    monkeypatch.setattr(multihead, "fused_attention", lambda *a, **k: calls.append("fused") or a[0])
    kernel = SoftmaxAttention()
    for keys in (multihead.EXPLICIT_MAX_KEYS, multihead.EXPLICIT_MAX_KEYS + 1):
        x = torch.randn(2, 2, keys, 4)
        kernel.causal(x, x, x)
        kernel.read(x, kernel.summarize(x, x, torch.ones(2, keys, dtype=torch.bool)), need_weights=False)
    assert calls == ["explicit", "explicit", "fused", "fused"]
    calls.clear()
    low = torch.randn(2, 2, 3, 4, dtype=torch.bfloat16)  # bf16 keeps the fused kernel, run in float32
    kernel.causal(low, low, low)
    assert calls == ["fused"]


def test_explicit_kernel_drops_the_weights_as_the_weights_path_does(qkv):
    """With the same seed, training-mode dropout on the weights gives the same context from
    :func:`explicit_attention` as from the path that returns the weights."""
    q, k, v, key_mask = qkv
    kernel = SoftmaxAttention(dropout=0.3).train()
    summary = kernel.summarize(k, v, key_mask)
    torch.manual_seed(4)
    explicit = explicit_attention(q, k, v, summary["bias"], dropout_p=0.3)
    torch.manual_seed(4)
    with_weights, _ = kernel.read(q, summary, need_weights=True)
    torch.testing.assert_close(explicit, with_weights)
    torch.manual_seed(4)
    assert not torch.allclose(explicit_attention(q, k, v, summary["bias"]), explicit)


def test_masked_keys_get_exactly_zero_weight_and_rows_sum_to_one(qkv):
    q, k, v, key_mask = qkv
    kernel = SoftmaxAttention()
    _, weights = kernel.read(q * 30, kernel.summarize(k, v, key_mask), need_weights=True)  # sharp scores
    padded = ~key_mask[:, None, None, :].expand_as(weights)
    assert torch.all(weights[padded] == 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T, dtype=torch.float64))


def test_causal_matches_naive_loop_and_step_by_step(qkv, kernel_choice):
    _, k, v, _ = qkv
    q = torch.randn(B, H, S, DK, dtype=torch.float64)
    kernel = SoftmaxAttention()
    expected, _ = naive_attention(q, k, v, lambda b, i, j: j <= i)
    torch.testing.assert_close(kernel.causal(q, k, v), expected)
    state, steps = None, []
    for i in range(S):
        context, state = kernel.step(q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], state)
        steps.append(context)
    torch.testing.assert_close(torch.cat(steps, dim=2), expected)
    assert state["k"].shape == (B, H, S, DK)


def test_causal_output_ignores_later_positions(qkv):
    _, k, v, _ = qkv
    q = torch.randn(B, H, S, DK, dtype=torch.float64)
    kernel = SoftmaxAttention()
    before = kernel.causal(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 3:] += 5.0
    v2[:, :, 3:] -= 5.0
    after = kernel.causal(q, k2, v2)
    torch.testing.assert_close(after[:, :, :3], before[:, :, :3])
    assert not torch.allclose(after[:, :, 3:], before[:, :, 3:])


def heads_loop(layer: MultiHeadAttention, queries, keys, allowed):
    """Concat_i Attention(Q W_i^Q, K W_i^K, V W_i^V) W^O, one head at a time."""
    d_model, d_k = layer.d_model, layer.d_model // layer.heads
    w, b = layer.in_proj.weight, layer.in_proj.bias
    heads = []
    for i in range(layer.heads):
        rows = [slice(part * d_model + i * d_k, part * d_model + (i + 1) * d_k) for part in range(3)]
        q = F.linear(queries, w[rows[0]], b[rows[0]])[:, None]  # (B, 1, T, d_k)
        k = F.linear(keys, w[rows[1]], b[rows[1]])[:, None]
        v = F.linear(keys, w[rows[2]], b[rows[2]])[:, None]
        heads.append(naive_attention(q, k, v, allowed)[0][:, 0])  # (B, T, d_k)
    return layer.out_proj(torch.cat(heads, dim=-1))


@pytest.fixture
def layer():
    torch.manual_seed(0)
    return MultiHeadAttention(d_model=8, heads=2, kernel=SoftmaxAttention()).double()


def test_multihead_self_attention_matches_loop_over_heads(layer, kernel_choice):
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    expected = heads_loop(layer, x, x, lambda b, i, j: bool(mask[b, j]))
    real = mask[:, :, None].expand_as(expected)
    torch.testing.assert_close(layer(x, mask)[real], expected[real])


def test_multihead_causal_and_cross_match_loop_over_heads(layer, kernel_choice):
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    memory = torch.randn(2, 6, 8, dtype=torch.float64)
    mask = torch.tensor([[True] * 6, [True, True, False, False, False, False]])
    torch.testing.assert_close(layer.causal(x), heads_loop(layer, x, x, lambda b, i, j: j <= i))
    summary = layer.summarize_memory(memory, mask)
    output, weights = layer.cross(x, summary, need_weights=True)
    torch.testing.assert_close(output, heads_loop(layer, x, memory, lambda b, i, j: bool(mask[b, j])))
    assert weights.shape == (2, 2, 4, 6)
    torch.testing.assert_close(layer.cross(x, summary)[0], output)


def test_multihead_gradients_match_loop_over_heads(layer, kernel_choice):
    """The projection into heads adds its bias while it copies (``_BiasedHeads``): the gradients of the
    input, the memory, W^Q/K/V and their bias are those of the per-head loop, and every head tensor is contiguous."""
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 6, [True, True, False, False, False, False]])
    upstream = torch.randn(2, 4, 8, dtype=torch.float64)
    params = (x, memory, layer.in_proj.weight, layer.in_proj.bias)

    def gradients(output):
        return torch.autograd.grad(output, params, upstream, allow_unused=True)

    fast = layer.causal(x) + layer.cross(x, layer.summarize_memory(memory, mask))[0]
    loop = (heads_loop(layer, x, x, lambda b, i, j: j <= i)
            + heads_loop(layer, x, memory, lambda b, i, j: bool(mask[b, j])))
    for got, want in zip(gradients(fast), gradients(loop)):
        torch.testing.assert_close(got, want)
    assert all(part.is_contiguous() and part.shape == (2, 2, 4, 4) for part in layer._project(x, first=0, parts=3))


def test_a_head_part_without_gradient_gives_its_projection_rows_zero_gradient():
    """Only Q and K used: the V rows of W^{Q,K,V} and of its bias get exactly zero gradient."""
    torch.manual_seed(1)
    layer = MultiHeadAttention(d_model=8, heads=2, kernel=SoftmaxAttention()).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    q, k, _ = layer._project(x, first=0, parts=3)
    (q * k).sum().backward()
    assert torch.count_nonzero(layer.in_proj.weight.grad[16:]) == 0
    assert torch.count_nonzero(layer.in_proj.bias.grad[16:]) == 0
    expected_q = F.linear(x, layer.in_proj.weight[:8], layer.in_proj.bias[:8])
    expected_k = F.linear(x, layer.in_proj.weight[8:16], layer.in_proj.bias[8:16])
    torch.testing.assert_close(layer.in_proj.bias.grad[:8], expected_k.sum((0, 1)))
    torch.testing.assert_close(layer.in_proj.bias.grad[8:16], expected_q.sum((0, 1)))


def test_attention_dropout_only_in_training(qkv):
    q, k, v, key_mask = qkv
    kernel = SoftmaxAttention(dropout=0.5)
    summary = kernel.summarize(k, v, key_mask)
    kernel.eval()
    first, second = kernel.read(q, summary, True)[0], kernel.read(q, summary, True)[0]
    torch.testing.assert_close(first, second)
    kernel.train()
    assert not torch.allclose(kernel.read(q, summary, True)[0], first)


def test_bf16_attention_on_cpu_runs_in_float32_even_under_autocast():
    """``fused_attention`` gives bf16 inputs the float32 result (rounded to bf16), also inside
    a bf16 autocast region, where torch would otherwise cast the inputs back down."""
    torch.manual_seed(6)
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    low = [t.bfloat16().requires_grad_() for t in (q, k, v)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        context = fused_attention(*low, attn_mask=mask)
    assert context.dtype == torch.bfloat16
    from_rounded_inputs = F.scaled_dot_product_attention(*(t.detach().float() for t in low), attn_mask=mask)
    torch.testing.assert_close(context.float(), from_rounded_inputs.bfloat16().float(), rtol=0, atol=0)
    torch.testing.assert_close(context.float(), expected, rtol=2e-2, atol=2e-2)
    context.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.bfloat16 for t in low)


def test_single_query_step_path_equals_naive_attention(qkv):
    """The decoding-step path (one query, padding as an additive bias) computes softmax attention."""
    q, k, v, key_mask = qkv
    kernel = SoftmaxAttention()
    summary = kernel.summarize(k.float(), v.float(), key_mask)
    step_query = q[:, :, :1].float()
    context, _ = kernel.read(step_query, summary, need_weights=False)
    expected, _ = naive_attention(q[:, :, :1], k, v, lambda b, i, j: bool(key_mask[b, j]))
    torch.testing.assert_close(context.double(), expected, rtol=1e-5, atol=1e-5)
    unmasked = explicit_attention(step_query, k.float(), v.float())
    everything, _ = naive_attention(q[:, :, :1], k, v, lambda b, i, j: True)
    torch.testing.assert_close(unmasked.double(), everything, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 5, 15, 16, 40])
def test_short_softmax_equals_softmax_below_and_above_the_short_row_length(length):
    scores = torch.randn(6, 4, 1, length) * 5
    scores[0, 0, 0, 0] = float("-inf")  # a masked position
    if length == 1:
        scores[0, 0, 0, 0] = 0.0
    torch.testing.assert_close(short_softmax(scores), scores.softmax(dim=-1), rtol=1e-6, atol=1e-7)



@pytest.mark.parametrize("length", [1, 5, 15, 16, 40])
def test_short_softmax_gradient_equals_softmax_gradient(length):
    torch.manual_seed(length)
    scores = torch.randn(3, 4, 7, length, dtype=torch.float64) * 3
    if length > 1:
        scores[0, 0, :, 0] = float("-inf")  # a masked key: no weight and no gradient
    ours, theirs = scores.clone().requires_grad_(), scores.clone().requires_grad_()
    upstream = torch.randn_like(scores)
    short_softmax(ours).backward(upstream)
    theirs.softmax(dim=-1).backward(upstream)
    torch.testing.assert_close(short_softmax(ours.detach()), theirs.detach().softmax(dim=-1))
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12)
    finite = torch.randn(2, 3, 4, length, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(short_softmax, (finite,))


@pytest.mark.parametrize("length", [6, 20])
def test_masked_softmax_gives_masked_keys_and_keyless_rows_no_weight_and_no_gradient(length):
    torch.manual_seed(length)
    scores = torch.randn(2, 3, length, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 1, length) > 0.3
    mask[0, 0, 0] = True  # a row with a real key
    mask[1] = False  # rows with none (a fully padded sentence)
    weights = masked_softmax(scores, mask)
    expected = scores.detach().masked_fill(~mask, float("-inf")).softmax(dim=-1)
    torch.testing.assert_close(weights[0], expected[0])
    assert torch.equal(weights[1], torch.zeros_like(weights[1]))
    upstream = torch.randn_like(weights)
    (grad,) = torch.autograd.grad(weights, scores, upstream)
    assert torch.isfinite(grad).all() and torch.equal(grad[1], torch.zeros_like(grad[1]))
    assert torch.equal(grad[0].masked_select(~mask[0].expand(3, length)), torch.zeros(int((~mask[0]).sum()) * 3,
                                                                                    dtype=torch.float64))
