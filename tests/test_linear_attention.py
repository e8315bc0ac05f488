"""Linear attention (Katharopoulos et al. 2020) against the naive formula
``V'_i = sum_j sim(Q_i, K_j) V_j / sum_j sim(Q_i, K_j)`` with ``sim(q, k) = phi(q) . phi(k)``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt_cli.models.attention.linear import EPS, LinearAttention, feature_map

B, H, N, D, M = 2, 3, 11, 4, 5


@pytest.fixture
def qkv():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, N, D, generator=gen, dtype=torch.float64)
    k = torch.randn(B, H, N, D, generator=gen, dtype=torch.float64)
    v = torch.randn(B, H, N, M, generator=gen, dtype=torch.float64)
    return q, k, v


def naive_linear_attention(q, k, v, allowed):
    """Loop of the formula over (batch, head, query); ``allowed(b, i, j)`` selects the keys."""
    out = torch.zeros(q.shape[:3] + (v.size(-1),), dtype=q.dtype)
    for b in range(q.size(0)):
        for h in range(q.size(1)):
            for i in range(q.size(2)):
                keys = [j for j in range(k.size(2)) if allowed(b, i, j)]
                sims = [feature_map(q[b, h, i]) @ feature_map(k[b, h, j]) for j in keys]
                numerator = sum(s * v[b, h, j] for s, j in zip(sims, keys))
                out[b, h, i] = numerator / (sum(sims) + EPS)
    return out


def test_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-30, 5, 50, dtype=torch.float64)
    torch.testing.assert_close(feature_map(x), F.elu(x) + 1)
    assert torch.all(feature_map(x) > 0)


def test_non_causal_matches_naive_formula_with_padded_keys_excluded(qkv):
    q, k, v = qkv
    key_mask = torch.arange(N)[None, :] < torch.tensor([N, 6])[:, None]  # (B, N)
    kernel = LinearAttention()
    summary = kernel.summarize(k, v, key_mask)
    fast, _ = kernel.read(q, summary, need_weights=False)
    explicit, weights = kernel.read(q, summary, need_weights=True)
    expected = naive_linear_attention(q, k, v, lambda b, i, j: bool(key_mask[b, j]))
    torch.testing.assert_close(fast, expected)
    torch.testing.assert_close(explicit, expected)
    assert torch.all(weights[~key_mask[:, None, None, :].expand_as(weights)] == 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, N, dtype=torch.float64))


def test_padded_keys_do_not_change_the_output(qkv):
    q, k, v = qkv
    kernel = LinearAttention()
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[:, 7:] = False
    padded, _ = kernel.read(q, kernel.summarize(k, v, mask), need_weights=False)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 7:], v2[:, :, 7:] = 100.0, -100.0
    garbage, _ = kernel.read(q, kernel.summarize(k2, v2, mask), need_weights=False)
    cut, _ = kernel.read(q, kernel.summarize(k[:, :, :7], v[:, :, :7], mask[:, :7]), need_weights=False)
    torch.testing.assert_close(garbage, padded)
    torch.testing.assert_close(cut, padded)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4, 7, 11, 64])
def test_causal_matches_naive_formula_for_any_chunk_size(qkv, chunk_size):
    q, k, v = qkv
    expected = naive_linear_attention(q, k, v, lambda b, i, j: j <= i)
    torch.testing.assert_close(LinearAttention(chunk_size).causal(q, k, v), expected)


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 64])
def test_recurrent_form_equals_parallel_causal_form(qkv, chunk_size):
    q, k, v = qkv
    kernel = LinearAttention(chunk_size)
    state, steps = None, []
    for i in range(N):
        out, state = kernel.step(q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], state)
        steps.append(out)
        assert state["s"].shape == (B, H, D, M) and state["z"].shape == (B, H, 1, D)  # constant size
    torch.testing.assert_close(torch.cat(steps, dim=2), kernel.causal(q, k, v))


@pytest.mark.parametrize("chunk_size", [2, 4, 64])
def test_causal_output_does_not_depend_on_later_inputs(qkv, chunk_size):
    q, k, v = qkv
    kernel = LinearAttention(chunk_size)
    before = kernel.causal(q, k, v)
    for i in (0, 4, 9):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for t in (q2, k2, v2):
            t[:, :, i + 1 :] += torch.randn_like(t[:, :, i + 1 :]) * 3
        after = kernel.causal(q2, k2, v2)
        torch.testing.assert_close(after[:, :, : i + 1], before[:, :, : i + 1])
        assert not torch.allclose(after[:, :, i + 1 :], before[:, :, i + 1 :])


def test_causal_training_never_stores_a_per_position_state():
    """Chunking keeps what backward saves far below the (N, D, M) tensor of a plain cumsum."""
    length, dim, chunk = 2048, 16, 64
    q, k, v = (torch.randn(1, 1, length, dim, requires_grad=True) for _ in range(3))
    saved_sizes = []

    def remember(tensor):
        saved_sizes.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(remember, lambda tensor: tensor):
        out = LinearAttention(chunk_size=chunk).causal(q, k, v)
    out.sum().backward()
    assert max(saved_sizes) <= length * max(chunk, dim)  # vs length * dim * dim = 524,288
    assert torch.isfinite(q.grad).all()


def test_fully_padded_memory_gives_zeros_not_nan(qkv):
    q, k, v = qkv
    kernel = LinearAttention()
    mask = torch.zeros(B, N, dtype=torch.bool)
    out, weights = kernel.read(q, kernel.summarize(k, v, mask), need_weights=True)
    assert torch.all(out == 0) and torch.all(weights == 0)
