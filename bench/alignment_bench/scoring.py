"""Aligning a corpus's sets with an nmt-cli system and scoring them: its default reading, the
reading or symmetrization picked on the dev pairs alone, the blind pairs' links, and the
BLEU of its translations."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from alignment_bench.corpora import BenchCorpus, PairSet
from alignment_bench.eflomal import links_counts
from alignment_bench.settings import Settings
from alignment_bench.steps import run_step
from alignment_bench.systems import NmtSystem
from common import nmt_command

from nmt_cli.alignment import AlignmentScore, read_alignments, score_files
from nmt_cli.alignment.symmetrize import describe as describe_symmetrization

#: the symmetrizations a tuned both-directions row of ours picks from: these link heuristics,
#: and ``average`` at ``nmt align``'s default threshold and each threshold of the scale
SYMMETRIZED_TRIED = ("intersection", "grow-diag", "grow-diag-final", "grow-diag-final-and")


@dataclass(frozen=True)
class Aligned:
    """A system's links of a gold set: its score, per-sentence counts and the seconds ``nmt align`` took."""

    score: AlignmentScore
    counts: np.ndarray
    seconds: float


def align(system: NmtSystem, pairs: PairSet, out: Path, settings: Settings, options: tuple = (),
          symmetrization: str | None = None) -> tuple[Path, float]:
    """``nmt align`` of ``pairs`` with ``options`` (none: the defaults), a system with a reverse
    model symmetrized by ``symmetrization`` (None: `nmt align`'s default); its links file and seconds."""
    measured = run_step(nmt_command("align", *system.align_options(symmetrization), "--src", pairs.src, "--tgt",
                                    pairs.tgt, "--out", out, "--device", settings.device, *options),
                        out.with_suffix(".log"), settings)
    return out / "alignments.align", measured.seconds


def align_and_score(system: NmtSystem, pairs: PairSet, out: Path, settings: Settings, options: tuple = (),
                    symmetrization: str | None = None) -> Aligned:
    """:func:`align` of a gold set, scored against its gold."""
    links, seconds = align(system, pairs, out, settings, options, symmetrization)
    counts = links_counts(pairs, [pair.possible for pair in read_alignments(links)])
    return Aligned(score_files(pairs.gold, links, pairs.src, pairs.tgt), counts, seconds)


def tuned_reading(system: NmtSystem, dev: PairSet, out: Path,
                  settings: Settings) -> tuple[tuple[str, ...], float, float]:
    """The ``nmt align`` options with the lowest AER on the dev pairs: every layer, head and
    shift (``nmt align sweep``) with argmax links and each threshold of the scale; that AER
    and the seconds spent."""
    best, seconds = None, 0.0
    rules = [("argmax", 0.2)] + [("threshold", value) for value in settings.scale.thresholds]
    for number, (method, threshold) in enumerate(rules):
        ranking = out / f"sweep-{number}.jsonl"
        measured = run_step(nmt_command("align", "sweep", "--checkpoint", system.checkpoint, "--src", dev.src,
                                        "--tgt", dev.tgt, "--gold", dev.gold, "--method", method,
                                        "--threshold", threshold, "--json", "--device", settings.device),
                            out / f"sweep-{number}.log", settings, stdout=ranking)
        seconds += measured.seconds
        top = json.loads(ranking.read_text(encoding="utf-8").splitlines()[0])
        options = f"{top['options']} --method {method}" + (f" --threshold {threshold}" if method == "threshold" else "")
        if best is None or top["aer"] < best[1]:
            best = (options, top["aer"])
    return tuple(best[0].split()), best[1], seconds


def symmetrization_candidates(thresholds: list[float]) -> list[tuple[str, tuple]]:
    """Each link heuristic of :data:`SYMMETRIZED_TRIED`, and the average of the two directions' weights at each threshold."""
    return [(method, ()) for method in SYMMETRIZED_TRIED] + [
        ("average", ("--average-threshold", value)) for value in thresholds]


def described(method: str, options: tuple) -> str:
    """A candidate of :func:`symmetrization_candidates` as ``nmt align`` describes it in its
    settings.json (``grow-diag-final-and``, ``average > 0.4``)."""
    return describe_symmetrization(method, options[1] if options else None)


def tuned_symmetrization(system: NmtSystem, dev: PairSet, out: Path,
                         settings: Settings) -> tuple[str, tuple, float, float, dict[str, float]]:
    """How to combine the two default readings with the lowest AER on the dev pairs
    (:func:`symmetrization_candidates` at the scale's thresholds); the symmetrization, its
    ``nmt align`` options, that AER, the seconds spent, and every candidate's AER there by how
    ``nmt align`` describes it (``grow-diag-final-and``, ``average > 0.4``): the default
    reading's dev AER is one of them, read from here instead of aligning the dev pairs again."""
    candidates = symmetrization_candidates(settings.scale.average_thresholds)
    scored, seconds, tried = [], 0.0, {}
    for number, (method, options) in enumerate(candidates):
        aligned = align_and_score(system, dev, out / f"symmetrize-{number}", settings, options, symmetrization=method)
        scored.append((aligned.score.aer, number))
        seconds += aligned.seconds
        tried[described(method, options)] = aligned.score.aer
    aer, number = min(scored)
    method, options = candidates[number]
    return method, options, aer, seconds, tried


def bleu(system: NmtSystem, corpus: BenchCorpus, out: Path, settings: Settings,
         baseline: Path | None) -> tuple[str, Path]:
    """Greedy BLEU of the system's model on ``corpus.bleu`` (with a paired bootstrap p-value
    against ``baseline``); the table's text and the translations."""
    source, reference = corpus.bleu
    hypotheses = out / "bleu.hyp"
    run_step(nmt_command("translate", "--checkpoint", system.checkpoint, "--input", source, "--output", hypotheses,
                         "--beam", 1, "--device", settings.device), out / "translate.log", settings)
    compared = ["--baseline", baseline, "--bootstrap-samples", 1000] if baseline else []
    report = out / "bleu.json"
    run_step(nmt_command("evaluate", "--hyp", hypotheses, "--ref", reference, "--metrics", "bleu", "--json",
                         *compared), out / "evaluate.log", settings, stdout=report)
    result = json.loads(report.read_text(encoding="utf-8"))
    text = f"{result['scores'][0]['score']:.2f}"
    if baseline:
        text += f" (p={result['bootstrap']['results'][0]['p_value']:.3f})"
    return text, hypotheses
