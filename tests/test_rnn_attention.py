"""RNN attention checked against naive per-position loops of the seed formulas.

Global: ``alpha_{t,i} = softmax_i(score(s_t, h_i))`` with additive/concat ``v^T tanh(W[s;h])``,
dot ``s^T h``, general ``s^T W h``, location ``softmax(W_a s)``; ``c_t = sum_i alpha_{t,i} h_i``.
Local: ``alpha_{t,i} = align(s_t, h_i) exp(-(i - p_t)^2 / (2 sigma^2))`` on ``[p_t - D, p_t + D]``,
``sigma = D / 2``, local-m ``p_t = t`` and local-p ``p_t = S sigmoid(v_p^T tanh(W_p s_t))``.
"""

from __future__ import annotations

import math

import pytest
import torch

from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.models.attention.local import LocalMonotonicAttention, LocalPredictiveAttention, wrap_local
from nmt_cli.models.attention.scores import AttentionSizes, build_score_attention
from nmt_cli.registry import ATTENTION_SCORES

SCORE_NAMES = ["additive", "concat", "dot", "general", "location"]
DIM = 6
SIZES = AttentionSizes(query_dim=DIM, key_dim=DIM, hidden_dim=5, max_positions=12)
LENGTHS = [9, 4, 6]  # real source lengths; the batch is padded to 9


@torch.no_grad()
def naive_score(attention, name: str, s: torch.Tensor, h: torch.Tensor, i: int) -> float:
    """``score(s, h)`` for one query and one source position, written from the formula."""
    if name in ("additive", "concat"):
        w = torch.cat([attention.query_proj.weight, attention.key_proj.weight], dim=1)  # W = [W_q, W_k]
        return float(attention.energy.weight[0] @ torch.tanh(w @ torch.cat([s, h])))
    if name == "dot":
        return float(s @ h)
    if name == "general":
        return float(s @ attention.key_proj.weight @ h)
    return float((attention.position_scores.weight @ s)[i])  # location: (W_a s)_i


def softmax(values: list[float]) -> list[float]:
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return [e / sum(exps) for e in exps]


def make_inputs(steps: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    batch, source_len = len(LENGTHS), max(LENGTHS)
    query = torch.randn(batch, steps, DIM, generator=generator, dtype=torch.float64)
    memory = torch.randn(batch, source_len, DIM, generator=generator, dtype=torch.float64)
    mask = torch.arange(source_len)[None, :] < torch.tensor(LENGTHS)[:, None]  # (B, S)
    memory = memory.masked_fill(~mask[..., None], 123.0)  # padding must never leak into a context
    return query, memory, mask


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_score_attention(name, SIZES).double()


@pytest.mark.parametrize("name", SCORE_NAMES)
def test_global_attention_matches_the_formula(name):
    attention = build(name)
    query, memory, mask = make_inputs(steps=3)
    context, weights = attention(query, attention.precompute_keys(memory), memory, mask)
    for b, length in enumerate(LENGTHS):
        for t in range(query.size(1)):
            scores = [naive_score(attention, name, query[b, t], memory[b, i], i) for i in range(length)]
            alpha = softmax(scores)
            torch.testing.assert_close(weights[b, t, :length], torch.tensor(alpha, dtype=torch.float64))
            expected_context = sum(a * memory[b, i] for i, a in enumerate(alpha))
            torch.testing.assert_close(context[b, t], expected_context)
    assert torch.all(weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(LENGTHS), 3, dtype=torch.float64))


def test_concat_is_the_additive_score_with_its_own_parameters():
    assert ATTENTION_SCORES.get("concat") is ATTENTION_SCORES.get("additive")
    first, second = build_score_attention("concat", SIZES), build_score_attention("additive", SIZES)
    assert first.energy.weight is not second.energy.weight


def test_unknown_score_lists_the_valid_ones():
    with pytest.raises(ConfigError) as caught:
        build_score_attention("cosine", SIZES)
    assert all(name in str(caught.value) for name in SCORE_NAMES)


def test_location_rejects_sources_longer_than_max_positions():
    attention = build("location")
    query, memory, mask = make_inputs(steps=1)
    too_long = torch.cat([memory, memory], dim=1)  # 18 > max_positions = 12
    with pytest.raises(NmtError, match="max_positions"):
        attention(query, too_long, too_long, torch.cat([mask, mask], dim=1))


