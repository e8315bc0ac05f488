"""Corpus scores from sacreBLEU: BLEU, chrF (chrF++ with ``word_order=2``) and TER.

Thin wrappers: the metric objects, their scores and their signatures are sacreBLEU's
own, so a score printed here is the score ``sacrebleu`` prints for the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric

from nmt_cli.errors import NmtError

METRICS = ("bleu", "chrf", "ter")


@dataclass(frozen=True)
class MetricOptions:
    """Settings that change a score (and so appear in its sacreBLEU signature).

    ``lowercase`` and ``tokenize`` apply to BLEU (and lowercase to chrF/TER's case
    handling where sacreBLEU offers it); ``tokenize=None`` keeps sacreBLEU's default
    (13a). They exist to report a figure like for like with papers that score
    lowercased or tokenized text; the default is sacreBLEU's standard setting.
    """

    chrf_plus: bool = False
    lowercase: bool = False
    tokenize: str | None = None


@dataclass(frozen=True)
class MetricResult:
    """One corpus score: ``name`` as sacreBLEU spells it (``BLEU``, ``chrF2++``, ``TER``)."""

    name: str
    score: float
    signature: str
    text: str  # sacreBLEU's own line: "<name>|<signature> = <score and details>"

    def to_dict(self) -> dict:
        return {"name": self.name, "score": self.score, "signature": self.signature, "text": self.text}


def parse_metrics(spec: str | Sequence[str]) -> list[str]:
    """``"bleu,chrf"`` -> ``["bleu", "chrf"]``; unknown names fail listing the valid ones."""
    names = [name.strip().lower() for name in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [name for name in names if name]
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names:
        raise NmtError(f"unknown metric {unknown[0] if unknown else spec!r}; valid: {', '.join(METRICS)}")
    return list(dict.fromkeys(names))


def build_metric(name: str, options: MetricOptions = MetricOptions()) -> Metric:
    """A sacreBLEU metric object; chrF++ adds word bigrams (``word_order=2``)."""
    if name == "bleu":
        return BLEU(lowercase=options.lowercase, tokenize=options.tokenize)
    if name == "chrf":
        return CHRF(word_order=2 if options.chrf_plus else 0, lowercase=options.lowercase)
    if name == "ter":
        return TER(case_sensitive=not options.lowercase)
    raise NmtError(f"unknown metric {name!r}; valid: {', '.join(METRICS)}")


def corpus_scores(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    metrics: Sequence[str] = METRICS,
    options: MetricOptions = MetricOptions(),
    source: str = "hypotheses",
) -> list[MetricResult]:
    """Score ``hypotheses`` against one or more reference streams (each as long as them).

    No hypotheses at all is an error naming ``source`` (an empty file has no score).
    """
    if not hypotheses:
        raise NmtError(f"{source}: empty, nothing to score")
    results = []
    for name in metrics:
        metric = build_metric(name, options)
        score = metric.corpus_score(list(hypotheses), [list(stream) for stream in references])
        signature = str(metric.get_signature())
        results.append(MetricResult(score.name, score.score, signature, score.format(signature=signature)))
    return results


__all__ = ["METRICS", "MetricOptions", "MetricResult", "parse_metrics", "build_metric", "corpus_scores"]
