"""The one interface every model family implements.

Beam search, training and alignment extraction are written once against it.

Conventions (all model families):

* Masks are boolean with ``True`` = real token, ``False`` = padding.
* ``encode(src_tokens, src_mask) -> memory``: ``memory`` is a dict of tensors whose first
  dimension is the batch. It always holds ``"src_mask"`` (B, S); model families add what
  they need (encoder states, keys projected once per sentence, cross-attention K/V).
* ``decode_step(prev_tokens, memory, state, need_attention) -> (logits, state, attention)``:
  ``prev_tokens`` is (B,) with the last emitted token (BOS on the first step, when
  ``state`` is ``None``). ``logits`` is (B, V). ``state`` is a dict of tensors, batch first
  (recurrent state, key/value cache, or the linear-attention sums ``S`` and ``Z``).
  ``attention`` is ``None`` unless asked for, then (B, L, H, S): cross-attention weights
  per decoder layer ``L`` and head ``H`` (RNN models: L = H = 1). A Transformer with a
  learned null position (``model.alignment_null``) has one column more, the null's, last.
  With ``features_only`` it returns the decoder features (B, F) instead of the logits, as
  ``forward`` does.
* ``step_log_probs(prev_tokens, memory, state, need_attention) -> (log_probs, state,
  attention)`` is what the generation loop calls: by default ``log_softmax`` of
  ``decode_step``'s logits in float32; ``forced_log_probs(src_tokens, src_mask, tgt_in,
  tgt_mask) -> (B, T, V)`` is the same for a whole given target (scoring). An ensemble
  (:mod:`nmt_cli.decoding.ensemble`) overrides both. Given an
  :class:`~nmt_cli.models.output_rows.OutputVocabulary` (a lexical shortlist),
  ``step_log_probs`` returns (B, C) log-probabilities of its ``C`` tokens alone, each row's
  softmax taken over the tokens it allows.
* ``reorder_state`` / ``reorder_memory`` select batch rows (beam search); the default
  ``index_select`` of every tensor along dimension 0 is right for all state kept batch first.
* ``forward(src_tokens, src_mask, tgt_in, tgt_mask, need_attention, features_only)`` is
  teacher forcing: returns logits (B, T, V) and, when asked, attention (B, L, H, T, S).
  With ``features_only`` it returns the decoder features (B, T, F) instead of logits, and
  ``output_layer()(features)`` are the logits; the training loss projects them itself, a
  block of rows at a time (:mod:`nmt_cli.training.loss`). With ``full_context_attention``
  the attention is read with the whole target visible to every position (guided
  alignment's full-context pass, Garg et al. 2019): a Transformer runs its decoder a
  second time without the future mask; Mask-Align's attention sees the whole target
  anyway; an RNN decoder cannot and refuses.
* ``attention_model`` is the model whose attention this one reports (itself; an
  ensemble's first member): forced decoding for alignments runs it alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from nmt_cli.models.output_rows import OutputVocabulary, restricted_logits

Memory = dict[str, Any]
State = dict[str, Any]


def index_select_tree(tree: Any, indices: Tensor) -> Any:
    """Select rows ``indices`` along dimension 0 of every tensor in a nested dict/list/tuple."""
    if isinstance(tree, Tensor):
        return tree.index_select(0, indices)
    if isinstance(tree, dict):
        return {key: index_select_tree(value, indices) for key, value in tree.items()}
    if isinstance(tree, list):
        return [index_select_tree(value, indices) for value in tree]
    if isinstance(tree, tuple):
        return tuple(index_select_tree(value, indices) for value in tree)
    return tree


class Seq2SeqModel(nn.Module):
    """Base class: subclasses implement ``encode``, ``decode_step`` and ``forward``."""

    #: number of decoder layers and heads whose cross-attention ``decode_step`` reports
    attention_layers: int = 1
    attention_heads: int = 1
    #: the longest source and target (tokens, without EOS) the model can take; None: no limit
    max_source_length: int | None = None
    max_target_length: int | None = None

    def encode(self, src_tokens: Tensor, src_mask: Tensor) -> Memory:  # pragma: no cover
        raise NotImplementedError

    def decode_step(
        self,
        prev_tokens: Tensor,
        memory: Memory,
        state: State | None,
        need_attention: bool = False,
        features_only: bool = False,
    ) -> tuple[Tensor, State, Tensor | None]:  # pragma: no cover
        raise NotImplementedError

    def forward(
        self,
        src_tokens: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        tgt_mask: Tensor,
        need_attention: bool = False,
        features_only: bool = False,
        full_context_attention: bool = False,
    ) -> tuple[Tensor, Tensor | None]:  # pragma: no cover
        raise NotImplementedError

    @property
    def attention_model(self) -> "Seq2SeqModel":
        """The model whose cross-attention this one reports: itself (an ensemble: its first member)."""
        return self

    def output_layer(self) -> nn.Linear:  # pragma: no cover
        """The linear map from decoder features to logits over the target vocabulary."""
        raise NotImplementedError

    def step_log_probs(
        self, prev_tokens: Tensor, memory: Memory, state: State | None, need_attention: bool = False,
        vocabulary: OutputVocabulary | None = None,
    ) -> tuple[Tensor, State, Tensor | None]:
        """``decode_step`` with the logits turned into float32 log-probabilities (B, V); with a
        ``vocabulary``, (B, C) over its tokens, projected from the features onto those rows
        of the output layer alone.

        The log-softmax overwrites the logits, which nothing else holds, instead of filling a
        new (B, V) array at every step.
        """
        if vocabulary is None:
            logits, state, attention = self.decode_step(prev_tokens, memory, state, need_attention)
        else:
            features, state, attention = self.decode_step(prev_tokens, memory, state, need_attention,
                                                           features_only=True)
            logits = restricted_logits(features, self.output_layer(), vocabulary)  # (B, C)
        logits = logits.float()
        if logits.requires_grad:
            return logits.log_softmax(dim=-1), state, attention
        return torch.log_softmax(logits, dim=-1, out=logits), state, attention

    def forced_log_probs(self, src_tokens: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher-forced float32 log-probabilities of every next token: (B, T, V)."""
        logits, _ = self(src_tokens, src_mask, tgt_in, tgt_mask)
        return logits.float().log_softmax(dim=-1)

    def reorder_state(self, state: State, indices: Tensor) -> State:
        return index_select_tree(state, indices)

    def reorder_memory(self, memory: Memory, indices: Tensor) -> Memory:
        return index_select_tree(memory, indices)

    def num_parameters(self) -> int:
        """Distinct parameters (tied embeddings counted once)."""
        return sum(p.numel() for p in self.parameters())
