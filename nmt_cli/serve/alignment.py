"""Word alignment of one translation as the service returns it: Pharaoh links and the soft matrix."""

from __future__ import annotations

from typing import Any

from nmt_cli.pharaoh import format_links
from nmt_cli.alignment.reader import AttentionReading
from nmt_cli.decoding import Hypothesis, Translator
from nmt_cli.translation import hypothesis_alignment

__all__ = ["alignment_record"]

#: decimals of the soft matrix in answers (the page draws it; more would only weigh on the wire)
DECIMALS = 4


def alignment_record(source: str, hypothesis: Hypothesis, translator: Translator) -> dict[str, Any]:
    """``links`` as ``nmt translate --alignments`` writes them (the same reader, the same default
    reading), the words of both sides and ``matrix[target word][source word]`` (rows sum to 1)."""
    aligned = hypothesis_alignment(source, hypothesis, translator, AttentionReading())
    return {
        "links": format_links(aligned.links),
        "source_words": aligned.src_words,
        "target_words": aligned.tgt_words,
        "matrix": [[round(float(weight), DECIMALS) for weight in row] for row in aligned.matrix],
    }
