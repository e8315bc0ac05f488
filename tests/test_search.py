"""The pure search-step functions."""

from __future__ import annotations

import math

import pytest
import torch

from nmt_cli.decoding.search import (
    apply_length_limits_,
    beam_step,
    force_tokens_,
    greedy_tokens,
    length_penalty,
    max_output_length,
    max_output_lengths,
    sample_tokens,
    top_k_filter,
    top_p_filter,
)
from nmt_cli.specials import EOS_ID

INF = float("inf")


def test_length_penalty_is_the_gnmt_formula():
    assert length_penalty(7, 0.0) == 1.0
    assert length_penalty(1, 1.0) == 1.0  # (5 + 1) / 6
    assert length_penalty(13, 0.6) == pytest.approx((18 / 6) ** 0.6)


def test_max_output_lengths_are_a_times_source_plus_b_and_positive():
    lengths = torch.tensor([0, 3, 10])
    assert max_output_lengths(lengths, 1.2, 10).tolist() == [10, 13, 22]
    assert max_output_lengths(lengths, 0.5, 0).tolist() == [1, 1, 5]
    for a, b in ((1.2, 10), (0.5, 0), (1.1, 3)):  # the one-sentence twin gives the same limits
        assert [max_output_length(n, a, b) for n in range(40)] == max_output_lengths(torch.arange(40), a, b).tolist()


def test_length_limits_forbid_eos_early_and_force_it_at_the_maximum():
    log_probs = torch.log_softmax(torch.randn(3, 6), dim=-1)
    max_lens = torch.tensor([5, 2, 0])
    limited = apply_length_limits_(log_probs.clone(), step=1, min_len=3, max_lens=max_lens)
    assert limited[0, EOS_ID] == -INF and torch.equal(limited[0, 4:], log_probs[0, 4:])  # before min_len
    assert limited[1, EOS_ID] == -INF  # max 2 not reached at step 1
    assert torch.isfinite(limited[2]).tolist() == [i == EOS_ID for i in range(6)]  # at max: EOS only
    assert limited[2, EOS_ID] == log_probs[2, EOS_ID]  # keeps the model's own EOS probability
    free = apply_length_limits_(log_probs.clone(), step=3, min_len=3, max_lens=max_lens)
    assert torch.equal(free[0], log_probs[0])  # past min_len, below its maximum: untouched


def test_beam_step_adds_running_scores_and_reports_origins():
    log_probs = torch.log(torch.tensor([[[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]]]))  # (B=1, K=2, V=3)
    scores = torch.log(torch.tensor([[0.5, 0.4]]))  # (1, 2)
    top, tokens, origin = beam_step(log_probs, scores, num_candidates=3)
    assert tokens.tolist() == [[1, 0, 2]]
    assert origin.tolist() == [[0, 1, 0]]
    assert top.exp()[0].tolist() == pytest.approx([0.30, 0.20, 0.15])


def test_beam_step_with_a_dead_beam_never_picks_it_over_a_live_one():
    log_probs = torch.log_softmax(torch.randn(2, 3, 5), dim=-1)  # (B, K, V)
    scores = torch.tensor([[0.0, -INF, -INF], [-1.0, -2.0, -INF]])
    top, _tokens, origin = beam_step(log_probs, scores, num_candidates=6)
    assert origin[0, :5].tolist() == [0] * 5 and top[0, 5] == -INF
    assert 2 not in origin[1, :10].tolist() and torch.isfinite(top[1]).all()


def test_beam_step_caps_candidates_at_the_vocabulary():
    top, tokens, origin = beam_step(torch.zeros(1, 1, 3), torch.zeros(1, 1), num_candidates=10)
    assert top.shape == tokens.shape == origin.shape == (1, 3)


