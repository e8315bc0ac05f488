"""Search strategies: the bookkeeping of one batch between calls to the model.

A strategy knows which decoder row belongs to which sentence, the running scores, the
finished hypotheses and the back-pointers needed to rebuild them. The loop in
:mod:`nmt_cli.decoding.generator` hands it the log-probabilities of every output
position and applies the reordering it returns (OpenNMT's decode-strategy idea); the
arithmetic itself is in the pure functions of :mod:`nmt_cli.decoding.search`.

Running scores are kept in float64: adding a float32 log-probability to them is exact,
so ranking candidates by running score never disagrees with ranking them by their
log-probability, and beam size 1 reproduces greedy search exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.search import NEG_INF, apply_length_limits_, beam_step, length_penalty
from nmt_cli.specials import EOS_ID

TokenChooser = Callable[[Tensor], Tensor]


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
    """Bookkeeping shared by the strategies: finished hypotheses per sentence."""

    def __init__(self, max_lens: Tensor, decode: DecodeConfig, keep_attention: bool):
        self.decode = decode
        self.finished: list[list[Finished]] = [[] for _ in range(len(max_lens))]
        self.history = History(keep_attention)
        #: the shortest output limit of the batch: before it no row can be at its limit
        self.shortest = int(max_lens.min()) if len(max_lens) else 0

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


class GreedySearch(Search):
    """One hypothesis per row, extended by ``choose`` (argmax or a sample) until EOS.

    With ``copies > 1`` each sentence gets that many independent rows (sampling n-best).
    Finished rows leave the batch at once, so the model only runs on open rows.
    """

    def __init__(self, max_lens: Tensor, decode: DecodeConfig, choose: TokenChooser,
                 keep_attention: bool, copies: int = 1):
        super().__init__(max_lens, decode, keep_attention)
        self.copies = copies
        self.choose = choose
        self.max_lens = max_lens.repeat_interleave(copies)  # (N,)
        self.row_sentence = torch.arange(len(max_lens)).repeat_interleave(copies).tolist()
        self.scores = torch.zeros(len(self.max_lens), dtype=torch.float64, device=max_lens.device)  # (N,)

    def initial_rows(self) -> Tensor | None:
        if self.copies == 1:
            return None
        return torch.arange(len(self.finished), device=self.max_lens.device).repeat_interleave(self.copies)

    def advance(self, step: int, log_probs: Tensor, attention: Tensor | None) -> StepOutcome | None:
        self.history.add_attention(attention)
        log_probs = apply_length_limits_(log_probs, step, self.decode.min_len, self.max_lens, self.shortest)  # (N, V)
        tokens = self.choose(log_probs)  # (N,)
        self.scores = self.scores + log_probs.gather(1, tokens[:, None]).squeeze(1).double()  # (N,)
        ended = tokens == EOS_ID  # (N,)
        ended_rows = ended.nonzero().squeeze(1).tolist()
        for row in ended_rows:
            self._finish(self.row_sentence[row], row, float(self.scores[row]))
        if not ended_rows:
            self.history.add_inputs(tokens.tolist(), None)
            return StepOutcome(tokens, None, None)
        keep = (~ended).nonzero().squeeze(1)  # (N',)
        if keep.numel() == 0:
            return None
        kept = keep.tolist()
        self.row_sentence = [self.row_sentence[row] for row in kept]
        self.max_lens = self.max_lens[keep]
        self.scores = self.scores[keep]
        tokens = tokens[keep]
        self.history.add_inputs(tokens.tolist(), kept)
        return StepOutcome(tokens, keep, keep)


class BeamSearch(Search):
    """Batched beam search with K hypotheses per sentence (fairseq-style bookkeeping).

    Each step takes the 2K best extensions of a sentence's beams; those ending in EOS
    within the top K are finished, the K best others continue. A sentence is done once
    it has K finished hypotheses or no live beam (at its maximum length only EOS is
    allowed), and its rows leave the batch. The first step runs on one row per sentence
    (every beam would hold the same BOS prefix) and its 2K best tokens start the K beams,
    so the decoder state and memory are expanded to K rows after it, not before
    (CTranslate2 does the same). Beams with a ``-inf`` score are unused (tiny vocabularies).
    """

    def __init__(self, max_lens: Tensor, decode: DecodeConfig, keep_attention: bool):
        super().__init__(max_lens, decode, keep_attention)
        self.beam = decode.beam_size
        self.active = list(range(len(max_lens)))  # sentence of each block of rows
        self.max_lens = max_lens  # (N,): one row per sentence until the first step expands them
        self.scores = torch.zeros((len(max_lens), 1), dtype=torch.float64, device=max_lens.device)  # (A, width)

    def initial_rows(self) -> Tensor | None:
        return None

    def advance(self, step: int, log_probs: Tensor, attention: Tensor | None) -> StepOutcome | None:
        self.history.add_attention(attention)
        beam, active, width = self.beam, len(self.active), self.scores.size(1)  # width: 1 at the first step, then K
        log_probs = apply_length_limits_(log_probs, step, self.decode.min_len, self.max_lens, self.shortest)  # (N, V)
        cand_scores, cand_tokens, cand_beams = beam_step(
            log_probs.view(active, width, -1), self.scores, 2 * beam)  # (A, C), scores in float64
        if cand_scores.size(1) < 2 * beam:  # fewer extensions than 2K (a tiny vocabulary): unused candidates
            missing = 2 * beam - cand_scores.size(1)
            cand_scores = torch.nn.functional.pad(cand_scores, (0, missing), value=NEG_INF)
            cand_tokens = torch.nn.functional.pad(cand_tokens, (0, missing), value=EOS_ID)
            cand_beams = torch.nn.functional.pad(cand_beams, (0, missing))
        block_start = width * torch.arange(active, device=cand_beams.device)[:, None]  # (A, 1)
        cand_rows = cand_beams + block_start  # (A, C): rows of this step
        cand_eos = cand_tokens == EOS_ID  # (A, C)
        self._finish_candidates(cand_scores, cand_rows, cand_eos)

        continuing = cand_scores.masked_fill(cand_eos, NEG_INF)  # (A, C)
        scores, picked = continuing.topk(beam, dim=1)  # (A, K)
        tokens = cand_tokens.gather(1, picked)  # (A, K)
        rows = cand_rows.gather(1, picked)  # (A, K)

        live = torch.isfinite(scores[:, 0]).tolist()  # False once only EOS was allowed
        open_blocks = [
            i for i, sentence in enumerate(self.active) if live[i] and len(self.finished[sentence]) < beam
        ]
        if not open_blocks:
            return None
        memory_rows = None
        if len(open_blocks) < active or width != beam:
            keep = torch.tensor(open_blocks, device=rows.device)  # (A',)
            scores, tokens, rows = scores[keep], tokens[keep], rows[keep]
            offsets = torch.arange(width, device=rows.device)
            memory_rows = (keep[:, None] * width + offsets).flatten()  # (A' * width,)
            if width != beam:  # the first step: each sentence's one memory row serves its K beams
                memory_rows = memory_rows.repeat_interleave(beam)  # (A' * K,)
            self.active = [self.active[i] for i in open_blocks]
        self.scores = scores
        state_rows = rows.flatten()  # (A' * K,)
        self.max_lens = self.max_lens[state_rows]
        tokens = tokens.flatten()
        self.history.add_inputs(tokens.tolist(), state_rows.tolist())
        return StepOutcome(tokens, state_rows, memory_rows)

    def _finish_candidates(self, cand_scores: Tensor, cand_rows: Tensor, cand_eos: Tensor) -> None:
        """Close the EOS candidates ranked within the top K of their sentence."""
        top = slice(0, self.beam)
        ending = (cand_eos[:, top] & torch.isfinite(cand_scores[:, top])).nonzero().tolist()  # [(block, rank)]
        if not ending:
            return
        rows, scores = cand_rows[:, top].tolist(), cand_scores[:, top].tolist()  # one copy, not one per entry
        for block, rank in ending:
            sentence = self.active[block]
            if len(self.finished[sentence]) < self.beam:
                self._finish(sentence, rows[block][rank], scores[block][rank])


__all__ = ["Finished", "StepOutcome", "History", "Search", "GreedySearch", "BeamSearch"]
