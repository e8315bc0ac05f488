"""Translate a prepared split with a checkpoint and score it: ``nmt evaluate --checkpoint``.

The source is the split's cleaned source text and the reference its cleaned target
text, both written by ``nmt prepare``; the hypotheses are detokenised translations, so
sacreBLEU scores plain text against plain text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import Translator
from nmt_cli.evaluation.metrics import METRICS, MetricOptions, MetricResult, corpus_scores
from nmt_cli.textio import read_parallel


@dataclass
class SplitEvaluation:
    """Translations of one prepared split, its references and their scores."""

    source_path: Path
    reference_path: Path
    hypotheses: list[str]
    references: list[str]
    scores: list[MetricResult]


def evaluate_split(
    translator: Translator,
    prepared_dir: str | os.PathLike,
    split: str = "test",
    metrics: Sequence[str] = METRICS,
    options: MetricOptions = MetricOptions(),
) -> SplitEvaluation:
    """Translate ``split`` of a prepared directory and score it against its references."""
    data = PreparedData(prepared_dir)
    source_path = Path(data.text_path(split, "src"))
    reference_path = Path(data.text_path(split, "tgt"))
    sources, references = read_parallel(source_path, reference_path)
    hypotheses = [hypothesis.text for hypothesis in translator.translate(sources)]
    scores = corpus_scores(hypotheses, [references], metrics, options)
    return SplitEvaluation(source_path, reference_path, hypotheses, references, scores)


__all__ = ["SplitEvaluation", "evaluate_split"]
