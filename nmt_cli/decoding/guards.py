"""Telling a degenerate translation from a plausible one, by its tokens alone.

Out-of-domain input and weak models loop ("the the the ...", "of the of the of the") or
stop after a word, or run on to the length limit. :func:`degeneration` names the first
of these symptoms an output shows, so a reader (JSONL ``degenerate``, the service) can
flag the line and ``nmt translate --retry-degenerate`` can decode it again with the
repetition guards (``decode.no_repeat_ngram``, ``decode.repetition_penalty``) on.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["LOOP_MAX_N", "LOOP_REPEATS", "LENGTH_RATIO_BOUNDS", "MIN_SOURCE_FOR_RATIO", "degeneration"]

#: the longest n-gram whose back-to-back repetition counts as a loop
LOOP_MAX_N = 4
#: back-to-back occurrences that make a loop: a single token needs 4 ("very very very" is
#: still language), a longer n-gram 3
LOOP_REPEATS = {1: 4, 2: 3, 3: 3, 4: 3}
#: output/source length ratios (in pieces) outside these bounds are degenerate
LENGTH_RATIO_BOUNDS = (1 / 3, 3.0)
#: sources shorter than this many pieces are not judged by their length ratio (a one-word
#: source may rightly get a three-word translation)
MIN_SOURCE_FOR_RATIO = 4


def degeneration(source_length: int, tokens: Sequence[int]) -> str:
    """Why the output ``tokens`` of a source of ``source_length`` pieces looks degenerate,
    or ``""``: ``"loop"`` (an n-gram of at most :data:`LOOP_MAX_N` tokens repeated back to
    back :data:`LOOP_REPEATS` times), ``"too long"`` or ``"too short"`` (the length ratio
    outside :data:`LENGTH_RATIO_BOUNDS`). An empty source is never degenerate."""
    if source_length == 0:
        return ""
    tokens = list(tokens)
    for n in range(1, LOOP_MAX_N + 1):
        repeats = LOOP_REPEATS[n]
        for start in range(0, len(tokens) - n * repeats + 1):
            gram = tokens[start:start + n]
            if all(tokens[start + k * n:start + (k + 1) * n] == gram for k in range(1, repeats)):
                return "loop"
    if source_length >= MIN_SOURCE_FOR_RATIO:
        ratio = len(tokens) / source_length
        low, high = LENGTH_RATIO_BOUNDS
        if ratio > high:
            return "too long"
        if ratio < low:
            return "too short"
    return ""
