"""Lexically constrained beam search with dynamic beam allocation (``decode.search: constrained``).

Post & Vilar (2018), "Fast Lexically Constrained Decoding with Dynamic Beam Allocation",
vectorised over the batch as in Hu et al. (2019): at every step each sentence's
candidates are the usual best extensions of its beams, plus, for every beam, the next
token of each alternative of each unmet constraint and the beam's own best token (so a
beam whose extensions all rank below other beams' still goes on in its bank). Each
candidate's *bank* is the number of constraint tokens it has met
(:func:`~nmt_cli.decoding.constraints.met_units`), and the candidates are taken in
stripes: the best of the highest bank, the best of the next bank, ..., then the second
best of each bank, and so on. So every bank keeps a share of the beam, however unlikely
its hypotheses are, and the hypotheses that have met more constraints come first. EOS is
blocked for a hypothesis until all its constraints are met, and a hypothesis with no slack
left (its unmet constraints need as many tokens as its output limit leaves,
:func:`~nmt_cli.decoding.constraints.tokens_needed`) may only take a token that brings a
constraint one token nearer: so a hypothesis that wanders (a looping output, say) still
writes its constraints before the limit, and the finished hypotheses meet them wherever
the limit leaves room to. (A hypothesis the model or the guards leave no other token may
end too, as in every strategy.) The hypotheses that meet all
their constraints rank before those that do not, whatever their scores.

A sentence ends, as in beam search, once K hypotheses have finished or none lives, or
earlier once no live hypothesis can still beat its ``decode.nbest`` best finished ones that
meet every constraint (:meth:`ConstrainedSearch.settled`). Every later hypothesis of a
sentence extends one of its live beams, and a log-probability is at most 0, so its score
``log P / lp(|y|)`` is at most its live beam's running log-probability over the largest
length penalty its output limit allows, ``lp(max_len + 1)`` (``alpha >= 0``: the penalty
grows with the length). When that bound is no higher than the ``nbest``-th best met score,
nothing the sentence could still finish would enter its n-best list (a later hypothesis
with an equal score ranks after the earlier ones), so stopping changes no output: it only
spares the steps in which beams whose constraints are unmet wander to the limit.

A sentence without constraints has one bank and no added candidates, so in a mixed batch
it is searched as plain beam search would search it. Beam size 1 (greedy) runs the same
search at a beam of :data:`MIN_BEAM`: with a single beam the highest bank would always
win and the constraints would be placed at once, at the start of the output; with two,
one hypothesis places them as early as it can and the other follows the model until it
meets them, and the better scoring of those that finish is kept.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.constraints import (ConstraintTable, advance, all_met, constraints_met, initial_state, met_units,
                                          next_tokens, tokens_needed)
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import NEG_INF, length_penalty
from nmt_cli.decoding.strategies.base import Finished
from nmt_cli.decoding.strategies.beam import BeamSearch
from nmt_cli.registry import SEARCH_STRATEGIES
from nmt_cli.specials import EOS_ID

__all__ = ["MIN_BEAM", "ConstrainedSearch", "stripe_order"]

#: the smallest beam the constrained search runs at (beam size 1 included)
MIN_BEAM = 2


def stripe_order(scores: Tensor, banks: Tensor, top_bank: int) -> Tensor:
    """(A, C) the candidates' positions in dynamic beam allocation's order.

    ``scores`` (A, C) and ``banks`` (A, C) (0 .. ``top_bank``): sorted by the candidate's
    rank among those of its bank (best score first), and within a rank by bank, highest
    first; candidates with a ``-inf`` score come last. Ties keep the given order.
    """
    order = scores.sort(dim=1, descending=True, stable=True).indices  # (A, C)
    banks = banks.gather(1, order)  # (A, C)
    members = torch.nn.functional.one_hot(banks, top_bank + 1)  # (A, C, top + 1)
    rank = (members.cumsum(dim=1) * members).sum(dim=-1) - 1  # (A, C) rank within the bank
    key = rank * (top_bank + 1) + (top_bank - banks)  # (A, C)
    key = key.masked_fill(torch.isneginf(scores.gather(1, order)), torch.iinfo(key.dtype).max)
    return order.gather(1, key.sort(dim=1, stable=True).indices)


@SEARCH_STRATEGIES.register("constrained")
class ConstrainedSearch(BeamSearch):
    """Beam search whose output contains each request's constraints (dynamic beam allocation).

    Per row it keeps the constraint state of :mod:`nmt_cli.decoding.constraints`:
    ``progress`` (N, P) and ``matched`` (N, P) over the P alternatives of its sentence.
    """

    takes_constraints = True

    def __init__(self, requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig,
                 keep_attention: bool = False, generator: torch.Generator | None = None):
        super().__init__(requests, max_lens, decode, keep_attention, generator)
        self.beam = max(decode.beam_size, MIN_BEAM)
        self.constraints = [request.constraints for request in requests]
        device = max_lens.device
        self.table = ConstraintTable.build([request.constraints for request in requests], device)
        self.top_bank = int(self.table.total.max())
        #: (N, P) each row's constraint state, one row per sentence until the first step expands them
        self.progress, self.matched = initial_state(self.table, torch.arange(len(requests), device=device))
        #: the constraint state of each of the 2K candidates of the step (A, 2K, P) twice
        self._cand_state: tuple[Tensor, Tensor] | None = None
        #: (B,) the largest length penalty a sentence's hypotheses can get: lp(max_len + 1)
        self.longest_penalty = torch.tensor([length_penalty(limit + 1, decode.alpha) for limit in max_lens.tolist()],
                                            dtype=torch.float64, device=device)
        #: per sentence, the scores of its finished hypotheses that meet every constraint, best first
        self.met_scores: list[list[float]] = [[] for _ in requests]

    def best(self, nbest: int) -> list[list[Finished]]:
        """Per sentence, the ``nbest`` finished hypotheses, those that meet all constraints first,
        then by score."""
        return [sorted(hyps, key=lambda hyp: (not all(constraints_met(constraints, hyp.tokens)), -hyp.score))[:nbest]
                for hyps, constraints in zip(self.finished, self.constraints)]

    def settled(self, step: int, scores: Tensor) -> list[bool] | None:
        """Per active block, whether no live beam can beat the sentence's ``nbest``-th best finished
        hypothesis that meets every constraint (None while no sentence has ``nbest`` such
        hypotheses). ``decode.constrained_stop`` exact: its best running score over
        ``lp(max_len + 1)``, the best it could reach, is no higher; now: its best running score over
        ``lp(step + 2)``, its score were it to end at the next token, is no higher."""
        nbest = self.decode.nbest
        met = [self.met_scores[sentence] for sentence in self.active]
        if all(len(scores_met) < nbest for scores_met in met):
            return None
        best = scores.amax(dim=1)  # (A,)
        if self.decode.constrained_stop == "now":
            bound = (best / length_penalty(step + 2, self.decode.alpha)).tolist()
        else:
            bound = (best / self.longest_penalty[torch.tensor(self.active, device=scores.device)]).tolist()
        return [len(scores_met) >= nbest and reach <= scores_met[nbest - 1] for scores_met, reach in zip(met, bound)]

    def _finish(self, sentence: int, row: int, log_prob: float, eos_log_prob: float) -> None:
        super()._finish(sentence, row, log_prob, eos_log_prob)
        finished = self.finished[sentence][-1]
        if all(constraints_met(self.constraints[sentence], finished.tokens)):
            met = self.met_scores[sentence]
            met.append(finished.score)
            met.sort(reverse=True)

    def eos_blocked(self, step: int, max_lens: Tensor) -> Tensor:
        return ~all_met(self.table, self.row_sentences(), self.matched) & (max_lens > step)

    def shape(self, step: int, log_probs: Tensor, max_lens: Tensor, forced: Tensor | None) -> Tensor:
        """The base distribution, then, on rows without slack, only the tokens that advance a constraint."""
        log_probs = super().shape(step, log_probs, max_lens, forced)
        sentences = self.row_sentences()  # (N,)
        needed = tokens_needed(self.table, sentences, self.progress, self.matched)  # (N,)
        budget = max_lens - step  # (N,) tokens the row may still write before its limit forces EOS
        tight = (needed > 0) & (needed >= budget) & (budget > 0)
        if forced is not None:
            tight &= forced < 0  # a prefix's tokens come first; the limit was raised to hold both
        rows = tight.nonzero().squeeze(1)  # (R,)
        if not rows.numel():
            return log_probs
        row_sentences, progress, matched = sentences[rows], self.progress[rows], self.matched[rows]
        wanted = next_tokens(self.table, row_sentences, progress, matched)  # (R, P)
        count = wanted.size(1)
        after = advance(self.table, row_sentences[:, None], progress[:, None].expand(-1, count, -1),
                        matched[:, None].expand(-1, count, -1), wanted.clamp(min=0))  # (R, P, P) twice
        nearer = (wanted >= 0) & (tokens_needed(self.table, row_sentences[:, None], *after) < needed[rows, None])
        allowed = torch.zeros((len(rows), log_probs.size(1)), dtype=torch.long, device=log_probs.device)
        allowed.scatter_reduce_(1, wanted.clamp(min=0), nearer.long(), reduce="amax")  # (R, V)
        narrowed = log_probs[rows].masked_fill(allowed == 0, NEG_INF)  # (R, V)
        possible = torch.isfinite(narrowed.amax(dim=1))  # (R,) the guards may have blocked every such token
        log_probs[rows[possible]] = narrowed[possible]
        return log_probs

    def candidates(self, log_probs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        active, width, vocab = log_probs.shape
        top_scores, top_tokens, top_beams = super().candidates(log_probs)  # (A, 2K)
        sentences = self.row_sentences()  # (N,)
        flat = log_probs.view(active * width, vocab)  # (N, V)
        constrained = self.table.total[sentences] > 0  # (N,)
        best = flat.argmax(dim=1).masked_fill(~constrained, -1)  # (N,) so that no bank loses its beams
        wanted = torch.cat([next_tokens(self.table, sentences, self.progress, self.matched), best[:, None]], dim=1)
        extra_scores = self.scores.view(-1, 1) + flat.gather(1, wanted.clamp(min=0)).double()  # (N, P + 1)
        extra_scores = extra_scores.masked_fill(wanted < 0, NEG_INF)
        per_row = wanted.size(1)
        beams = torch.arange(width, device=flat.device).repeat_interleave(per_row).expand(active, -1)
        scores = torch.cat([top_scores, extra_scores.view(active, -1)], dim=1)  # (A, C')
        tokens = torch.cat([top_tokens, wanted.clamp(min=0).view(active, -1)], dim=1)  # (A, C')
        beams = torch.cat([top_beams, beams], dim=1)  # (A, C')

        key = beams * vocab + tokens  # (A, C') the same extension listed twice is taken once
        earlier = torch.ones(key.size(1), key.size(1), dtype=torch.bool, device=key.device).tril(-1)  # (C', C')
        possible = torch.isfinite(scores)[:, None, :]  # (A, 1, C')
        repeated = ((key[:, :, None] == key[:, None, :]) & earlier & possible).any(dim=-1)  # (A, C')
        scores = scores.masked_fill(repeated, NEG_INF)
        tokens = tokens.masked_fill(torch.isneginf(scores), EOS_ID)  # impossible candidates: never fed on

        rows = beams + width * torch.arange(active, device=beams.device)[:, None]  # (A, C')
        block_sentences = sentences.view(active, width)[:, :1]  # (A, 1): every candidate of a block shares it
        parent_progress, parent_matched = self.progress[rows], self.matched[rows]  # (A, C', P)
        progress, matched = advance(self.table, block_sentences, parent_progress, parent_matched, tokens)
        ends = (tokens == EOS_ID)[..., None]  # an ending candidate keeps its state
        progress = torch.where(ends, parent_progress, progress)
        matched = torch.where(ends, parent_matched, matched)
        banks = met_units(self.table, block_sentences, progress, matched)  # (A, C')

        chosen = stripe_order(scores, banks, self.top_bank)[:, :2 * self.beam]  # (A, 2K)
        take = chosen[..., None].expand(-1, -1, progress.size(-1))  # (A, 2K, P)
        self._cand_state = progress.gather(1, take), matched.gather(1, take)
        return scores.gather(1, chosen), tokens.gather(1, chosen), beams.gather(1, chosen)

    def select(self, continuing: Tensor) -> Tensor:
        """The first K candidates that do not end, in dynamic beam allocation's order."""
        position = torch.arange(continuing.size(1), device=continuing.device).expand_as(continuing)  # (A, 2K)
        position = position.masked_fill(torch.isneginf(continuing), continuing.size(1))
        return position.topk(self.beam, dim=1, largest=False, sorted=True).indices

    def continue_rows(self, picked: Tensor, keep: Tensor | None) -> None:
        progress, matched = self._cand_state
        take = picked[..., None].expand(-1, -1, progress.size(-1))  # (A, K, P)
        progress, matched = progress.gather(1, take), matched.gather(1, take)
        if keep is not None:
            progress, matched = progress[keep], matched[keep]
        self.progress, self.matched = progress.flatten(0, 1), matched.flatten(0, 1)  # (A' * K, P)
