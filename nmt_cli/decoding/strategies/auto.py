"""``decode.search: auto`` (the default): the strategy the other search settings and the batch imply."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.strategies.base import Search
from nmt_cli.registry import SEARCH_STRATEGIES

__all__ = ["implied_strategy"]


def implied_strategy(decode: DecodeConfig, constrained: bool = False) -> str:
    """``constrained`` for a batch with constraints (``constrained``), else ``sampling`` when
    ``decode.sampling`` is set, ``greedy`` at beam size 1, else ``beam``. Sampling does not
    enforce constraints: a batch with constraints and ``decode.sampling`` is refused by it."""
    if constrained and decode.sampling == "none":
        return "constrained"
    if decode.sampling != "none":
        return "sampling"
    return "greedy" if decode.beam_size == 1 else "beam"


@SEARCH_STRATEGIES.register("auto")
def implied_search(requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig, keep_attention: bool = False,
                   generator: torch.Generator | None = None) -> Search:
    """The search of :func:`implied_strategy` for this batch."""
    constrained = any(request.constraints for request in requests)
    return SEARCH_STRATEGIES.get(implied_strategy(decode, constrained))(requests, max_lens, decode, keep_attention, generator)
