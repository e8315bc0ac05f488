"""The alignment bench's report: a row per system and reading, and the notes saying how the
figures were made."""

from __future__ import annotations

import json
import os
from pathlib import Path

from alignment_bench.corpora import BenchCorpus, GoldSet, text_lines
from alignment_bench.eflomal import EFLOMAL_READINGS, GUIDE, SYMMETRIZED, EflomalReading, links_score, run_eflomal
from alignment_bench.scoring import SYMMETRIZED_TRIED, align_and_score, bleu, tuned_reading, tuned_symmetrization
from alignment_bench.settings import Settings
from alignment_bench.systems import AGREE_HEADS, nmt_systems
from common import Report, fmt, fmt_ratio, machine_description
from peers.install import availability

from nmt_cli.alignment import AlignmentScore, read_alignments
from nmt_cli.alignment.symmetrize import describe as describe_symmetrization

COLUMNS = ["corpus", "system", "setting", "pairs", "AER", "precision", "recall",
           "wrong links on unaligned words", "time s",
           "AER / eflomal's best symmetrized", "BLEU test2016 (greedy)"]


def _unaligned_share(score: AlignmentScore) -> str:
    """How many of the wrong links are on target words the gold leaves unaligned: ``112/251 (45%)``."""
    share = f" ({100 * score.predicted_unaligned / score.wrong:.0f}%)" if score.wrong else ""
    return f"{score.predicted_unaligned}/{score.wrong}{share}"


def _row(report: Report, corpus: BenchCorpus, system: str, setting: str, gold: GoldSet, score: AlignmentScore,
         seconds: float, best_eflomal: float | None, bleu_text: str = "-") -> None:
    report.add_row(corpus.name, system, setting, gold.label, f"{score.aer:.4f}", f"{score.precision:.4f}",
                   f"{score.recall:.4f}", _unaligned_share(score), fmt(seconds, 1),
                   fmt_ratio(score.aer, best_eflomal), bleu_text)


def eflomal_rows(report: Report, corpus: BenchCorpus, settings: Settings) -> tuple[Path | None, float, dict]:
    """eflomal's rows; returns its guide links, its time and its best symmetrized AER per gold set."""
    usable, label = availability("eflomal")
    if not usable:
        report.add_row(corpus.name, "eflomal", label, *["-"] * (len(COLUMNS) - 3))
        return None, 0.0, {}
    results, guide = run_eflomal(corpus, settings)
    scores = {name: links_score(corpus.test, reading.links) for name, reading in results.items()}
    best = {corpus.test.label: min(scores[name].aer for name in SYMMETRIZED)}
    seconds = results["forward"].seconds
    for name in EFLOMAL_READINGS:
        _row(report, corpus, label, name, corpus.test, scores[name], seconds, best[corpus.test.label])
    report.notes.append(eflomal_spread(corpus, results))
    guide_links = [pair.sure for pair in read_alignments(guide / "train.align")[-len(text_lines(corpus.test.src)):]]
    _row(report, corpus, label, f"{GUIDE}: the links the guided model learned (one run)", corpus.test,
         links_score(corpus.test, guide_links), seconds, best[corpus.test.label])
    if corpus.report is not corpus.test:  # the tuning and report pairs are test pairs eflomal aligned
        offset = len(text_lines(corpus.tune.src))
        picked = min(SYMMETRIZED, key=lambda name: links_score(corpus.tune, results[name].links).aer)
        score = links_score(corpus.report, results[picked].links, offset)
        best[corpus.report.label] = score.aer
        _row(report, corpus, label, f"tuned: {picked} (picked on pairs {corpus.tune.label})", corpus.report, score,
             seconds, score.aer)
    return guide, seconds, best


def eflomal_spread(corpus: BenchCorpus, results: dict[str, EflomalReading]) -> str:
    """A note with the lowest and highest AER of each eflomal reading over its runs: how far
    apart two runs of the same aligner land, beside any gap between rows."""
    runs = len(results["forward"].aers)
    spread = ", ".join(f"{name} {min(reading.aers):.4f}-{max(reading.aers):.4f}" for name, reading in results.items())
    return f"{corpus.name}: eflomal's AER on pairs {corpus.test.label} over its {runs} run(s), lowest-highest: {spread}"


def _combined(out: Path) -> str:
    """How ``nmt align`` combined the two directions into ``out``, as its settings.json says."""
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    return describe_symmetrization(settings["symmetrization"], settings.get("average_threshold"))


