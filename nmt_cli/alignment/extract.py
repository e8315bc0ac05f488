"""Forced decoding: run a model on a given target and read its cross-attention.

The decoder is fed ``BOS y_1 ... y_T`` (teacher forcing, as in training) and returns
attention (B, L, H, T+1, S): row ``t`` is the step whose decoder input is ``tgt_in[t]``
and which predicts ``y_{t+1}`` (the last row predicts EOS). For RNN models these are the
weights ``alpha_{t,i}`` of the seed formula ``c_t = sum_i alpha_{t,i} h_i`` (L = H = 1).

Which row belongs to target piece ``k`` (0-based)?

* ``shift=False``: row ``k``, the step that *predicts* ``y_k``. This is what the RNN
  attention models mean by alignment: ``alpha_{t,i} = align(y_t, x_i)``.
* ``shift=True`` (shift-att, Chen et al. 2020, "Accurate word alignment induction from
  neural machine translation"): row ``k + 1``, the step where ``y_k`` is the decoder
  *input*. A Transformer decoder attends to the source before it has seen the word it
  predicts, so its weights at that step describe the next word poorly; one step later
  the word is in the input and the weights align it much better.

With ``full_context`` (a head guided in the full-context pass, Garg et al. 2019) the
weights come from a decoder pass in which every step sees the whole target, not only
its prefix; the rows mean the same.

Either way the EOS row (or the BOS-input row) is dropped; source columns are exactly
the source pieces (training feeds the source without BOS/EOS), so padding is dropped.
With ``null`` (a model with ``model.alignment_null``) the null position's column is kept
after them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from nmt_cli.alignment.reader import HeadSelection
from nmt_cli.decoding.batching import Pair, forced_batches
from nmt_cli.device import model_device
from nmt_cli.errors import NmtError
from nmt_cli.models.base import Seq2SeqModel

__all__ = ["forced_attention"]

@torch.inference_mode()
def forced_attention(
    model: Seq2SeqModel, pairs: Sequence[Pair], shift: bool, batch_size: int = 32,
    selection: HeadSelection | None = None, full_context: bool = False, null: bool = False,
) -> list[np.ndarray]:
    """Cross-attention per pair of piece-id lists, in input order.

    Each result is (L, H, T, S), or (T, S) when ``selection`` is given (averaged batch by
    batch, so a large corpus never holds every head in memory). ``T`` and ``S`` are the
    target and source piece counts (no BOS/EOS, no padding), ``S + 1`` with ``null``.
    Pairs with an empty side get an all-zero array of the right shape without running
    the model.
    """
    if batch_size < 1:
        raise NmtError(f"batch size must be positive, got {batch_size}")
    device = model_device(model)
    heads_shape = () if selection else (model.attention_layers, model.attention_heads)
    first_row = 1 if shift else 0
    results = [np.zeros((*heads_shape, len(tgt), len(src) + null), dtype=np.float32) for src, tgt in pairs]
    runnable = [k for k, (src, tgt) in enumerate(pairs) if len(src) and len(tgt)]
    reader = model.attention_model  # an ensemble's attention is its first member's
    for batch in forced_batches(pairs, runnable, batch_size, device):
        _, attention = reader(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, need_attention=True,
                              features_only=True, full_context_attention=full_context)  # (B, L, H, T+1, S)
        attention = attention.float().cpu().numpy()
        if null and attention.shape[-1] != batch.src.size(1) + 1:
            raise NmtError("the model has no null position to read (model.alignment_null)")
        for row, k in enumerate(batch.indices):
            src_len, tgt_len = len(pairs[k][0]), len(pairs[k][1])
            weights = attention[row, :, :, first_row : first_row + tgt_len]  # (L, H, T, S_padded [+ 1])
            columns = [*range(src_len), weights.shape[-1] - 1] if null else slice(0, src_len)
            weights = weights[..., columns]  # (L, H, T, S [+ 1])
            results[k] = selection.apply(weights) if selection else weights.copy()
    return results