def naive_local_weights(attention, name: str, query, memory, centres) -> torch.Tensor:
    """``align`` over the clipped window times the Gaussian, one (b, t) at a time."""
    window, sigma = attention.window, attention.window / 2
    expected = torch.zeros(query.size(0), query.size(1), memory.size(1), dtype=torch.float64)
    for b, length in enumerate(LENGTHS):
        for t in range(query.size(1)):
            p = float(centres[b][t])
            inside = [i for i in range(length) if p - window <= i <= p + window]
            score_attention = attention.score_attention
            scores = [naive_score(score_attention, name, query[b, t], memory[b, i], i) for i in inside]
            for i, align in zip(inside, softmax(scores)):
                expected[b, t, i] = align * math.exp(-((i - p) ** 2) / (2 * sigma**2))
    return expected


@pytest.mark.parametrize("name", SCORE_NAMES)
def test_local_m_matches_the_formula_and_clamps_p_t(name):
    attention = LocalMonotonicAttention(build(name), window=2).double()
    steps = 11  # longer than every source: p_t = t must stay inside the sentence
    query, memory, mask = make_inputs(steps)
    positions = torch.arange(steps).expand(len(LENGTHS), steps)  # (B, T) decoder steps
    context, weights = attention(query, attention.precompute_keys(memory), memory, mask, positions)
    centres = [[min(t, length - 1) for t in range(steps)] for length in LENGTHS]
    expected = naive_local_weights(attention, name, query, memory, centres)
    torch.testing.assert_close(weights, expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(context, expected @ memory.masked_fill(~mask[..., None], 0.0))
    assert torch.all((weights == 0) == (expected == 0))  # exactly zero outside the window


def test_local_windows_are_clipped_at_sentence_bounds():
    attention = LocalMonotonicAttention(build("dot"), window=2).double()
    query, memory, mask = make_inputs(steps=8)
    positions = torch.arange(8).expand(3, 8)
    _, weights = attention(query, memory, memory, mask, positions)
    support = [set(torch.nonzero(weights[1, t]).flatten().tolist()) for t in range(8)]  # length 4
    assert support[0] == {0, 1, 2}  # window [-2, 2] clipped at the start
    assert support[3] == {1, 2, 3} and support[7] == {1, 2, 3}  # p_t clamped to 3, clipped at the end


@pytest.mark.parametrize("name", ["general", "additive", "location"])
def test_local_p_matches_the_formula(name):
    attention = LocalPredictiveAttention(build(name), window=2, query_dim=DIM).double()
    query, memory, mask = make_inputs(steps=4)
    _, centres = attention.window_alignment(query, attention.precompute_keys(memory), mask, None)
    w_p, v_p = attention.position_hidden.weight, attention.position_out.weight[0]
    expected_centres = [
        [length * torch.sigmoid(v_p @ torch.tanh(w_p @ query[b, t])).item() for t in range(4)]
        for b, length in enumerate(LENGTHS)
    ]
    torch.testing.assert_close(centres, torch.tensor(expected_centres, dtype=torch.float64))
    _, weights = attention(query, attention.precompute_keys(memory), memory, mask)
    torch.testing.assert_close(weights, naive_local_weights(attention, name, query, memory, expected_centres),
                               rtol=1e-12, atol=0)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_local_rows_sum_below_one_and_window_softmax_to_one(mode):
    attention = wrap_local(build("general"), mode, 3, SIZES).double()
    query, memory, mask = make_inputs(steps=5)
    positions = torch.arange(5).expand(3, 5)
    align, _ = attention.window_alignment(query, memory, mask, positions)
    _, weights = attention(query, memory, memory, mask, positions)
    torch.testing.assert_close(align.sum(-1), torch.ones(3, 5, dtype=torch.float64))
    assert torch.all(weights.sum(-1) <= 1 + 1e-12) and torch.all(weights <= align)


@pytest.mark.parametrize("mode", ["global", "local-m", "local-p"])
def test_a_block_of_queries_equals_one_query_at_a_time(mode):
    attention = wrap_local(build("additive"), mode, 2, SIZES).double()
    query, memory, mask = make_inputs(steps=6)
    keys, positions = attention.precompute_keys(memory), torch.arange(6).expand(3, 6)
    context, weights = attention(query, keys, memory, mask, positions)
    for t in range(6):
        step_context, step_weights = attention(query[:, t:t + 1], keys, memory, mask, positions[:, t:t + 1])
        torch.testing.assert_close(step_context[:, 0], context[:, t])
        torch.testing.assert_close(step_weights[:, 0], weights[:, t])