def nmt_rows(report: Report, corpus: BenchCorpus, settings: Settings, guide: Path | None, eflomal_seconds: float,
             best: dict) -> list[Path]:
    """Every nmt-cli system: its default reading on the test pairs, a reading tuned on gold, BLEU;
    returns the runs of the models behind the rows."""
    baseline, runs = None, []
    for number, system in enumerate(nmt_systems(corpus, settings, guide, eflomal_seconds)):
        runs += system.runs
        out = settings.folders(corpus.name).scores(number)
        score, seconds = align_and_score(system, corpus.test, out / "default", settings,
                                         symmetrization=system.symmetrization)
        bleu_text = "-"
        if corpus.bleu is not None and system.translates:
            bleu_text, hypotheses = bleu(system, corpus, out, settings, baseline)
            baseline = baseline or hypotheses
        prefix = f"{system.stage}: " if system.stage else ""
        setting = prefix + system.setting
        if system.reverse is not None:
            setting += f", {_combined(out / 'default')} ({system.why})"
        _row(report, corpus, system.name, setting, corpus.test, score, system.seconds + seconds,
             best.get(corpus.test.label), bleu_text)
        if system.reverse is None:
            options, tuning = tuned_reading(system, corpus, out, settings)
            score, seconds = align_and_score(system, corpus.report, out / "tuned", settings, tuple(options.split()))
        else:
            method, chosen, tuning = tuned_symmetrization(system, corpus, out, settings)
            options = " ".join([f"{system.setting}, --symmetrize", method, *map(str, chosen)])
            score, seconds = align_and_score(system, corpus.report, out / "tuned", settings, chosen,
                                             symmetrization=method)
        _row(report, corpus, system.name, f"tuned: {prefix}{options} (picked on pairs {corpus.tune.label})",
             corpus.report, score, system.seconds + tuning + seconds, best.get(corpus.report.label))
    return runs


def method_notes(settings: Settings) -> list[str]:
    """How every figure of the table was made, at this run's settings."""
    scale = settings.scale
    model = scale.model
    steps = ", ".join(f"{name} {steps:,}" for name, steps in scale.steps.items())
    return [
        f"every nmt-cli model: {model['arch']} (Mask-Align rows: mask_align) {model['encoder_layers']}+"
        f"{model['decoder_layers']} layers, d_model "
        f"{model['d_model']}, {model['heads']} heads, FFN {model['ffn_dim']}, {scale.precision}, batches of "
        f"{scale.max_tokens:,} tokens; training steps: {steps}; {settings.threads} thread(s) per step; this run trains, "
        f"aligns and translates on device {settings.device}",
        "guided models: train.alignment_weight 0.05 on head 0 of the penultimate decoder layer, learning each "
        "word's links at the step where it is the decoder input (model.alignment_shift, the default); "
        f"guided by eflomal = its {GUIDE} links of the whole training text, with a learned null position for "
        "the words they leave unaligned (model.alignment_null; both directions: an en-de model guided by the same "
        "links reversed as well" + (f"; an ensemble: {settings.seeds} such pairs, train.seed 1-{settings.seeds}, "
                                    "their word weights averaged per direction" if settings.seeds > 1 else "")
        + "); bootstrap = `nmt align bootstrap` with the same settings, the null in its "
        "guided stages (de-en and en-de): round 1 learns the grow-diag-final-and links of its forward and reverse "
        "models (trained without a null: the plain-attention rows), round 2 goes on training round 1's models "
        "(optimizer and schedule kept) for a fifth of the steps on the links of round 1's pair",
        f"{AGREE_HEADS}: each direction read with the head (or head average) and shift on which the two "
        "directions' argmax links agree most over the pairs aligned (no gold links; the bootstrap's links stage "
        "reads its training text so)",
        "tuned rows: the lowest AER on the tuning pairs over every layer, head, head average and shift "
        f"(`nmt align sweep`) with argmax links or a threshold in {', '.join(map(str, scale.thresholds)) or '-'}; "
        f"both-directions rows and eflomal: the best symmetrization on the tuning pairs (ours: "
        f"{', '.join(SYMMETRIZED_TRIED)} of the default readings, or `--symmetrize average` of their weights at "
        f"a threshold in {', '.join(map(str, scale.average_thresholds))})",
        "wrong links on unaligned words: of the links that are not even possible gold links, how many are on "
        "target words the gold leaves without any link (an argmax reading gives every word a link)",
        f"eflomal figures are the run with the median AER of {settings.repeats} run(s); its time is the median",
        "BLEU: greedy decoding of Multi30k test2016 lowercased and tokenised like the training text; p: paired "
        "bootstrap test against the plain model's translations (1,000 samples)",
    ]


def machine_note(load_before: tuple[float, float, float]) -> str:
    """The machine and its load at the start and end of the run (other work shares it)."""
    return (f"machine: {machine_description()['cpu']}, {os.cpu_count()} cores; load average (1/5/15 min) "
            f"{'/'.join(f'{v:.1f}' for v in load_before)} at the start and "
            f"{'/'.join(f'{v:.1f}' for v in os.getloadavg())} at the end of this run (other work shares "
            "the machine, so times of models trained in earlier runs and kept by --reuse-models were "
            "taken under their own load)")
