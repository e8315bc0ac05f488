"""Several trained models decoding as one: the mean of their log-probabilities.

An :class:`Ensemble` implements the model interface of :mod:`nmt_cli.models.base`, so
the one generation loop (greedy, beam, n-best, sampling) and forced scoring run it
unchanged. At every step each member predicts from its own encoder memory and
decoder state, and the ensemble's score of token ``v`` is

    log p_ens(v | y_<t, x) = (1 / M) * sum_m log p_m(v | y_<t, x)

(Marian's ensembling with equal weights; not renormalised, so the score of a given
translation is exactly the mean of the members' scores). With a lexical shortlist each
member takes its softmax over the sentence's candidates before the mean. Members may be of different
families; they must share the vocabulary. Attention, when asked for, is the first
member's (``attention_model``, which forced alignment of a translation runs). An
ensemble decodes and scores; it is not trained.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import Tensor, nn

from nmt_cli.models.base import Memory, Seq2SeqModel, State
from nmt_cli.models.output_rows import OutputVocabulary

def _shortest(limits: Iterable[int | None]) -> int | None:
    """The tightest of the members' length limits (None: no member has one)."""
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


__all__ = ["Ensemble"]


class Ensemble(Seq2SeqModel):
    """Members decode in lockstep; their next-token log-probabilities are averaged."""

    def __init__(self, members: Sequence[Seq2SeqModel]):
        super().__init__()
        self.members = nn.ModuleList(members)
        self.attention_layers = members[0].attention_layers
        self.attention_heads = members[0].attention_heads
        self.max_source_length = _shortest(member.max_source_length for member in members)
        self.max_target_length = _shortest(member.max_target_length for member in members)

    def encode(self, src_tokens: Tensor, src_mask: Tensor) -> Memory:
        return {"src_mask": src_mask, "members": [member.encode(src_tokens, src_mask) for member in self.members]}

    def step_log_probs(
        self, prev_tokens: Tensor, memory: Memory, state: State | None, need_attention: bool = False,
        vocabulary: OutputVocabulary | None = None,
    ) -> tuple[Tensor, State, Tensor | None]:
        states = state["members"] if state is not None else [None] * len(self.members)
        total, new_states, attention = None, [], None
        for number, (member, member_memory, member_state) in enumerate(zip(self.members, memory["members"], states)):
            log_probs, member_state, member_attention = member.step_log_probs(
                prev_tokens, member_memory, member_state, need_attention and number == 0, vocabulary)
            total = log_probs if total is None else total + log_probs
            new_states.append(member_state)
            attention = member_attention if number == 0 else attention
        return total / len(self.members), {"members": new_states}, attention  # (B, V)

    def forced_log_probs(self, src_tokens: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        stacked = torch.stack([member.forced_log_probs(src_tokens, src_mask, tgt_in, tgt_mask)
                               for member in self.members])
        return stacked.mean(dim=0)  # (B, T, V)

    @property
    def attention_model(self) -> Seq2SeqModel:
        return self.members[0]

    def reorder_state(self, state: State, indices: Tensor) -> State:
        return {"members": [member.reorder_state(member_state, indices)
                            for member, member_state in zip(self.members, state["members"])]}

    def reorder_memory(self, memory: Memory, indices: Tensor) -> Memory:
        return {"src_mask": memory["src_mask"].index_select(0, indices),
                "members": [member.reorder_memory(member_memory, indices)
                            for member, member_memory in zip(self.members, memory["members"])]}
