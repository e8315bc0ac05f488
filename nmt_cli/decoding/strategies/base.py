"""What every search strategy shares: finished hypotheses, back-pointers, per-sentence prefixes.

A strategy knows which decoder row belongs to which sentence, the running scores, the
finished hypotheses and the back-pointers needed to rebuild them. The loop in
:mod:`nmt_cli.decoding.generator` hands it the log-probabilities of every output
position and applies the reordering it returns (OpenNMT's decode-strategy idea); the
arithmetic itself is in the pure functions of :mod:`nmt_cli.decoding.search`.

Running scores are kept in float64: adding a float32 log-probability to them is exact,
so ranking candidates by running score never disagrees with ranking them by their
log-probability, and beam size 1 reproduces greedy search exactly.

Each strategy is a module of this package registered in
:data:`~nmt_cli.registry.SEARCH_STRATEGIES` under the name ``decode.search`` gives it; an
entry is called with a batch's :class:`~nmt_cli.decoding.request.Request` s, their
output limits, the search settings, whether to keep attention and the batch's random
generator (``None`` unless sampling), and returns a :class:`Search`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import length_penalty


@dataclass
class Finished:
    """A completed hypothesis: ids without EOS, scores, attention per token (T, L, H, S)."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: list[Tensor] | None


@dataclass
class StepOutcome:
    """What the loop does before the next step.

    ``tokens`` (N',) are the inputs of the next step; ``state_rows`` (N',) the rows of
    the previous decoder state each new row continues (``None``: all rows, unchanged);
    ``memory_rows`` (N',) the rows of the encoder memory to keep (``None``: unchanged).
    """

    tokens: Tensor
    state_rows: Tensor | None
    memory_rows: Tensor | None


class History:
    """Per-step back-pointers: a row's prefix is rebuilt only when it finishes.

    Step ``t`` stores, for every decoder row, the token it was fed, the row of step
    ``t - 1`` it continues and (optionally) the cross-attention it produced (L, H, S).
    """

    def __init__(self, keep_attention: bool):
        self.keep_attention = keep_attention
        self._inputs: list[list[int]] = [[]]  # step 0 is fed BOS
        self._parents: list[list[int] | None] = [None]
        self._attention: list[Tensor | None] = []

    def add_attention(self, attention: Tensor | None) -> None:
        """Cross-attention (N, L, H, S) of the step being advanced."""
        self._attention.append(attention.float() if self.keep_attention and attention is not None else None)

    def add_inputs(self, tokens: list[int], parents: list[int] | None) -> None:
        """Inputs of the next step and the row each continues (``None``: the same row)."""
        self._inputs.append(tokens)
        self._parents.append(parents)

    def trace(self, row: int) -> tuple[list[int], list[Tensor] | None]:
        """Tokens held by ``row`` of the latest step and the attention that predicted each."""
        tokens: list[int] = []
        attention: list[Tensor] = []
        for step in range(len(self._inputs) - 1, 0, -1):
            tokens.append(self._inputs[step][row])
            parents = self._parents[step]
            row = row if parents is None else parents[row]
            if self.keep_attention and self._attention[step - 1] is not None:
                attention.append(self._attention[step - 1][row])  # (L, H, S)
        tokens.reverse()
        attention.reverse()
        return tokens, attention if self.keep_attention else None


class Search:
    """Bookkeeping shared by the strategies: finished hypotheses per sentence.

    ``requests`` are the batch's sentences and ``max_lens`` (B,) their output limits;
    ``generator`` is the batch's random stream, for strategies that draw samples.
    """

    def __init__(self, requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig,
                 keep_attention: bool = False, generator: torch.Generator | None = None):
        self.decode = decode
        self.generator = generator
        self.finished: list[list[Finished]] = [[] for _ in range(len(max_lens))]
        self.history = History(keep_attention)
        #: the shortest output limit of the batch: before it no row can be at its limit
        self.shortest = int(max_lens.min()) if len(max_lens) else 0
        #: (B, P) each sentence's forced target prefix, -1 past its end; None when no sentence has one
        self.prefixes = prefix_table(requests, max_lens)

    def initial_rows(self) -> Tensor | None:
        """Encoder rows to repeat for the first step (``None``: one row per sentence)."""
        raise NotImplementedError

    def advance(self, step: int, log_probs: Tensor, attention: Tensor | None) -> StepOutcome | None:
        """Consume the log-probabilities (N, V) of output position ``step``; ``None`` when done."""
        raise NotImplementedError

    def best(self, nbest: int) -> list[list[Finished]]:
        """Per sentence, the ``nbest`` finished hypotheses with the highest score, best first."""
        return [sorted(hyps, key=lambda hyp: -hyp.score)[:nbest] for hyps in self.finished]

    def _finish(self, sentence: int, row: int, log_prob: float) -> None:
        """Close ``row`` of the latest step with EOS; score ``log P(y | x) / lp(y)``."""
        tokens, attention = self.history.trace(row)
        score = log_prob / length_penalty(len(tokens) + 1, self.decode.alpha)
        self.finished[sentence].append(Finished(tokens, score, log_prob, attention))


def prefix_table(requests: Sequence[Request], max_lens: Tensor) -> Tensor | None:
    """(B, P) the prefix ids of each request, padded with -1; None when none has a prefix.

    A prefix is cut at its sentence's output limit (only a model's own length limit can
    be shorter than a prefix: the generator raises the others to the prefix's length).
    """
    if not any(len(request.prefix) for request in requests):
        return None
    prefixes = [list(request.prefix)[:limit] for request, limit in zip(requests, max_lens.tolist())]
    width = max(map(len, prefixes))
    table = torch.full((len(prefixes), width), -1, dtype=torch.long)
    for row, prefix in enumerate(prefixes):
        table[row, : len(prefix)] = torch.as_tensor(prefix, dtype=torch.long)
    return table.to(max_lens.device)


__all__ = ["Finished", "StepOutcome", "History", "Search", "prefix_table"]
