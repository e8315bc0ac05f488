"""Greedy search: each row takes the chosen next token until EOS (``decode.search: greedy``)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import greedy_tokens
from nmt_cli.decoding.strategies.base import Search, StepOutcome
from nmt_cli.registry import SEARCH_STRATEGIES
from nmt_cli.specials import EOS_ID

__all__ = ["GreedySearch"]


@SEARCH_STRATEGIES.register("greedy")
class GreedySearch(Search):
    """One hypothesis per row, extended by :meth:`choose` (the argmax here) until EOS.

    With ``copies > 1`` each sentence gets that many independent rows (sampling n-best).
    Finished rows leave the batch at once, so the model only runs on open rows. A row
    whose sentence has a prefix takes the prefix's tokens first; the guards and phrases to
    avoid shape each row's distribution (:meth:`Search.shape`) before :meth:`choose`.
    """

    copies = 1

    def __init__(self, requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig,
                 keep_attention: bool = False, generator: torch.Generator | None = None):
        super().__init__(requests, max_lens, decode, keep_attention, generator)
        copies = self.copies
        self.max_lens = max_lens.repeat_interleave(copies)  # (N,)
        self.row_sentence = torch.arange(len(max_lens)).repeat_interleave(copies).tolist()
        self.scores = torch.zeros(len(self.max_lens), dtype=torch.float64, device=max_lens.device)  # (N,)
        #: (N, P) the prefix of each row's sentence (None: no prefix in the batch)
        self.row_prefixes = None if self.prefixes is None else self.prefixes.repeat_interleave(copies, dim=0)
        if self.reads_outputs:
            self.outputs = torch.zeros((len(self.max_lens), 0), dtype=torch.long, device=max_lens.device)  # (N, 0)

    def choose(self, log_probs: Tensor) -> Tensor:
        """The next token of each row (N, V) -> (N,)."""
        return greedy_tokens(log_probs)

    def initial_rows(self) -> Tensor | None:
        if self.copies == 1:
            return None
        return torch.arange(len(self.finished), device=self.max_lens.device).repeat_interleave(self.copies)

    def row_sentences(self) -> Tensor:
        return torch.tensor(self.row_sentence, device=self.max_lens.device)

    def advance(self, step: int, log_probs: Tensor, attention: Tensor | None) -> StepOutcome | None:
        self.history.add_attention(attention)
        forced = None
        if self.row_prefixes is not None and step < self.row_prefixes.size(1):
            forced = self.row_prefixes[:, step]  # (N,)
        log_probs = self.shape(step, log_probs, self.max_lens, forced)  # (N, V)
        tokens = self.choose(log_probs)  # (N,)
        chosen = log_probs.gather(1, tokens[:, None]).squeeze(1)  # (N,)
        self.scores = self.scores + chosen.double()  # (N,)
        chosen_list = chosen.tolist()
        ended = tokens == EOS_ID  # (N,)
        ended_rows = ended.nonzero().squeeze(1).tolist()
        for row in ended_rows:
            self._finish(self.row_sentence[row], row, float(self.scores[row]), chosen_list[row])
        if not ended_rows:
            self.history.add_inputs(tokens.tolist(), None, chosen_list)
            self.keep_outputs(None, tokens)
            return StepOutcome(tokens, None, None)
        keep = (~ended).nonzero().squeeze(1)  # (N',)
        if keep.numel() == 0:
            return None
        kept = keep.tolist()
        self.row_sentence = [self.row_sentence[row] for row in kept]
        self.max_lens = self.max_lens[keep]
        self.scores = self.scores[keep]
        if self.row_prefixes is not None:
            self.row_prefixes = self.row_prefixes[keep]
        tokens = tokens[keep]
        self.history.add_inputs(tokens.tolist(), kept, [chosen_list[row] for row in kept])
        self.keep_outputs(keep, tokens)
        return StepOutcome(tokens, keep, keep)
