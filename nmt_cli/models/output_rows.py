"""A decoding step restricted to some output tokens (a lexical shortlist).

:class:`OutputVocabulary` names the tokens a step computes, ``ids`` (C,), and which of them
each decoder row's sentence may choose, ``allowed`` (N, C). A model's ``step_log_probs``
then projects its decoder features onto those ``C`` rows of its output layer alone
(:func:`restricted_logits`: the product costs ``C / V`` of the full one) and takes the
softmax over each row's allowed tokens: the distribution of a model whose output layer
holds only that sentence's candidates, as CTranslate2's vocabulary map and Marian's
shortlist compute it. The rows of the output layer are gathered once per batch, whatever
form the layer has (``nn.Linear``, :class:`~nmt_cli.models.packed.PackedLinear`, torch's
dynamic int8 ``Linear``: :func:`restricted_layer`), and kept in the vocabulary's ``cache``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor, nn

__all__ = ["OutputVocabulary", "restricted_layer", "restricted_logits"]


@dataclass(frozen=True)
class OutputVocabulary:
    """``ids`` (C,) sorted target ids a step computes; ``allowed`` (N, C) which of them each row
    may choose (None: all); ``cache``: the restricted output layer of each model, shared by the
    steps of one batch."""

    ids: Tensor
    allowed: Tensor | None = None
    cache: dict[int, Callable[[Tensor], Tensor]] = field(default_factory=dict)


def restricted_layer(layer: nn.Module, ids: Tensor) -> Callable[[Tensor], Tensor]:
    """The rows ``ids`` of an output layer in any of its inference forms, as a layer of their own
    (features (N, F) -> logits (N, C)). A float layer's rows (``nn.Linear``, a
    :class:`~nmt_cli.models.packed.PackedLinear`'s kept float weight) make a float product; a
    dynamic int8 layer's rows keep their int8 values and scales, so the candidates' logits
    are those of the full int8 layer."""
    if isinstance(layer, nn.Linear) or hasattr(layer, "float_weight"):
        weight = layer.weight if isinstance(layer, nn.Linear) else layer.float_weight
        rows = weight.detach().index_select(0, ids.to(weight.device)).float().contiguous()  # (C, F)
        bias = None if layer.bias is None else layer.bias.detach().index_select(0, ids.to(weight.device)).float()
        return functools.partial(torch.nn.functional.linear, weight=rows, bias=bias)
    if callable(getattr(layer, "weight", None)) and hasattr(layer, "set_weight_bias"):  # torch.ao dynamic int8
        weight, bias = layer.weight(), layer.bias()
        ids = ids.to(weight.device)
        values = weight.dequantize().index_select(0, ids)  # exactly int8 value * scale
        if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            rows = torch.quantize_per_channel(values, weight.q_per_channel_scales().index_select(0, ids),
                                              weight.q_per_channel_zero_points().index_select(0, ids), 0, weight.dtype)
        else:
            rows = torch.quantize_per_tensor(values, weight.q_scale(), weight.q_zero_point(), weight.dtype)
        restricted = type(layer)(layer.in_features, len(ids), bias_=bias is not None, dtype=weight.dtype)
        restricted.set_weight_bias(rows, None if bias is None else bias.index_select(0, ids))
        return restricted
    raise TypeError(f"cannot restrict an output layer of type {type(layer).__name__}")


def restricted_logits(features: Tensor, layer: nn.Module, vocabulary: OutputVocabulary) -> Tensor:
    """(N, C) logits of ``vocabulary.ids`` from decoder ``features`` (N, F), ``-inf`` where a
    row may not choose the token."""
    key = id(layer)
    if key not in vocabulary.cache:
        vocabulary.cache[key] = restricted_layer(layer, vocabulary.ids)
    logits = vocabulary.cache[key](features).float()  # (N, C)
    if vocabulary.allowed is not None:
        logits = logits.masked_fill_(~vocabulary.allowed, float("-inf"))
    return logits
