"""Masking and normalisation shared by every attention mechanism."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_softmax(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` where ``mask == False`` positions get exactly zero weight.

    ``mask`` (True = real key) broadcasts against ``scores``. Masked scores become
    ``-inf``, so their weight is ``exp(-inf) = 0`` exactly; a row with no real key (only
    possible for fully padded rows) would be NaN and returns all zeros instead.
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)
    return weights.nan_to_num(0.0)


def attend(weights: Tensor, values: Tensor) -> Tensor:
    """Context vectors ``c_t = sum_i alpha_{t,i} h_i``: (..., T, S) x (..., S, D) -> (..., T, D)."""
    return torch.matmul(weights, values)


def append_null_position(memory: Tensor, mask: Tensor, null: Tensor) -> tuple[Tensor, Tensor]:
    """One learned memory vector after every sentence's padding, always attended to: (B, S, d),
    (B, S) and ``null`` (d,) or (1, 1, d) -> (B, S + 1, d), (B, S + 1).

    The weight a query puts on it is weight it keeps from every source word: the NULL word
    of the IBM models, the leak of Mask-Align (Chen et al. 2021). Its column is the last
    one, so the weights of the real positions ``[:, :S]`` keep their places.
    """
    batch = memory.size(0)
    extended = torch.cat([memory, null.to(memory.dtype).expand(batch, 1, -1)], dim=1)  # (B, S + 1, d)
    return extended, torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
