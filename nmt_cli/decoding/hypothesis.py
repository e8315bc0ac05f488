"""What decoding returns for one sentence."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Hypothesis:
    """One translation: target ids, scores, n-best list and (when asked) cross-attention.

    ``score`` is the ranking score ``log P(y | x) / lp(y)`` (GNMT length penalty, EOS
    counted in ``|y|``); ``log_prob`` is ``log P(y | x)`` itself. ``tokens`` holds the
    target ids without EOS. ``nbest`` lists the best hypotheses, best first;
    ``nbest[0]`` is this hypothesis. ``attention`` (L, H, T, S), when asked for, holds the
    cross-attention of every decoder layer and head: row ``t`` is the distribution over
    the S source tokens while predicting token ``t`` (the EOS step is not included);
    :mod:`nmt_cli.alignment.reader` reads alignments from it. ``text`` is filled by the
    :class:`Translator`. ``long_input`` says what happened to a source longer than the
    model takes (``decode.on_long_line``): ``"truncated"``, ``"skipped"`` or ``""``.
    ``token_log_probs`` holds ``log p(y_t | y_<t, x)`` of each output token and then of
    EOS (``len(tokens) + 1`` entries; ``None`` where the engine gives no per-token scores).
    ``constraints_met`` says, for each constraint of the request in order, whether the
    output contains one of its alternatives.
    """

    tokens: list[int]
    score: float
    log_prob: float
    text: str = ""
    nbest: list["Hypothesis"] = field(default_factory=list)
    attention: np.ndarray | None = None
    long_input: str = ""
    token_log_probs: list[float] | None = None
    constraints_met: list[bool] = field(default_factory=list)


__all__ = ["Hypothesis"]
