"""Decoding batches: length-sorted sentences grouped by a source-token budget, and pairs
padded for forced decoding (scoring a given translation, reading its attention)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import Tensor

from nmt_cli.config import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS
from nmt_cli.specials import BOS_ID, EOS_ID, PAD_ID

Pair = tuple[Sequence[int], Sequence[int]]


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


def batch_token_budget(max_tokens: int, device: torch.device) -> int:
    """``decode.max_tokens``, or the budget for ``device`` where it is 0 (the default)."""
    return max_tokens or (CPU_BATCH_TOKENS if device.type == "cpu" else GPU_BATCH_TOKENS)


def pad_sources(sources: Sequence[Sequence[int]], device: torch.device | str) -> tuple[Tensor, Tensor]:
    """Right-padded source ids (B, S) and their mask (B, S), True = real token."""
    width = max(len(source) for source in sources)
    tokens = torch.full((len(sources), width), PAD_ID, dtype=torch.long)  # (B, S)
    for row, source in enumerate(sources):
        tokens[row, : len(source)] = torch.as_tensor(source, dtype=torch.long)
    lengths = torch.tensor([len(source) for source in sources])  # (B,)
    mask = torch.arange(width)[None, :] < lengths[:, None]  # (B, S)
    return tokens.to(device), mask.to(device)


@dataclass
class ForcedBatch:
    """Pairs ``indices`` padded for teacher forcing: ``tgt_in = BOS + y``, ``tgt_out = y + EOS``."""

    indices: list[int]
    src: Tensor  # (B, S)
    src_mask: Tensor  # (B, S)
    tgt_in: Tensor  # (B, T + 1)
    tgt_out: Tensor  # (B, T + 1)
    tgt_mask: Tensor  # (B, T + 1)


def forced_batches(pairs: Sequence[Pair], indices: Sequence[int], batch_size: int,
                   device: torch.device | str) -> Iterator[ForcedBatch]:
    """The pairs ``indices`` (source and target piece ids) in batches of ``batch_size``,
    grouped by similar length so little is padding."""
    order = sorted(indices, key=lambda k: (len(pairs[k][0]) + len(pairs[k][1]), k))
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        src, src_mask = pad_sources([pairs[k][0] for k in chosen], device)
        tgt_in, tgt_mask = pad_sources([[BOS_ID, *pairs[k][1]] for k in chosen], device)
        tgt_out, _ = pad_sources([[*pairs[k][1], EOS_ID] for k in chosen], device)
        yield ForcedBatch(chosen, src, src_mask, tgt_in, tgt_out, tgt_mask)


__all__ = ["token_budget_batches", "batch_token_budget", "pad_sources", "ForcedBatch", "forced_batches"]
