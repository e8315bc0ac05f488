"""Tracking lexical constraints through a search: pure tensor arithmetic, no search state.

A request's constraints are phrases (target piece sequences) the output must contain, each
with alternatives (any one satisfies it). :class:`ConstraintTable` holds a batch's
alternatives as padded tensors; a hypothesis's state is, for every alternative, its
*progress* (the length of the longest prefix of the alternative that ends its output:
a Knuth-Morris-Pratt automaton state, so a phrase whose prefix is also its suffix, "a a b"
after "a a a", keeps its partial match) and whether its constraint is *matched* (met by it
or by another alternative).
:func:`advance` moves the state by one token, :func:`next_tokens` names the tokens that
extend unmet constraints (the candidates dynamic beam allocation adds, Post & Vilar
2018) and :func:`met_units` counts the "constraint tokens met" that choose a hypothesis's
bank. :func:`constraints_met` checks finished outputs directly, without the automaton.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.decoding.request import Constraint

__all__ = ["ConstraintTable", "advance", "all_met", "constraints_met", "contains", "initial_state", "met_units",
           "next_tokens", "shortest_length", "tokens_needed"]


def contains(tokens: Sequence[int], phrase: Sequence[int]) -> bool:
    """Whether ``phrase`` occurs contiguously in ``tokens``."""
    tokens, phrase = list(tokens), list(phrase)
    return any(tokens[start:start + len(phrase)] == phrase for start in range(len(tokens) - len(phrase) + 1))


def constraints_met(constraints: Sequence[Constraint], tokens: Sequence[int]) -> list[bool]:
    """For each constraint in order, whether ``tokens`` contain one of its alternatives."""
    return [any(contains(tokens, alternative) for alternative in constraint) for constraint in constraints]


def shortest_length(constraint: Constraint) -> int:
    """Output tokens a constraint needs at least: its shortest alternative's length."""
    return min(len(alternative) for alternative in constraint)


@dataclass(frozen=True)
class ConstraintTable:
    """A batch's constraints as tensors, B sentences, at most P alternatives of at most L tokens.

    ``phrases`` (B, P, L): each alternative's tokens, -1 past its end and for missing ones.
    ``lengths`` (B, P): their lengths (0: no alternative). ``owner`` (B, P, C) one-hot: the
    constraint (of at most C) each alternative belongs to. ``borders`` (B, P, L + 1, L):
    ``borders[b, p, k, j]`` is True when the first ``j`` tokens of the alternative are a
    suffix of its first ``k`` (every border of the prefix of length ``k``, ``k`` itself and 0
    included): the states a KMP automaton in state ``k`` falls back through. ``units`` (B, C):
    what a met constraint counts in the banks (its longest alternative's length, 0 for no
    constraint), ``total`` (B,) their sum: a sentence's banks are 0 .. total.
    """

    phrases: Tensor
    lengths: Tensor
    owner: Tensor
    borders: Tensor
    units: Tensor
    total: Tensor

    @classmethod
    def build(cls, constraints: Sequence[Sequence[Constraint]], device: torch.device) -> "ConstraintTable":
        """The table of each sentence's constraints (empty alternatives are left out)."""
        alternatives = [[(number, tuple(alt)) for number, constraint in enumerate(sentence) for alt in constraint if alt]
                        for sentence in constraints]
        batch = len(constraints)
        count = max([len(alts) for alts in alternatives] + [1])
        longest = max([len(alt) for alts in alternatives for _, alt in alts] + [1])
        width = max([len(sentence) for sentence in constraints] + [1])
        phrases = torch.full((batch, count, longest), -1, dtype=torch.long)
        lengths = torch.zeros((batch, count), dtype=torch.long)
        owner = torch.zeros((batch, count, width), dtype=torch.bool)
        borders = torch.zeros((batch, count, longest + 1, longest), dtype=torch.bool)
        units = torch.zeros((batch, width), dtype=torch.long)
        for b, alts in enumerate(alternatives):
            for p, (number, alt) in enumerate(alts):
                phrases[b, p, :len(alt)] = torch.tensor(alt)
                lengths[b, p] = len(alt)
                owner[b, p, number] = True
                units[b, number] = max(int(units[b, number]), len(alt))
                for k in range(len(alt) + 1):
                    for j in range(min(k, len(alt) - 1) + 1):
                        borders[b, p, k, j] = alt[:j] == alt[k - j:k]
        return cls(phrases.to(device), lengths.to(device), owner.to(device), borders.to(device),
                   units.to(device), units.sum(dim=1).to(device))


def initial_state(table: ConstraintTable, sentence: Tensor) -> tuple[Tensor, Tensor]:
    """``(progress, matched)`` (..., P) of an empty output; missing alternatives count as matched."""
    lengths = table.lengths[sentence]  # (..., P)
    return torch.zeros_like(lengths), lengths == 0


