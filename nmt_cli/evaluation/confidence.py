"""How well a translation's confidence predicts its quality: ``nmt evaluate --confidence``.

Reads the records of ``nmt translate --format jsonl`` (``text`` and ``confidence``: a
``log_prob_per_token`` and a ``min_token_prob`` per sentence), scores each ``text`` against
its references with sentence chrF (sacreBLEU), and reports

* Spearman's rank correlation between each confidence field and the sentence chrF;
* a flag ``confidence <= threshold`` for the sentences worst by chrF: the threshold that
  flags a share of the set (chosen on this set), or a threshold given (chosen on a dev set
  and applied here), with the flag's precision and recall against the same share of the
  set that is worst by chrF.

``nmt translate`` writes no ``confidence`` for a line it did not decode (an empty line, or
one skipped as too long), whose ``text`` is empty: such a record is left out and counted; a
record with a text but no confidence is an error.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from nmt_cli.errors import InputError, NmtError
from nmt_cli.evaluation.metrics import MetricOptions, build_metric
from nmt_cli.textio import display_name, iter_lines

#: the fields of a record's ``confidence`` object, as ``nmt translate --format jsonl`` writes them
CONFIDENCE_FIELDS = ("log_prob_per_token", "min_token_prob")
DEFAULT_FIELD = "log_prob_per_token"
DEFAULT_FLAG_SHARE = 0.1


@dataclass(frozen=True)
class ConfidenceRecords:
    """One JSONL file's outputs and confidences: ``texts`` has every record's, ``decoded`` the
    positions of the records with a confidence, ``values[field][j]`` that of record ``decoded[j]``."""

    path: str
    texts: list[str]
    decoded: list[int]
    values: dict[str, list[float]]


@dataclass(frozen=True)
class Flag:
    """Flagging ``confidence <= threshold`` against the sentences worst by chrF.

    ``flagged`` sentences are at or under the threshold, ``worst`` are the share of the set
    lowest in chrF, ``hits`` are both; precision = hits / flagged, recall = hits / worst
    (None when the denominator is 0); ``random_precision`` = worst / sentences is the
    precision a flag that picks sentences at random has on average.
    """

    field: str
    threshold: float
    chosen_on: str  # "this set" or "given"
    share: float
    flagged: int
    worst: int
    hits: int
    precision: float | None
    recall: float | None
    random_precision: float


@dataclass(frozen=True)
class ConfidenceReport:
    """What ``nmt evaluate --confidence`` prints: correlations per field and the flag."""

    path: str
    references: list[str]
    sentences: int  # scored: records with a value of ``flag.field``
    left_out: int  # records without a confidence (lines nmt translate did not decode)
    chrf_signature: str
    correlations: dict[str, float | None]  # field -> Spearman's rho (None: undefined, a constant side)
    flag: Flag

    def to_dict(self) -> dict:
        return asdict(self)


def read_confidence_records(path: str | os.PathLike, field: str = DEFAULT_FIELD) -> ConfidenceRecords:
    """The ``text`` and ``confidence`` of every record of a ``nmt translate --format jsonl`` file.

    Invalid JSON, a record that is not an object, a missing or non-string ``text``, a text
    without a ``confidence``, a confidence without ``field``, or a value that is not a number
    fail with ``<file>:<line>: <problem>``. The other fields of :data:`CONFIDENCE_FIELDS` are
    read where every record with a confidence has them (``min_token_prob`` needs an engine
    that scores each token).
    """
    name = display_name(path)
    texts: list[str] = []
    decoded: list[int] = []
    confidences: list[tuple[int, dict]] = []  # (line number, confidence)
    for number, line in enumerate(iter_lines(path), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(name, f"invalid JSON ({exc.msg} at column {exc.colno})", number) from None
        if not isinstance(record, dict):
            raise InputError(name, "expected a JSON object, a record of nmt translate --format jsonl", number)
        if not isinstance(record.get("text"), str):
            raise InputError(name, "missing field 'text' (a string: the translation)", number)
        texts.append(record["text"])
        if "confidence" not in record and not record["text"]:
            continue  # a line nmt translate did not decode
        confidence = record.get("confidence")
        if not isinstance(confidence, dict):
            raise InputError(name, f"missing field 'confidence' (an object with '{field}'), which nmt translate "
                                   "--format jsonl writes for every line it decodes", number)
        if field not in confidence:
            raise InputError(name, f"missing field 'confidence.{field}'", number)
        decoded.append(number - 1)
        confidences.append((number, confidence))
    values = {}
    for other in dict.fromkeys([field, *CONFIDENCE_FIELDS]):
        if all(other in confidence for _, confidence in confidences):
            values[other] = [_number(confidence[other], other, name, number) for number, confidence in confidences]
    return ConfidenceRecords(name, texts, decoded, values)


def _number(value, field: str, name: str, number: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InputError(name, f"field 'confidence.{field}' must be a number, got {json.dumps(value)}", number)
    return float(value)


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of ``values``, ties sharing the mean of the ranks they span ([5, 1, 5] -> [2.5, 1, 2.5])."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # first position of each run of ties
    ends = np.r_[starts[1:], len(values)]  # one past its last
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)  # mean of ranks start+1 .. end
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's r of the average ranks,
    ``sum((rx - mean)(ry - mean)) / sqrt(sum((rx - mean)^2) sum((ry - mean)^2))``;
    None when a side is constant (or has fewer than 2 values), where it is undefined."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} values against {len(y)}")
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return None if denominator == 0 else float(dx @ dy) / denominator


def lowest_share(values: Sequence[float], share: float) -> tuple[float, np.ndarray]:
    """``(t, mask)``: ``t`` is the k-th smallest value, ``k = ceil(share * n)`` (at least 1), and
    ``mask`` marks every value <= t (ties at t included, so the set may exceed k)."""
    values = np.asarray(values, dtype=np.float64)
    k = max(1, math.ceil(share * len(values) - 1e-9))  # 1e-9: 0.1 * 450 is 45.000000000000004
    threshold = float(np.sort(values)[k - 1])
    return threshold, values <= threshold


def flag_quality(confidence: Sequence[float], chrf: Sequence[float], field: str, share: float,
                 threshold: float | None = None) -> Flag:
    """Flag ``confidence <= threshold`` (``None``: the threshold of :func:`lowest_share`, chosen on
    this set) against ``worst`` = the sentences of :func:`lowest_share` of ``chrf``."""
    chosen_on = "given" if threshold is not None else "this set"
    if threshold is None:
        threshold, flagged = lowest_share(confidence, share)
    else:
        flagged = np.asarray(confidence, dtype=np.float64) <= threshold
    _, worst = lowest_share(chrf, share)
    hits = int(np.sum(flagged & worst))
    flagged_count, worst_count = int(flagged.sum()), int(worst.sum())
    return Flag(field, threshold, chosen_on, share, flagged_count, worst_count, hits,
                hits / flagged_count if flagged_count else None, hits / worst_count if worst_count else None,
                worst_count / len(chrf))


def sentence_chrf(hypotheses: Sequence[str], references: Sequence[Sequence[str]],
                  options: MetricOptions = MetricOptions()) -> tuple[list[float], str]:
    """sacreBLEU's sentence chrF (chrF++ with ``options.chrf_plus``) of each hypothesis against its
    references (``references[k][i]``: stream k's reference for sentence i); and the metric's signature."""
    metric = build_metric("chrf", options)
    scores = [metric.sentence_score(hypothesis, [stream[i] for stream in references]).score
              for i, hypothesis in enumerate(hypotheses)]
    return scores, str(metric.get_signature())


def confidence_report(records: ConfidenceRecords, references: Sequence[Sequence[str]], reference_paths: Sequence[str],
                      field: str = DEFAULT_FIELD, share: float = DEFAULT_FLAG_SHARE, threshold: float | None = None,
                      options: MetricOptions = MetricOptions()) -> ConfidenceReport:
    """Correlate every field the records have with sentence chrF, and flag by ``field`` (see :class:`Flag`);
    only the records with a confidence are scored."""
    if field not in records.values:
        raise ValueError(f"{records.path} was read without confidence.{field}: read_confidence_records(path, field)")
    for path, stream in zip(reference_paths, references):
        if len(stream) != len(records.texts):
            line = min(len(stream), len(records.texts)) + 1
            raise InputError(records.path, f"has {len(records.texts)} records but {path} has {len(stream)} lines; "
                                           "they must pair line by line", line)
    kept = records.decoded
    if not kept:
        raise NmtError(f"{records.path}: no record has a confidence (every line is empty); nothing to rank")
    chrf, signature = sentence_chrf([records.texts[i] for i in kept], [[s[i] for i in kept] for s in references],
                                    options)
    correlations = {name: spearman(values, chrf) for name, values in records.values.items()}
    flag = flag_quality(records.values[field], chrf, field, share, threshold)
    return ConfidenceReport(records.path, list(reference_paths), len(kept), len(records.texts) - len(kept),
                            signature, correlations, flag)


def report_lines(report: ConfidenceReport) -> list[str]:
    """The report as a small table and the flag's figures, for a terminal."""
    flag = report.flag
    left_out = f"; {report.left_out} without a confidence left out" if report.left_out else ""
    lines = [f"confidence of {report.path} against {', '.join(report.references)}: "
             f"{report.sentences} sentences{left_out}",
             f"sentence chrF: {report.chrf_signature}", "",
             f"{'field':<20} Spearman rho with sentence chrF"]
    for name, rho in report.correlations.items():
        lines.append(f"{name:<20} {'undefined (a constant side)' if rho is None else f'{rho:+.3f}'}")
    chosen = (f"chosen on this set, its lowest {flag.share:.0%}; pass it with --threshold to report it on another set"
              if flag.chosen_on == "this set" else "given with --threshold")
    lines += ["", f"flag: {flag.field} <= {flag.threshold!r} ({chosen})",
              f"  flagged {flag.flagged} of {report.sentences} ({flag.flagged / report.sentences:.1%}); "
              f"worst {flag.share:.0%} by sentence chrF: {flag.worst}; both: {flag.hits}",
              f"  precision {_share(flag.precision)}, recall {_share(flag.recall)} "
              f"(a random flag: precision {flag.random_precision:.3f})"]
    return lines


def _share(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


__all__ = ["CONFIDENCE_FIELDS", "DEFAULT_FIELD", "DEFAULT_FLAG_SHARE", "ConfidenceRecords", "ConfidenceReport",
           "Flag", "average_ranks", "confidence_report", "flag_quality", "lowest_share", "read_confidence_records",
           "report_lines", "sentence_chrf", "spearman"]
