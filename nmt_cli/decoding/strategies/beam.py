"""Beam search with K hypotheses per sentence (``decode.search: beam``)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import NEG_INF, beam_step
from nmt_cli.decoding.strategies.base import Search, StepOutcome
from nmt_cli.registry import SEARCH_STRATEGIES
from nmt_cli.specials import EOS_ID

__all__ = ["BeamSearch"]


@SEARCH_STRATEGIES.register("beam")
class BeamSearch(Search):
    """Batched beam search with K hypotheses per sentence (fairseq-style bookkeeping).

    Each step takes the 2K best extensions of a sentence's beams; those ending in EOS
    within the top K are finished, the K best others continue. A sentence is done once
    it has K finished hypotheses or no live beam (at its maximum length only EOS is
    allowed), and its rows leave the batch. The first step runs on one row per sentence
    (every beam would hold the same BOS prefix) and its 2K best tokens start the K beams,
    so the decoder state and memory are expanded to K rows after it, not before
    (CTranslate2 does the same). Beams with a ``-inf`` score are unused (tiny vocabularies,
    and a prefix: while one is forced, only one beam of its sentence lives).

    :meth:`candidates` and :meth:`select` are the two choices a subclass may change
    (:mod:`.constrained` does), and :meth:`settled` may end a sentence before K hypotheses
    finish; :meth:`continue_rows` is told which candidates went on.
    """

    def __init__(self, requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig,
                 keep_attention: bool = False, generator: torch.Generator | None = None):
        super().__init__(requests, max_lens, decode, keep_attention, generator)
        self.beam = decode.beam_size
        self.active = list(range(len(max_lens)))  # sentence of each block of rows
        #: (A, P) the prefix of each active sentence (None: no prefix in the batch)
        self.block_prefixes = self.prefixes
        self.max_lens = max_lens  # (N,): one row per sentence until the first step expands them
        self.scores = torch.zeros((len(max_lens), 1), dtype=torch.float64, device=max_lens.device)  # (A, width)
        self._row_sentences: tuple[tuple[int, int], Tensor] | None = None  # (blocks, width) and each row's sentence
        if self.reads_outputs:
            self.outputs = torch.zeros((len(max_lens), 0), dtype=torch.long, device=max_lens.device)  # (N, 0)

    def initial_rows(self) -> Tensor | None:
        return None

    def row_sentences(self) -> Tensor:
        # blocks only ever leave and the width changes once: (blocks, width) names the rows
        shape = (len(self.active), self.scores.size(1))
        if self._row_sentences is None or self._row_sentences[0] != shape:
            rows = torch.tensor(self.active, device=self.scores.device).repeat_interleave(shape[1])  # (N,)
            self._row_sentences = shape, rows
        return self._row_sentences[1]

    def candidates(self, log_probs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The 2K extensions of each sentence's beams that may go on, in order of preference:
        scores (A, 2K) (float64), tokens (A, 2K) and the beam each extends (A, 2K), from
        ``log_probs`` (A, width, V). Here the 2K best by score, best first."""
        beam = self.beam
        cand_scores, cand_tokens, cand_beams = beam_step(log_probs, self.scores, 2 * beam)  # (A, C)
        if cand_scores.size(1) < 2 * beam:  # fewer extensions than 2K (a tiny vocabulary): unused candidates
            missing = 2 * beam - cand_scores.size(1)
            cand_scores = torch.nn.functional.pad(cand_scores, (0, missing), value=NEG_INF)
            cand_tokens = torch.nn.functional.pad(cand_tokens, (0, missing), value=EOS_ID)
            cand_beams = torch.nn.functional.pad(cand_beams, (0, missing))
        return cand_scores, cand_tokens, cand_beams

    def select(self, continuing: Tensor) -> Tensor:
        """(A, K) the candidates (positions in the 2K) that go on, from their scores ``continuing``
        (A, 2K), ``-inf`` for those that end: here the K best."""
        return continuing.topk(self.beam, dim=1).indices

    def settled(self, step: int, scores: Tensor) -> list[bool] | None:
        """Per active block, whether its sentence is done before K hypotheses finish, given the
        running scores (A, K) of the beams that go on after ``step`` (None: none is; beam search
        waits for K)."""
        return None

    def continue_rows(self, picked: Tensor, keep: Tensor | None) -> None:
        """The candidates ``picked`` (A, K) went on, of the blocks ``keep`` (A',) (None: all)."""

    def advance(self, step: int, log_probs: Tensor, attention: Tensor | None) -> StepOutcome | None:
        self.history.add_attention(attention)
        beam, active, width = self.beam, len(self.active), self.scores.size(1)  # width: 1 at the first step, then K
        forced = None
        if self.block_prefixes is not None and step < self.block_prefixes.size(1):
            forced = self.block_prefixes[:, step].repeat_interleave(width)  # (N,)
        log_probs = self.shape(step, log_probs, self.max_lens, forced)  # (N, V)
        cand_scores, cand_tokens, cand_beams = self.candidates(log_probs.view(active, width, -1))  # (A, C)
        block_start = width * torch.arange(active, device=cand_beams.device)[:, None]  # (A, 1)
        cand_rows = cand_beams + block_start  # (A, C): rows of this step
        cand_eos = cand_tokens == EOS_ID  # (A, C)
        cand_log_probs = log_probs[cand_rows, cand_tokens]  # (A, C) each candidate's own token
        self._finish_candidates(cand_scores, cand_rows, cand_eos, cand_log_probs)

        continuing = cand_scores.masked_fill(cand_eos, NEG_INF)  # (A, C)
        picked = self.select(continuing)  # (A, K)
        scores = continuing.gather(1, picked)  # (A, K)
        tokens = cand_tokens.gather(1, picked)  # (A, K)
        rows = cand_rows.gather(1, picked)  # (A, K)
        chosen = cand_log_probs.gather(1, picked)  # (A, K)

        live = torch.isfinite(scores[:, 0]).tolist()  # False once only EOS was allowed
        settled = self.settled(step, scores)
        open_blocks = [
            i for i, sentence in enumerate(self.active)
            if live[i] and len(self.finished[sentence]) < beam and not (settled is not None and settled[i])
        ]
        if not open_blocks:
            return None
        memory_rows = keep = None
        if len(open_blocks) < active or width != beam:
            keep = torch.tensor(open_blocks, device=rows.device)  # (A',)
            scores, tokens, rows, chosen = scores[keep], tokens[keep], rows[keep], chosen[keep]
            offsets = torch.arange(width, device=rows.device)
            memory_rows = (keep[:, None] * width + offsets).flatten()  # (A' * width,)
            if width != beam:  # the first step: each sentence's one memory row serves its K beams
                memory_rows = memory_rows.repeat_interleave(beam)  # (A' * K,)
            self.active = [self.active[i] for i in open_blocks]
            if self.block_prefixes is not None:
                self.block_prefixes = self.block_prefixes[keep]
        self.continue_rows(picked, keep)
        self.scores = scores
        state_rows = rows.flatten()  # (A' * K,)
        self.max_lens = self.max_lens[state_rows]
        tokens = tokens.flatten()
        self.history.add_inputs(tokens.tolist(), state_rows.tolist(), chosen.flatten().tolist())
        self.keep_outputs(state_rows, tokens)
        return StepOutcome(tokens, state_rows, memory_rows)

    def _finish_candidates(self, cand_scores: Tensor, cand_rows: Tensor, cand_eos: Tensor,
                           cand_log_probs: Tensor) -> None:
        """Close the EOS candidates ranked within the top K of their sentence."""
        top = slice(0, self.beam)
        ending = (cand_eos[:, top] & torch.isfinite(cand_scores[:, top])).nonzero().tolist()  # [(block, rank)]
        if not ending:
            return
        # one copy each, not one per entry
        rows, scores, eos = cand_rows[:, top].tolist(), cand_scores[:, top].tolist(), cand_log_probs[:, top].tolist()
        for block, rank in ending:
            sentence = self.active[block]
            if len(self.finished[sentence]) < self.beam:
                self._finish(sentence, rows[block][rank], scores[block][rank], eos[block][rank])
