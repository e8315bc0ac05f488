"""Evaluation with sacreBLEU: corpus scores with signatures and paired bootstrap tests."""

from nmt_cli.evaluation.metrics import METRICS, MetricOptions, MetricResult, corpus_scores, parse_metrics
from nmt_cli.evaluation.significance import BootstrapResult, paired_bootstrap

__all__ = [
    "METRICS",
    "MetricOptions",
    "MetricResult",
    "corpus_scores",
    "parse_metrics",
    "BootstrapResult",
    "paired_bootstrap",
]
