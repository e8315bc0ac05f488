"""Mask-Align (Chen et al. 2021, "Mask-Align: Self-Supervised Neural Word Alignment"): an
aligner, not a translator.

Every target token ``y_t`` is predicted from the source and *all the other* target
tokens, never from itself. Its cross-attention then has to find the source words that
translate the one token it cannot see, so the last layer's cross-attention aligns
words (the paper reports 14.4 AER on German-English Europarl, below GIZA++'s 20.6).

* Static-KV self-attention: in every layer the queries of position ``t`` come from the
  running state of ``t``, which starts as the position embedding alone; the keys and values
  are the embedded target tokens (tokens plus positions) of the input layer, with ``t``'s own
  key masked out. No position ever sees its own token.
* Only the last of the ``decoder_layers`` layers attends to the source (the authors'
  ``last_cross`` setting): the layers before it gather the target context, and the one
  cross-attention must then find the source of the missing token. ``attention_layers`` is 1.
* Leaky attention: the cross-attention has one learned extra key and value (a "leak")
  after the source, where a token with no counterpart can put its weight instead of on an
  arbitrary word. The returned weights leave the leak out (rows sum to at most one).
* Not here: the paper's agreement loss between two directions trained together; train one
  model per direction and symmetrize (``nmt align --reverse-checkpoint``).

It plugs into the training and alignment paths as any model: ``forward(src, src_mask,
tgt_in, tgt_mask)`` gives, at position ``t``, features predicting ``tgt_out[t]`` (``y_t``,
then EOS), so the translation loss is the masked-prediction loss and forced decoding
reads row ``t`` as the alignment of ``y_t`` (no shift). ``decode_step`` refuses: it cannot
generate translations.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt_cli.config import ModelConfig
from nmt_cli.errors import NmtError
from nmt_cli.models.attention.common import append_null_position
from nmt_cli.models.attention.multihead import MultiHeadAttention, build_kernel
from nmt_cli.models.base import Memory, Seq2SeqModel, State
from nmt_cli.models.dropout import Dropout
from nmt_cli.models.embeddings import token_table
from nmt_cli.models.transformer import (Encoder, FeedForward, Residual, _check_vocabulary, _embedding,
                                        _output_projection)
from nmt_cli.registry import MODEL_FAMILIES
from nmt_cli.specials import EOS_ID, PAD_ID

__all__ = ["MaskAlign"]


class MaskedLayer(nn.Module):
    """Static-KV self-attention (no position sees its own token), leaky cross-attention
    (``cross=True``, the last layer), FFN."""

    def __init__(self, cfg: ModelConfig, cross: bool):
        super().__init__()
        pre_norm = cfg.norm_position == "pre"
        # always softmax: each query reads the keys through a mask of its own (``others``), which the
        # softmax kernel's summary carries as it is; the encoder and cross-attention take model.attention_kernel
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, build_kernel("softmax", cfg, "decoder_self"))
        self.self_res = Residual(cfg.d_model, cfg.dropout, pre_norm)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout)
        self.ffn_res = Residual(cfg.d_model, cfg.dropout, pre_norm)
        self.cross = cross
        if cross:
            self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads,
                                                 build_kernel(cfg.attention_kernel, cfg, "cross"))
            self.cross_res = Residual(cfg.d_model, cfg.dropout, pre_norm)
            self.leak = nn.Parameter(torch.randn(1, 1, cfg.d_model) * cfg.d_model**-0.5)  # the leak's memory vector

    def forward(self, x: Tensor, tokens: Tensor, others: Tensor, memory: Tensor, src_mask: Tensor,
                need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """State (B, T, d), embedded tokens (B, T, d), visible keys (B, 1, T, T), encoder output
        (B, S, d) -> state (B, T, d), cross weights without the leak (B, H, T, S) | None."""
        attn = self.self_attn
        (q,) = attn._project(self.self_res.input(x), first=0, parts=1)  # (B, H, T, d_k)
        k, v = attn._project(tokens, first=1, parts=2)  # (B, H, T, d_k) each
        context, _ = attn.kernel.read(q, {"k": k, "v": v, "mask": others}, need_weights=False)
        x = self.self_res.add(x, attn._merge_heads(context))
        if not self.cross:
            return self.ffn_res.add(x, self.ffn(self.ffn_res.input(x))), None
        leaky, leaky_mask = append_null_position(memory, src_mask, self.leak)  # (B, S + 1, d), (B, S + 1)
        summary = self.cross_attn.summarize_memory(leaky, leaky_mask)
        attended, weights = self.cross_attn.cross(self.cross_res.input(x), summary, need_weights)
        x = self.cross_res.add(x, attended)
        x = self.ffn_res.add(x, self.ffn(self.ffn_res.input(x)))
        return x, weights[..., :-1] if weights is not None else None


@MODEL_FAMILIES.register("mask_align")
class MaskAlign(Seq2SeqModel):
    """An encoder and ``decoder_layers`` masked layers over the target; see the module docstring."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        super().__init__()
        _check_vocabulary(src_vocab_size, tgt_vocab_size, joint_vocab)
        self.attention_layers = 1  # only the last layer attends to the source
        self.attention_heads = cfg.heads
        tgt_table = token_table(tgt_vocab_size, cfg.d_model)
        src_table = tgt_table if joint_vocab and cfg.tie_embeddings else token_table(src_vocab_size, cfg.d_model)
        self.encoder = Encoder(cfg, _embedding(cfg, src_table),
                               [build_kernel(cfg.attention_kernel, cfg, "encoder_self")
                                for _ in range(cfg.encoder_layers)])
        self.tgt_embedding = _embedding(cfg, tgt_table)
        self.query_dropout = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(MaskedLayer(cfg, cross=k == cfg.decoder_layers - 1)
                                    for k in range(cfg.decoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_position == "pre" else nn.Identity()
        self.output_projection = _output_projection(cfg, tgt_table, tgt_vocab_size)

    @classmethod
    def from_config(cls, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        return cls(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)

    def encode(self, src_tokens: Tensor, src_mask: Tensor) -> Memory:
        return {"src_mask": src_mask, "encoded": self.encoder(src_tokens, src_mask)}

    def decode_step(self, prev_tokens: Tensor, memory: Memory, state: State | None,
                    need_attention: bool = False, features_only: bool = False) -> tuple[Tensor, State, Tensor | None]:
        raise NmtError("a mask_align model aligns words and cannot translate; use `nmt align` with it")

    def forward(self, src_tokens: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor,
                need_attention: bool = False, features_only: bool = False,
                full_context_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """Position ``t`` predicts ``tgt_out[t]`` (``y_t``, or EOS after the last token) from the
        source and every other target token; weights (B, L, H, T, S) without the leak. They
        already see the whole target, so ``full_context_attention`` changes nothing."""
        memory = self.encoder(src_tokens, src_mask)  # (B, S, d)
        targets = _targets(tgt_in, tgt_mask)  # (B, T): y_1 .. y_n EOS PAD ..
        tokens = self.tgt_embedding(targets)  # (B, T, d)
        length = targets.size(1)
        x = self.query_dropout(self.tgt_embedding.positions(length).to(tokens.dtype).expand_as(tokens))
        not_self = ~torch.eye(length, dtype=torch.bool, device=targets.device)  # (T, T)
        others = (not_self[None] & tgt_mask[:, None, :])[:, None]  # (B, 1, T, T): keys each query may see
        for layer in self.layers:
            x, weights = layer(x, tokens, others, memory, src_mask, need_attention)
        hidden = self.final_norm(x)
        output = hidden if features_only else self.output_projection(hidden)
        return output, weights[:, None] if need_attention else None  # (B, 1, H, T, S)

    def output_layer(self) -> nn.Linear:
        return self.output_projection


def _targets(tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
    """``tgt_out`` rebuilt from ``tgt_in = BOS y`` and its mask: ``y EOS``, padded."""
    shifted = torch.cat([tgt_in[:, 1:], tgt_in.new_full((tgt_in.size(0), 1), PAD_ID)], dim=1)  # (B, T)
    last = tgt_mask.sum(dim=1, keepdim=True) - 1  # (B, 1): the EOS position
    shifted = shifted.scatter(1, last, EOS_ID)
    return shifted.masked_fill(~tgt_mask, PAD_ID)
