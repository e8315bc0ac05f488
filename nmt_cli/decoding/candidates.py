"""A batch's lexical shortlist: each sentence's candidate tokens, as the decoding loop uses them.

Each sentence brings its own candidates (:meth:`nmt_cli.shortlist.Shortlist.candidates`).
A batch computes the logits of their union only, ``ids`` (C,), and masks, row by row, the
tokens of the union that the row's sentence does not have (``allowed`` (B, C)), so that a
sentence's distribution, and so its translation, is the same in any batch
(mozilla/translations#977: a shortlist taken over the whole batch made a sentence's output
depend on its batch-mates). The search strategies still see (N, V) log-probabilities,
``-inf`` outside the candidates (:meth:`BatchCandidates.expand`), so prefixes, constraints,
guards and every strategy work unchanged.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from nmt_cli.decoding.search import NEG_INF
from nmt_cli.models.output_rows import OutputVocabulary

__all__ = ["BatchCandidates"]


class BatchCandidates:
    """The candidates of a batch's sentences: their union ``ids`` (C,) and ``allowed`` (B, C)."""

    def __init__(self, ids: Tensor, allowed: Tensor | None, vocab_size: int):
        self.ids, self.allowed, self.vocab_size = ids, allowed, vocab_size
        #: the output layer's rows of ``ids``, gathered at the first step and kept for the batch
        self.cache: dict = {}

    @classmethod
    def build(cls, candidates: Sequence[np.ndarray], vocab_size: int, device: torch.device) -> "BatchCandidates | None":
        """The batch of sentences with these candidates (sorted target ids each); None when
        every sentence may output every token (the step is then the full one, exactly)."""
        union = np.unique(np.concatenate(list(candidates)))
        allowed = np.zeros((len(candidates), len(union)), dtype=bool)
        for row, ids in enumerate(candidates):
            allowed[row, np.searchsorted(union, ids)] = True
        every = bool(allowed.all())
        if every and len(union) == vocab_size:
            return None
        return cls(torch.as_tensor(union, device=device), None if every else torch.as_tensor(allowed, device=device),
                   vocab_size)

    def step(self, row_sentences: Tensor) -> OutputVocabulary:
        """What the rows of a step may choose; ``row_sentences`` (N,) is each row's sentence."""
        allowed = None if self.allowed is None else self.allowed.index_select(0, row_sentences)  # (N, C)
        return OutputVocabulary(self.ids, allowed, self.cache)

    def expand(self, log_probs: Tensor) -> Tensor:
        """(N, C) log-probabilities of the union -> (N, V), ``-inf`` for every other token."""
        full = log_probs.new_full((log_probs.size(0), self.vocab_size), NEG_INF)  # (N, V)
        return full.index_copy_(1, self.ids, log_probs)
