"""Forced scoring: the log-probability a model (or an ensemble) gives a given translation.

``log P(y | x) = sum_t log p(y_t | y_<t, x)`` over the target pieces and the closing EOS,
read from one teacher-forced pass (``model.forced_log_probs``) per batch. For filtering
noisy pairs and reranking n-best lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from nmt_cli.decoding.batching import Pair, forced_batches
from nmt_cli.models.base import Seq2SeqModel

__all__ = ["PairScore", "score_pairs"]


@dataclass
class PairScore:
    """A pair's score: ``log_prob`` = ``log P(y | x)`` and the log-probability of each
    target piece, EOS last (so ``tokens`` counts the pieces plus one)."""

    log_prob: float
    token_log_probs: list[float]

    @property
    def tokens(self) -> int:
        return len(self.token_log_probs)

    @property
    def per_token(self) -> float:
        return self.log_prob / self.tokens


@torch.inference_mode()
def score_pairs(model: Seq2SeqModel, pairs: Sequence[Pair], device: torch.device | str,
                batch_size: int = 32) -> list[PairScore | None]:
    """The score of every (source ids, target ids) pair, in input order; a pair whose
    source is empty has none (None), as translation gives it no output."""
    results: list[PairScore | None] = [None] * len(pairs)
    runnable = [k for k, (src, _) in enumerate(pairs) if len(src)]
    for batch in forced_batches(pairs, runnable, batch_size, device):
        log_probs = model.forced_log_probs(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V)
        picked = log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1).double().cpu()  # (B, T)
        for row, k in enumerate(batch.indices):
            values = picked[row, : len(pairs[k][1]) + 1]
            results[k] = PairScore(float(values.sum()), values.tolist())
    return results