@pytest.mark.parametrize("vocab", [1000, 1009, 64 * 11])  # divisor 50, prime (padded), 64
def test_beam_step_over_blocks_equals_one_topk_over_every_extension(vocab):
    """The two-stage selection picks the same scores as a plain topk over all K * V sums."""
    generator = torch.Generator().manual_seed(vocab)
    log_probs = torch.log_softmax(torch.randn(4, 3, vocab, generator=generator), dim=-1)  # (B, K, V)
    log_probs[2, :, :] = -INF
    log_probs[2, :, EOS_ID] = -0.5  # a sentence at its maximum length: EOS only
    scores = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    scores[1, 1:] = -INF  # first step: one live beam
    top, tokens, origin = beam_step(log_probs, scores, num_candidates=6)
    everything = (scores.unsqueeze(-1) + log_probs.double()).view(4, -1)  # (B, K * V)
    assert torch.equal(top, everything.topk(6, dim=1).values)
    assert tokens.max() < vocab and origin.max() < 3
    finite = torch.isfinite(top)
    picked = scores.gather(1, origin) + log_probs[torch.arange(4)[:, None], origin, tokens].double()
    assert torch.equal(picked[finite], top[finite])
    assert finite[2].sum() == 3  # three beams may end with EOS, nothing else


def test_greedy_tokens_are_the_argmax():
    log_probs = torch.log(torch.tensor([[0.2, 0.5, 0.3], [0.7, 0.1, 0.2]]))
    assert greedy_tokens(log_probs).tolist() == [1, 0]


def test_top_k_and_top_p_filters_keep_the_right_support():
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.3, 0.15]]))
    assert torch.isfinite(top_k_filter(logits, 2)).tolist() == [[False, True, True, False]]
    assert torch.isfinite(top_k_filter(logits, 0)).all()
    assert torch.isfinite(top_p_filter(logits, 0.5)).tolist() == [[False, True, False, False]]
    assert torch.isfinite(top_p_filter(logits, 0.75)).tolist() == [[False, True, True, False]]
    assert torch.isfinite(top_p_filter(logits, 0.01)).sum() == 1  # the best token always stays
    assert torch.isfinite(top_p_filter(logits, 1.0)).all()


def test_sampling_follows_the_distribution_and_the_seed():
    log_probs = torch.log(torch.tensor([[0.0, 0.75, 0.25, 0.0]])).expand(4000, 4)
    draws = sample_tokens(log_probs, generator=torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == {1, 2}
    assert (draws == 1).float().mean().item() == pytest.approx(0.75, abs=0.03)
    again = sample_tokens(log_probs, generator=torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)
    cold = sample_tokens(log_probs, temperature=0.05, generator=torch.Generator().manual_seed(0))
    assert (cold == 1).float().mean().item() > 0.99  # low temperature approaches greedy
    hot = sample_tokens(log_probs[:1], temperature=1e6, top_k=1)
    assert hot.tolist() == [1]


def test_length_penalty_prefers_longer_hypotheses_as_alpha_grows():
    short, long = (math.log(0.5), 2), (math.log(0.45), 4)  # (log P, |y| with EOS)

    def score(hypothesis, alpha):
        return hypothesis[0] / length_penalty(hypothesis[1], alpha)

    assert score(short, 0.0) > score(long, 0.0)
    assert score(long, 1.0) > score(short, 1.0)


def test_forced_rows_keep_only_their_token_at_its_own_log_probability():
    log_probs = torch.log_softmax(torch.tensor([[0.1, 2.0, 0.3, 0.5], [1.0, 0.2, 0.4, 0.9], [0.0, 0.0, 3.0, 0.0]]), -1)
    original = log_probs.clone()
    forced = force_tokens_(log_probs, torch.tensor([2, -1, 0]))
    assert forced is log_probs  # in place
    assert forced[0].tolist() == [-INF, -INF, original[0, 2].item(), -INF]
    assert torch.equal(forced[1], original[1])  # a free row is untouched
    assert forced[2].tolist() == [original[2, 0].item(), -INF, -INF, -INF]
    assert greedy_tokens(forced).tolist() == [2, 0, 0]
