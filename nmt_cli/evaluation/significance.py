"""Paired bootstrap resampling between two systems, through sacreBLEU's ``PairedTest``.

Koehn (2004): resample the test set with replacement many times, score both systems on
each resample, and count how often the difference between them is at least as large
as the observed one once centred; that fraction is the p-value. sacreBLEU implements
it (``test_type="bs"``, seeded by ``SACREBLEU_SEED``, 12345 by default); this module
only packs its results.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from sacrebleu.significance import PairedTest

from nmt_cli.evaluation.metrics import MetricOptions, build_metric


@dataclass(frozen=True)
class BootstrapResult:
    """One metric: both scores, their bootstrap means and 95% half-widths, and the p-value."""

    name: str
    baseline: float
    system: float
    baseline_mean: float
    baseline_ci: float
    system_mean: float
    system_ci: float
    p_value: float
    signature: str

    def to_dict(self) -> dict:
        return asdict(self)


def paired_bootstrap(
    system: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu",),
    options: MetricOptions = MetricOptions(),
    samples: int = 1000,
) -> list[BootstrapResult]:
    """Is ``system`` different from ``baseline``? One result per metric, with its p-value."""
    test = PairedTest(
        named_systems=[("baseline", list(baseline)), ("system", list(system))],
        metrics={name: build_metric(name, options) for name in metrics},
        references=[list(stream) for stream in references],
        test_type="bs",
        n_samples=samples,
    )
    signatures, scores = test()
    results = []
    for name, (base, candidate) in ((k, v) for k, v in scores.items() if k != "System"):
        results.append(BootstrapResult(
            name=name,
            baseline=base.score,
            system=candidate.score,
            baseline_mean=float(base.mean),
            baseline_ci=float(base.ci),
            system_mean=float(candidate.mean),
            system_ci=float(candidate.ci),
            p_value=float(candidate.p_value),
            signature=str(signatures[name]),
        ))
    return results


__all__ = ["BootstrapResult", "paired_bootstrap"]
