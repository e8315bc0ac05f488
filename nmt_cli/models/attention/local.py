"""Luong's local attention (Luong, Pham and Manning 2015) around any global score function.

At decoder step ``t`` an aligned source position ``p_t`` is chosen and only the window
``[p_t - D, p_t + D]`` (``D = model.local_window``) is attended, clipped at the sentence
bounds (positions ``0 .. S-1`` of the real, unpadded source):

* local-m (monotonic): ``p_t = t``, the decoder step index. When the target is longer than
  the source, ``p_t`` is clamped into ``[0, S - 1]`` so the window stays on the last source
  words instead of sliding past the sentence and attending to nothing.
* local-p (predictive): ``p_t = S * sigmoid(v_p^T tanh(W_p s_t))`` with S the sentence's real
  length, so ``p_t`` is a real number in ``[0, S]``.

The weights are the alignment softmax over the window positions only (the score function's
``align(s_t, h_i)``), multiplied by a Gaussian centred on ``p_t``::

    alpha_{t,i} = align(s_t, h_i) * exp(-(i - p_t)^2 / (2 sigma^2)),   sigma = D / 2

Every position outside the window (or padded) gets exactly zero weight. As in the paper the
Gaussian factor is applied after the softmax, so **a row of local weights sums to less than
one** (to exactly one only if the window softmax puts all its mass on ``i = p_t``); the
context is ``c_t = sum_i alpha_{t,i} h_i`` with these weights. :meth:`LocalAttention.window_alignment`
returns the pre-Gaussian window softmax (rows sum to one) and ``p_t`` for inspection.

Scores are computed over the whole source and masked outside the window: cheap at NMT lengths
and vectorised over the batch and over all T queries of a teacher-forced block.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt_cli.models.attention.common import attend, masked_softmax
from nmt_cli.models.attention.scores import AttentionSizes, ScoreAttention

__all__ = [
    "LocalAttention",
    "LocalMonotonicAttention",
    "LocalPredictiveAttention",
    "wrap_local",
]


def _offsets(centres: Tensor, source_len: int) -> Tensor:
    """``i - p_t`` for every source position ``i``: (B, T) centres -> (B, T, S)."""
    positions = torch.arange(source_len, device=centres.device, dtype=centres.dtype)  # (S,)
    return positions - centres[..., None]  # (B, T, S)


class LocalAttention(nn.Module):
    """Window ``[p_t - D, p_t + D]`` with Gaussian weighting around a global ``ScoreAttention``.

    Same call shape as :class:`ScoreAttention`; subclasses choose ``p_t``.
    """

    def __init__(self, score_attention: ScoreAttention, window: int):
        super().__init__()
        self.score_attention = score_attention
        self.window = window
        self.sigma = window / 2

    def precompute_keys(self, memory: Tensor) -> Tensor:
        return self.score_attention.precompute_keys(memory)

    def aligned_positions(
        self, query: Tensor, source_lengths: Tensor, query_positions: Tensor
    ) -> Tensor:  # pragma: no cover - abstract
        """(B, T, Dq) queries, (B,) real source lengths, (B, T) decoder steps -> (B, T) ``p_t``."""
        raise NotImplementedError

    def window_alignment(
        self, query: Tensor, keys: Tensor, mask: Tensor, query_positions: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The softmax of the scores over the window positions only, and ``p_t``.

        Returns ``align`` (B, T, S), zero outside the window and on padding, rows summing to
        one, and ``p_t`` (B, T).
        """
        source_lengths = mask.sum(dim=-1)  # (B,)
        centres = self.aligned_positions(query, source_lengths, query_positions)  # (B, T)
        inside = _offsets(centres, mask.size(1)).abs() <= self.window  # (B, T, S)
        in_window = inside & mask[:, None, :]  # (B, T, S)
        align = masked_softmax(self.score_attention.score(query, keys), in_window)  # (B, T, S)
        return align, centres

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor,
        query_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``alpha_{t,i} = align(s_t, h_i) exp(-(i - p_t)^2 / (2 sigma^2))``, ``c_t = sum_i alpha_{t,i} h_i``.

        ``query_positions`` (B, T): the decoder step ``t`` of each query (required by local-m).
        """
        align, centres = self.window_alignment(query, keys, mask, query_positions)
        offsets = _offsets(centres, mask.size(1))  # (B, T, S)
        weights = align * torch.exp(-offsets.square() / (2 * self.sigma**2))  # (B, T, S)
        return attend(weights, values), weights  # (B, T, Dv), (B, T, S)


class LocalMonotonicAttention(LocalAttention):
    """local-m: ``p_t = t``, clamped into ``[0, S - 1]`` of each sentence."""

    def aligned_positions(self, query: Tensor, source_lengths: Tensor, query_positions: Tensor) -> Tensor:
        last = (source_lengths - 1).clamp(min=0)[:, None]  # (B, 1)
        return torch.minimum(query_positions, last).to(query.dtype)  # (B, T)


class LocalPredictiveAttention(LocalAttention):
    """local-p: ``p_t = S * sigmoid(v_p^T tanh(W_p s_t))``, S = the sentence's real length."""

    def __init__(self, score_attention: ScoreAttention, window: int, query_dim: int):
        super().__init__(score_attention, window)
        self.position_hidden = nn.Linear(query_dim, query_dim, bias=False)  # W_p
        self.position_out = nn.Linear(query_dim, 1, bias=False)  # v_p

    def aligned_positions(self, query: Tensor, source_lengths: Tensor, query_positions: Tensor) -> Tensor:
        energy = self.position_out(torch.tanh(self.position_hidden(query))).squeeze(-1)  # (B, T)
        return source_lengths[:, None].to(query.dtype) * torch.sigmoid(energy)  # (B, T)


def wrap_local(score_attention: ScoreAttention, mode: str, window: int, sizes: AttentionSizes) -> nn.Module:
    """``score_attention`` wrapped in local-m or local-p attention, or itself for ``"global"``
    (``model.local_attention``)."""
    if mode == "local-m":
        return LocalMonotonicAttention(score_attention, window)
    if mode == "local-p":
        return LocalPredictiveAttention(score_attention, window, sizes.query_dim)
    return score_attention
