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