def advance(table: ConstraintTable, sentence: Tensor, progress: Tensor, matched: Tensor,
            token: Tensor) -> tuple[Tensor, Tensor]:
    """The state after appending ``token``: ``(progress, matched)`` of the same shapes.

    For any leading shape (...): ``sentence`` (...) the table row (or a shape that broadcasts
    to it), ``progress`` (..., P) and ``matched`` (..., P) bool the state before, ``token`` (...)
    the token appended. The KMP step: the new progress is ``j + 1`` for the longest border
    ``j`` of the current match whose next token is ``token`` (0 if none). Reaching an
    alternative's length meets its constraint: every alternative of it is then ``matched``.
    """
    phrases = table.phrases[sentence]  # (..., P, L)
    count = phrases.size(-2)
    falls_back = table.borders[sentence[..., None], torch.arange(count, device=token.device), progress]  # (..., P, L)
    extends = falls_back & (phrases == token[..., None, None])  # (..., P, L)
    positions = torch.arange(1, phrases.size(-1) + 1, device=token.device)  # (L,)
    progress = (extends * positions).amax(dim=-1)  # (..., P)
    complete = progress == table.lengths[sentence]  # (..., P); missing alternatives (length 0) are matched anyway
    met = (complete[..., :, None] & table.owner[sentence]).any(dim=-2)  # (..., C)
    return progress, matched | (table.owner[sentence] & met[..., None, :]).any(dim=-1)


def met_units(table: ConstraintTable, sentence: Tensor, progress: Tensor, matched: Tensor) -> Tensor:
    """(...) the constraint tokens met, which choose a hypothesis's bank in dynamic beam allocation.

    A met constraint counts its ``units``; an unmet one the progress of its furthest
    alternative, at most ``units - 1``. ``sentence`` (...), ``progress``/``matched`` (..., P).
    """
    owner = table.owner[sentence]  # (..., P, C)
    units = (owner * table.units[sentence][..., None, :]).amax(dim=-1)  # (..., P) its constraint's units
    per_alternative = torch.where(matched, units, progress.minimum(units - 1))  # (..., P); missing ones: 0
    return (per_alternative[..., :, None] * owner).amax(dim=-2).sum(dim=-1)


def tokens_needed(table: ConstraintTable, sentence: Tensor, progress: Tensor, matched: Tensor) -> Tensor:
    """(...) output tokens that surely meet every unmet constraint: the rest of the nearest one, then
    each other one whole.

    ``U = sum_c s(c) - max_c (s(c) - r(c))`` over the unmet constraints ``c``, with ``s(c)`` the
    length of c's shortest alternative and ``r(c) = min_a (|a| - progress(a))`` over c's
    alternatives the fewest tokens that finish one. Only one partial match can be finished
    (two constraints may share their first tokens, and one token cannot extend both), so
    the others count whole. One token of the nearest constraint always lowers ``U`` by one.
    ``sentence`` (...), ``progress``/``matched`` (..., P).
    """
    owner = table.owner[sentence]  # (..., P, C)
    lengths = table.lengths[sentence]  # (..., P)
    unowned = torch.iinfo(lengths.dtype).max
    rest = torch.where(owner, (lengths - progress)[..., None], unowned).amin(dim=-2)  # (..., C) r(c)
    shortest = torch.where(owner, lengths[..., None], unowned).amin(dim=-2)  # (..., C) s(c)
    unmet = owner.any(dim=-2) & ~(owner & matched[..., None]).any(dim=-2)  # (..., C)
    whole = torch.where(unmet, shortest, 0)  # (..., C)
    gain = torch.where(unmet, shortest - rest, 0)  # (..., C)
    return whole.sum(dim=-1) - gain.amax(dim=-1)


def all_met(table: ConstraintTable, sentence: Tensor, matched: Tensor) -> Tensor:
    """(...) True where every constraint of the sentence is met (a sentence without any: True)."""
    return matched.all(dim=-1)


def next_tokens(table: ConstraintTable, sentence: Tensor, progress: Tensor, matched: Tensor) -> Tensor:
    """(..., P) the token that extends each alternative of an unmet constraint, -1 elsewhere.

    These are the candidates dynamic beam allocation adds to the top-k of every beam, so
    that a hypothesis can always take the next step of a constraint, however unlikely.
    """
    phrases = table.phrases[sentence]  # (..., P, L)
    upcoming = phrases.gather(-1, progress.clamp(max=phrases.size(-1) - 1)[..., None]).squeeze(-1)  # (..., P)
    return upcoming.masked_fill(matched, -1)
