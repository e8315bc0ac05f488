"""Sampling: ``decode.beam_size`` independent draws per sentence (``decode.search: sampling``)."""

from __future__ import annotations

from torch import Tensor

from nmt_cli.decoding.search import sample_tokens
from nmt_cli.decoding.strategies.greedy import GreedySearch
from nmt_cli.registry import SEARCH_STRATEGIES

__all__ = ["SamplingSearch"]


@SEARCH_STRATEGIES.register("sampling")
class SamplingSearch(GreedySearch):
    """Greedy bookkeeping with ``decode.beam_size`` rows per sentence, each drawing its next
    token from ``softmax(log p / temperature)`` within ``decode.sampling``'s top-k or top-p,
    from the batch's generator."""

    @property
    def copies(self) -> int:
        return self.decode.beam_size

    def choose(self, log_probs: Tensor) -> Tensor:
        decode = self.decode
        return sample_tokens(log_probs, temperature=decode.temperature,
                             top_k=decode.top_k if decode.sampling == "top_k" else 0,
                             top_p=decode.top_p if decode.sampling == "top_p" else 1.0,
                             generator=self.generator)
