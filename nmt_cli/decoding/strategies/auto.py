"""``decode.search: auto`` (the default): the strategy the other search settings imply."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.strategies.base import Search
from nmt_cli.registry import SEARCH_STRATEGIES

__all__ = ["implied_strategy"]


def implied_strategy(decode: DecodeConfig) -> str:
    """``sampling`` when ``decode.sampling`` is set, ``greedy`` at beam size 1, else ``beam``."""
    if decode.sampling != "none":
        return "sampling"
    return "greedy" if decode.beam_size == 1 else "beam"


@SEARCH_STRATEGIES.register("auto")
def implied_search(requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig, keep_attention: bool = False,
                   generator: torch.Generator | None = None) -> Search:
    """The search of :func:`implied_strategy`."""
    return SEARCH_STRATEGIES.get(implied_strategy(decode))(requests, max_lens, decode, keep_attention, generator)
