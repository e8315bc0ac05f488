"""What every search strategy shares: finished hypotheses, back-pointers, per-sentence prefixes
and the guards (repetition, phrases to avoid).

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

:meth:`Search.shape` turns a step's log-probabilities into the distribution a strategy
chooses from, the same way in every strategy: the repetition penalty, the guards' blocked
tokens, EOS blocked early (``decode.min_len``, unmet constraints) or forced at the output
limit, and a prefix's forced token. The guards read each row's output so far,
``Search.outputs`` (N, t), which is kept only when a guard, a phrase to avoid or a
constraint needs it: without them the step is what it always was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import (NEG_INF, apply_length_limits_, force_tokens_, length_penalty, penalise_repeats,
                                     phrase_end_mask, repeated_ngram_mask)
from nmt_cli.errors import NmtError
from nmt_cli.specials import EOS_ID


@dataclass
class Finished:
    """A completed hypothesis: ids without EOS, scores, ``log p`` of each token and of EOS,
    attention per token (T, L, H, S)."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: list[Tensor] | None
    token_log_probs: list[float]


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

    Step ``t`` stores, for every decoder row, the token it was fed, that token's
    log-probability when it was chosen, the row of step ``t - 1`` it continues and
    (optionally) the cross-attention it produced (L, H, S).
    """

    def __init__(self, keep_attention: bool):
        self.keep_attention = keep_attention
        self._inputs: list[list[int]] = [[]]  # step 0 is fed BOS
        self._log_probs: list[list[float]] = [[]]
        self._parents: list[list[int] | None] = [None]
        self._attention: list[Tensor | None] = []

    def add_attention(self, attention: Tensor | None) -> None:
        """Cross-attention (N, L, H, S) of the step being advanced."""
        self._attention.append(attention.float() if self.keep_attention and attention is not None else None)

    def add_inputs(self, tokens: list[int], parents: list[int] | None, log_probs: list[float]) -> None:
        """Inputs of the next step, their log-probabilities and the row each continues
        (``None``: the same row)."""
        self._inputs.append(tokens)
        self._log_probs.append(log_probs)
        self._parents.append(parents)

    def trace(self, row: int) -> tuple[list[int], list[float], list[Tensor] | None]:
        """Tokens held by ``row`` of the latest step, their log-probabilities and the
        attention that predicted each."""
        tokens: list[int] = []
        log_probs: list[float] = []
        attention: list[Tensor] = []
        for step in range(len(self._inputs) - 1, 0, -1):
            tokens.append(self._inputs[step][row])
            log_probs.append(self._log_probs[step][row])
            parents = self._parents[step]
            row = row if parents is None else parents[row]
            if self.keep_attention and self._attention[step - 1] is not None:
                attention.append(self._attention[step - 1][row])  # (L, H, S)
        tokens.reverse()
        log_probs.reverse()
        attention.reverse()
        return tokens, log_probs, attention if self.keep_attention else None


class Search:
    """Bookkeeping shared by the strategies: finished hypotheses per sentence.

    ``requests`` are the batch's sentences and ``max_lens`` (B,) their output limits;
    ``generator`` is the batch's random stream, for strategies that draw samples. A
    strategy that does not enforce constraints (``takes_constraints`` False) refuses a
    batch that has some rather than ignore them.
    """

    takes_constraints = False

    def __init__(self, requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig,
                 keep_attention: bool = False, generator: torch.Generator | None = None):
        if not self.takes_constraints and any(request.constraints for request in requests):
            raise NmtError(f"decode.search {decode.search} does not enforce constraints; use decode.search auto "
                           "or constrained (beam search, without decode.sampling)")
        self.decode = decode
        self.generator = generator
        self.finished: list[list[Finished]] = [[] for _ in range(len(max_lens))]
        self.history = History(keep_attention)
        #: the shortest output limit of the batch: before it no row can be at its limit
        self.shortest = int(max_lens.min()) if len(max_lens) else 0
        #: (B, P) each sentence's forced target prefix, -1 past its end; None when no sentence has one
        self.prefixes = prefix_table(requests, max_lens)
        #: the batch's phrases to avoid (None: none)
        self.avoid = AvoidTable.build(requests, max_lens.device)
        #: whether the guards read each row's output (:attr:`outputs`)
        self.reads_outputs = decode.repetition_penalty != 1.0 or decode.no_repeat_ngram > 0 or self.avoid is not None
        #: whether :meth:`shape` does more than length limits and prefixes
        self.guarded = self.reads_outputs or self.takes_constraints
        #: (N, t) each row's output so far, kept only when ``reads_outputs`` (the strategy starts it)
        self.outputs: Tensor | None = None

    def initial_rows(self) -> Tensor | None:
        """Encoder rows to repeat for the first step (``None``: one row per sentence)."""
        raise NotImplementedError

    def advance(self, step: int, log_probs: Tensor, attention: Tensor | None) -> StepOutcome | None:
        """Consume the log-probabilities (N, V) of output position ``step``; ``None`` when done."""
        raise NotImplementedError

    def best(self, nbest: int) -> list[list[Finished]]:
        """Per sentence, the ``nbest`` finished hypotheses with the highest score, best first."""
        return [sorted(hyps, key=lambda hyp: -hyp.score)[:nbest] for hyps in self.finished]

    def row_sentences(self) -> Tensor:
        """(N,) the sentence of each decoder row of the step being advanced."""
        raise NotImplementedError

    def eos_blocked(self, step: int, max_lens: Tensor) -> Tensor | None:
        """(N,) rows that may not end at ``step`` though below their limit (None: all may)."""
        return None

    def shape(self, step: int, log_probs: Tensor, max_lens: Tensor, forced: Tensor | None) -> Tensor:
        """The distribution (N, V) to choose from at ``step``, from the model's ``log_probs``.

        In order: ``decode.repetition_penalty`` (renormalised), the guards' blocked tokens
        (``decode.no_repeat_ngram``, phrases to avoid; never on a row whose prefix forces
        its token), EOS blocked where :meth:`eos_blocked` says, the length limits
        (``max_lens`` (N,)), and the prefix's ``forced`` (N,) token. A row the guards left
        with no token at all may end: EOS gets its probability back, so every row ends.
        Without guards this is the length limits and the prefix alone.
        """
        if not self.guarded:
            log_probs = apply_length_limits_(log_probs, step, self.decode.min_len, max_lens, self.shortest)
            return log_probs if forced is None else force_tokens_(log_probs, forced)
        decode = self.decode
        if decode.repetition_penalty != 1.0:
            log_probs = penalise_repeats(log_probs, self.outputs, decode.repetition_penalty)
        eos = log_probs[:, EOS_ID].clone()  # (N,) for rows left without any token
        blocked = None
        if decode.no_repeat_ngram > 0:
            blocked = repeated_ngram_mask(self.outputs, decode.no_repeat_ngram, log_probs.size(1))  # (N, V)
        if self.avoid is not None:
            avoided = self.avoid.mask(self.outputs, self.row_sentences(), log_probs.size(1))  # (N, V)
            blocked = avoided if blocked is None else blocked | avoided
        if blocked is not None:
            if forced is not None:
                blocked &= (forced < 0)[:, None]
            log_probs.masked_fill_(blocked, NEG_INF)
        early = self.eos_blocked(step, max_lens)
        if early is not None:
            log_probs[:, EOS_ID].masked_fill_(early, NEG_INF)
        log_probs = apply_length_limits_(log_probs, step, decode.min_len, max_lens, self.shortest)
        if forced is not None:
            log_probs = force_tokens_(log_probs, forced)
        stuck = torch.isneginf(log_probs.amax(dim=1)).nonzero().squeeze(1)  # (R,)
        if stuck.numel():
            log_probs[stuck, EOS_ID] = eos[stuck]
        return log_probs

    def keep_outputs(self, rows: Tensor | None, tokens: Tensor) -> None:
        """Extend :attr:`outputs` (when kept): the next step's rows continue ``rows`` (N',) of
        this one (None: the same rows) with ``tokens`` (N',)."""
        if self.outputs is not None:
            outputs = self.outputs if rows is None else self.outputs[rows]
            self.outputs = torch.cat([outputs, tokens[:, None]], dim=1)  # (N', t + 1)

    def _finish(self, sentence: int, row: int, log_prob: float, eos_log_prob: float) -> None:
        """Close ``row`` of the latest step with EOS, predicted at ``eos_log_prob``; score
        ``log P(y | x) / lp(y)``."""
        tokens, log_probs, attention = self.history.trace(row)
        score = log_prob / length_penalty(len(tokens) + 1, self.decode.alpha)
        self.finished[sentence].append(Finished(tokens, score, log_prob, attention, [*log_probs, eos_log_prob]))


@dataclass(frozen=True)
class AvoidTable:
    """A batch's phrases to avoid, as :func:`~nmt_cli.decoding.search.phrase_end_mask` reads them:
    ``heads`` (M, W), ``last`` (M,), ``owner`` (M,)."""

    heads: Tensor
    last: Tensor
    owner: Tensor

    @classmethod
    def build(cls, requests: Sequence[Request], device: torch.device) -> "AvoidTable | None":
        """The table of every request's ``avoid`` (None when no request has one)."""
        phrases = [(sentence, list(phrase)) for sentence, request in enumerate(requests)
                   for phrase in request.avoid if phrase]
        if not phrases:
            return None
        width = max(len(phrase) for _, phrase in phrases) - 1
        heads = torch.full((len(phrases), width), -1, dtype=torch.long)
        for number, (_, phrase) in enumerate(phrases):
            if len(phrase) > 1:
                heads[number, width - len(phrase) + 1:] = torch.tensor(phrase[:-1])
        last = torch.tensor([phrase[-1] for _, phrase in phrases])
        owner = torch.tensor([sentence for sentence, _ in phrases])
        return cls(heads.to(device), last.to(device), owner.to(device))

    def mask(self, outputs: Tensor, row_sentences: Tensor, vocab: int) -> Tensor:
        """(N, V) the tokens that would complete a phrase of the row's sentence."""
        return phrase_end_mask(outputs, self.heads, self.last, self.owner, row_sentences, vocab)


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


__all__ = ["AvoidTable", "Finished", "StepOutcome", "History", "Search", "prefix_table"]
