"""Decoding batches: length-sorted sentences grouped by a source-token budget."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.specials import PAD_ID


def token_budget_batches(lengths: Sequence[int], max_tokens: int, max_sentences: int = 0) -> list[list[int]]:
    """Indices grouped into batches of at most ``max_tokens`` padded source tokens.

    Sentences are taken longest first, so each batch holds similar lengths and little
    padding; a sentence longer than the budget gets a batch of its own. ``max_sentences``
    (0 = none) also caps the sentences per batch.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        widest = lengths[current[0]] if current else lengths[index]
        full = (len(current) + 1) * max(widest, 1) > max_tokens or len(current) == max_sentences
        if current and full:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def pad_sources(sources: Sequence[Sequence[int]], device: torch.device | str) -> tuple[Tensor, Tensor]:
    """Right-padded source ids (B, S) and their mask (B, S), True = real token."""
    width = max(len(source) for source in sources)
    tokens = torch.full((len(sources), width), PAD_ID, dtype=torch.long)  # (B, S)
    for row, source in enumerate(sources):
        tokens[row, : len(source)] = torch.as_tensor(source, dtype=torch.long)
    lengths = torch.tensor([len(source) for source in sources])  # (B,)
    mask = torch.arange(width)[None, :] < lengths[:, None]  # (B, S)
    return tokens.to(device), mask.to(device)


__all__ = ["token_budget_batches", "pad_sources"]
