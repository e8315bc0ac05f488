"""Global attention for the RNN models: one module shape, one score function per variant.

Every variant follows the same three steps (Bahdanau 2014; Luong, Pham and Manning 2015):

* ``score(s_t, h_i)`` for every source position ``i`` (the only part that differs),
* ``alpha_{t,i} = softmax_i(score(s_t, h_i))`` over the real (unpadded) positions,
* ``c_t = sum_i alpha_{t,i} h_i``.

Call shape (JoeyNMT style), shared with :mod:`nmt_cli.models.attention.local`::

    keys = attention.precompute_keys(encoder_states)      # once per sentence, at encode time
    context, weights = attention(query, keys, encoder_states, src_mask, query_positions)

``query`` (B, T, Dq) holds T decoder states (T = 1 while decoding one token), ``keys``
whatever ``precompute_keys`` returned for the (B, S, Dk) encoder states, ``values`` the
(B, S, Dv) encoder states, ``mask`` (B, S) with True = real token. The result is
``context`` (B, T, Dv) and ``weights`` (B, T, S); padded positions get exactly zero weight
and every row sums to one.

Score functions, by ``model.attention`` name:

============  ===========================  =====================================================
name          formula                      precomputed once per sentence
============  ===========================  =====================================================
additive      ``v^T tanh(W[s;h])``         ``W_k h`` (``W[s;h] = W_q s + W_k h``)
concat        ``v^T tanh(W[s;h])``         same module as additive: Luong's "concat" *is*
                                           Bahdanau's additive score (own parameters per model)
dot           ``s^T h``                    nothing (keys are the encoder states)
general       ``s^T W h``                  ``W h``
location      ``alpha = softmax(W_a s)``   nothing; ``W_a`` maps to ``max_positions`` slots,
                                           the first S are kept and masked by source length
============  ===========================  =====================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from nmt_cli.errors import NmtError
from nmt_cli.models.attention.common import attend, masked_softmax
from nmt_cli.registry import ATTENTION_SCORES

__all__ = [
    "AttentionSizes",
    "ScoreAttention",
    "AdditiveAttention",
    "DotAttention",
    "GeneralAttention",
    "LocationAttention",
    "build_score_attention",
]

@dataclass(frozen=True)
class AttentionSizes:
    """The one constructor argument of every attention module."""

    query_dim: int  # Dq: decoder state size
    key_dim: int  # Dk: encoder state size
    hidden_dim: int  # A: hidden layer of the additive score
    max_positions: int  # source positions the location score can address


class ScoreAttention(nn.Module):
    """Masking, softmax and context shared by every score function; subclasses define ``score``."""

    def precompute_keys(self, memory: Tensor) -> Tensor:
        """(B, S, Dk) encoder states -> keys for :meth:`score`; default: the states themselves."""
        return memory

    def score(self, query: Tensor, keys: Tensor) -> Tensor:  # pragma: no cover - abstract
        """(B, T, Dq) queries x precomputed keys -> (B, T, S) unnormalised scores."""
        raise NotImplementedError

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor,
        query_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``alpha = softmax(score(s_t, h_i))`` over real positions, ``c_t = sum_i alpha_{t,i} h_i``.

        ``query_positions`` (B, T) (the decoder step of each query) is ignored by global
        attention; it is accepted so global and local attention share one call shape.
        """
        weights = masked_softmax(self.score(query, keys), mask[:, None, :])  # (B, T, S)
        return attend(weights, values), weights  # (B, T, Dv), (B, T, S)


@ATTENTION_SCORES.register("additive")
@ATTENTION_SCORES.register("concat")
class AdditiveAttention(ScoreAttention):
    """Bahdanau's additive score ``v^T tanh(W[s;h])``, also Luong's "concat".

    ``W[s;h]`` is split as ``W_q s + W_k h`` (``W = [W_q, W_k]``), so the key half ``W_k h``
    is computed once per sentence by :meth:`precompute_keys`. No biases, as in the formula.
    """

    def __init__(self, sizes: AttentionSizes):
        super().__init__()
        self.query_proj = nn.Linear(sizes.query_dim, sizes.hidden_dim, bias=False)  # W_q
        self.key_proj = nn.Linear(sizes.key_dim, sizes.hidden_dim, bias=False)  # W_k
        self.energy = nn.Linear(sizes.hidden_dim, 1, bias=False)  # v

    def precompute_keys(self, memory: Tensor) -> Tensor:
        return self.key_proj(memory)  # (B, S, A)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        hidden = self.query_proj(query)[:, :, None, :] + keys[:, None, :, :]  # (B, T, S, A)
        return self.energy(hidden.tanh()).squeeze(-1)  # (B, T, S)


@ATTENTION_SCORES.register("dot")
class DotAttention(ScoreAttention):
    """Luong's dot score ``s^T h`` (query and encoder states must have the same size)."""

    def __init__(self, sizes: AttentionSizes):
        super().__init__()
        if sizes.query_dim != sizes.key_dim:
            raise ValueError(f"dot attention needs query_dim == key_dim, got {sizes}")

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


@ATTENTION_SCORES.register("general")
class GeneralAttention(ScoreAttention):
    """Luong's general score ``s^T W h``; ``W h`` is computed once per sentence."""

    def __init__(self, sizes: AttentionSizes):
        super().__init__()
        self.key_proj = nn.Linear(sizes.key_dim, sizes.query_dim, bias=False)  # W

    def precompute_keys(self, memory: Tensor) -> Tensor:
        return self.key_proj(memory)  # (B, S, Dq)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


@ATTENTION_SCORES.register("location")
class LocationAttention(ScoreAttention):
    """Luong's location-based attention ``alpha_t = softmax(W_a s_t)``.

    ``W_a`` maps the query to ``max_positions`` scores, one per source position; the first
    S are used (the keys are only read for S) and padding is masked as everywhere else.
    """

    def __init__(self, sizes: AttentionSizes):
        super().__init__()
        self.position_scores = nn.Linear(sizes.query_dim, sizes.max_positions, bias=False)  # W_a

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        source_len = keys.size(1)
        if source_len > self.position_scores.out_features:
            raise NmtError(
                f"source of {source_len} tokens is longer than location attention allows "
                f"(model.max_positions = {self.position_scores.out_features})"
            )
        return self.position_scores(query)[:, :, :source_len]  # (B, T, S)


def build_score_attention(name: str, sizes: AttentionSizes) -> ScoreAttention:
    """The global attention ``model.attention`` names; an unknown name lists the valid ones."""
    return ATTENTION_SCORES.get(name)(sizes)
