"""Aligning gold pairs with an nmt-cli system and scoring them: its default reading, the
reading or symmetrization tuned on the tuning pairs, and the BLEU of its translations."""

from __future__ import annotations

import json
from pathlib import Path

from alignment_bench.corpora import BenchCorpus, GoldSet
from alignment_bench.settings import Settings
from alignment_bench.steps import nmt_command, run_step
from alignment_bench.systems import NmtSystem

from nmt_cli.alignment import AlignmentScore, score_files

#: the symmetrizations a tuned both-directions row of ours picks from: these link heuristics,
#: and ``average`` at ``nmt align``'s default threshold and each threshold of the scale
SYMMETRIZED_TRIED = ("intersection", "grow-diag", "grow-diag-final", "grow-diag-final-and")


def align_and_score(system: NmtSystem, gold: GoldSet, out: Path, settings: Settings, options: tuple = (),
                    symmetrization: str | None = None) -> tuple[AlignmentScore, float]:
    """``nmt align`` of ``gold``'s pairs with ``options`` (none: the defaults), a system with a
    reverse model symmetrized by ``symmetrization`` (None: `nmt align`'s default); its score and seconds."""
    measured = run_step(nmt_command("align", *system.align_options(symmetrization), "--src", gold.src, "--tgt",
                                    gold.tgt, "--out", out, "--device", settings.device, *options),
                        out.with_suffix(".log"), settings)
    return score_files(gold.gold, out / "alignments.align", gold.src, gold.tgt), measured.seconds


def tuned_reading(system: NmtSystem, corpus: BenchCorpus, out: Path, settings: Settings) -> tuple[str, float]:
    """The ``nmt align`` options with the lowest AER on the tuning pairs: every layer, head and
    shift (``nmt align sweep``) with argmax links and each threshold of the scale."""
    best, seconds = None, 0.0
    rules = [("argmax", 0.2)] + [("threshold", value) for value in settings.scale.thresholds]
    for number, (method, threshold) in enumerate(rules):
        ranking = out / f"sweep-{number}.jsonl"
        measured = run_step(nmt_command("align", "sweep", "--checkpoint", system.checkpoint, "--src", corpus.tune.src,
                                        "--tgt", corpus.tune.tgt, "--gold", corpus.tune.gold, "--method", method,
                                        "--threshold", threshold, "--json", "--device", settings.device),
                            out / f"sweep-{number}.log", settings, stdout=ranking)
        seconds += measured.seconds
        top = json.loads(ranking.read_text(encoding="utf-8").splitlines()[0])
        options = f"{top['options']} --method {method}" + (f" --threshold {threshold}" if method == "threshold" else "")
        if best is None or top["aer"] < best[1]:
            best = (options, top["aer"])
    return best[0], seconds


def tuned_symmetrization(system: NmtSystem, corpus: BenchCorpus, out: Path,
                         settings: Settings) -> tuple[str, tuple, float]:
    """How to combine the two default readings with the lowest AER on the tuning pairs: each
    link heuristic, and the average of their weights at each threshold (:data:`SYMMETRIZED_TRIED`);
    the symmetrization, its ``nmt align`` options and the seconds spent."""
    candidates = [(method, ()) for method in SYMMETRIZED_TRIED] + [
        ("average", ("--average-threshold", value)) for value in settings.scale.average_thresholds]
    scored, seconds = [], 0.0
    for number, (method, options) in enumerate(candidates):
        score, spent = align_and_score(system, corpus.tune, out / f"symmetrize-{number}", settings, options,
                                       symmetrization=method)
        scored.append((score.aer, number))
        seconds += spent
    method, options = candidates[min(scored)[1]]
    return method, options, seconds


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
