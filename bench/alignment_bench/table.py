"""The alignment bench's report: a row per system and reading, scored on the test pairs with
every choice made on the dev pairs, the interval of the headline comparison, the blind
pairs' links, and the notes saying how the figures were made."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from alignment_bench.corpora import BenchCorpus, PairSet
from alignment_bench.eflomal import (EFLOMAL_READINGS, GUIDE, SYMMETRIZED, EflomalReading, links_counts, links_score,
                                     run_eflomal)
from alignment_bench.intervals import BOOTSTRAP_SEED, paired_bootstrap
from alignment_bench.scoring import (SYMMETRIZED_TRIED, Aligned, align, align_and_score, bleu, described,
                                     tuned_reading, tuned_symmetrization)
from alignment_bench.settings import Settings
from alignment_bench.systems import AGREE_HEADS, Seeded, nmt_systems
from common import Report, fmt, fmt_ratio, machine_description
from peers.install import availability

from nmt_cli.alignment import AlignmentScore, read_alignments, write_alignments
from nmt_cli.alignment.symmetrize import describe as describe_symmetrization
from nmt_cli.fileio import atomic_write_text

COLUMNS = ["corpus", "system", "setting", "pairs", "runs", "AER", "precision", "recall",
           "wrong links on unaligned words", "time s", "AER / eflomal's best symmetrized", "BLEU test2016 (greedy)"]
#: the systems that use no external aligner: the best of their readings on dev is compared with eflomal's best
#: the headline rows whose links of the blind pairs every full run writes (``<name>.align``)
BLIND_SYSTEMS = ("eflomal", "plain-attention", "guided-eflomal", "bootstrap")
NO_EXTERNAL_ALIGNER = ("nmt-cli plain attention", "nmt-cli bootstrap (no external aligner)",
                       "nmt-cli Mask-Align (no external aligner)")


@dataclass(frozen=True)
class Scored:
    """One row's figures on the test pairs over its runs (seeds, or eflomal's runs)."""

    scores: list[AlignmentScore]
    counts: np.ndarray  # per-sentence counts summed over the runs
    centre: str  # "mean" (seeds) or "median" (eflomal's runs)

    @property
    def aer(self) -> float:
        return self._centre([score.aer for score in self.scores])

    def _centre(self, values: list[float]) -> float:
        return statistics.mean(values) if self.centre == "mean" else statistics.median(values)

    def cells(self) -> list[str]:
        """The AER (with its range over the runs), precision, recall and wrong-link cells."""
        aers = [score.aer for score in self.scores]
        aer = f"{self.aer:.4f}" + (f" [{min(aers):.4f}, {max(aers):.4f}]" if len(aers) > 1 else "")
        precision = self._centre([score.precision for score in self.scores])
        recall = self._centre([score.recall for score in self.scores])
        unaligned = sum(score.predicted_unaligned for score in self.scores)
        wrong = sum(score.wrong for score in self.scores)
        share = f" ({100 * unaligned / wrong:.0f}%)" if wrong else ""
        return [aer, f"{precision:.4f}", f"{recall:.4f}", f"{unaligned}/{wrong}{share}"]


@dataclass(frozen=True)
class Candidate:
    """A reading of a system without an external aligner: its AER on the dev pairs (seed 1's
    models: where it was chosen) and its figures on the test pairs."""

    system: str
    setting: str
    dev_aer: float
    test: Scored


def _runs(count: int, kind: str) -> str:
    return f"{count} {kind}" + ("s" if count != 1 else "")


def _row(report: Report, corpus: BenchCorpus, system: str, setting: str, pairs: str, runs: str, scored: Scored,
         seconds: float, best_eflomal: float | None, bleu_text: str = "-") -> None:
    report.add_row(corpus.name, system, setting, pairs, runs, *scored.cells(), fmt(seconds, 1),
                   fmt_ratio(scored.aer, best_eflomal), bleu_text)


def _tuned_pairs(corpus: BenchCorpus) -> str:
    return f"{corpus.test.label} (picked on {corpus.dev.label})"


@dataclass
class BlindLinks:
    """The headline systems' links of a corpus's blind pairs: ``folder/<name>.align`` each, and
    what made each file, for the folder's README."""

    folder: Path
    corpus: BenchCorpus
    written: dict = field(default_factory=dict)  # file name -> how it was made

    def write(self, name: str, links: Path | list, how: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if isinstance(links, Path):
            shutil.copyfile(links, self.folder / f"{name}.align")
        else:
            write_alignments(self.folder / f"{name}.align", links)
        self.written[f"{name}.align"] = how

    def finish(self, settings: Settings, command: str, measured: dict) -> None:
        """Write the folder's README (:meth:`readme`) and remove the links an earlier run left
        there that this one did not write (they would not be what the README says)."""
        for stale in set(self.folder.glob("*.align")) - {self.folder / name for name in self.written}:
            stale.unlink()
        atomic_write_text(self.folder / "README.md", self.readme(settings, command, measured))

    def readme(self, settings: Settings, command: str, measured: dict) -> str:
        """The folder's README: commit, machine, command, budget, and how each file was made."""
        steps = settings.scale.steps[self.corpus.name]
        files = "\n".join(f"- `{name}`: {how}" for name, how in sorted(self.written.items()))
        missing = [name for name in BLIND_SYSTEMS if f"{name}.align" not in self.written]
        if missing:
            files += ("\n\nNot in this run (no file): " + ", ".join(f"`{name}.align`" for name in missing)
                      + " (`--systems`, or eflomal not installed).")
        return f"""# Links of the blind pairs ({self.corpus.name})

Pharaoh `i-j` links (source word `i`, target word `j`, 0-based, over the whitespace tokens of
the given text), one line per pair, of the {self.corpus.blind.size} blind pairs: {self.corpus.blind_source}.
Written by

    {command}

at commit {measured['commit']} on {measured['machine']}, {measured['utc']}.

Budget of these files: {steps:,} training steps per nmt-cli model, {settings.threads} thread(s),
device {settings.device}; files from seed 1's models ({settings.seeds} seed(s) trained);
{settings.eflomal_runs} eflomal run(s). A run at another budget (the 10,000-step seeds on a GPU)
replaces them.

Training text: every system of the corpus trains on the same text, its training pairs with the
blind pairs, the dev pairs and the test pairs appended, without any links. So eflomal aligns the
blind pairs inside its training text, and the nmt-cli models **saw the blind sentences in
training** (as plain translation pairs, as they saw the gold ones); they align them by forced
decoding after training, with the defaults of `nmt align`.

{files}
"""


@dataclass(frozen=True)
class EflomalResult:
    """What the nmt-cli rows need from eflomal's: its guide links and time, and its best symmetrized reading."""

    guide: Path | None
    seconds: float
    best: str = ""  # the symmetrization picked on dev
    test: Scored | None = None  # that reading on the test pairs

    @property
    def best_aer(self) -> float | None:
        return self.test.aer if self.test else None


def eflomal_rows(report: Report, corpus: BenchCorpus, settings: Settings,
                 blind: BlindLinks | None) -> EflomalResult:
    """eflomal's rows: every reading on the test pairs over its runs (median and range), and
    the symmetrization with the lowest median AER on the dev pairs; its blind links."""
    usable, label = availability("eflomal")
    if not usable:
        report.add_row(corpus.name, "eflomal", label, *["-"] * (len(COLUMNS) - 3))
        return EflomalResult(None, 0.0)
    results, guide = run_eflomal(corpus, settings, settings.eflomal_runs)
    runs = _runs(settings.eflomal_runs, "run")
    seconds = statistics.median(results["forward"].seconds)
    test = {name: _eflomal_scored(reading, corpus.test) for name, reading in results.items()}
    picked = best_symmetrized(results, corpus.dev)
    best = test[picked].aer
    for name in EFLOMAL_READINGS:
        _row(report, corpus, label, name, corpus.test.label, runs, test[name], seconds, best)
    _row(report, corpus, label, f"best symmetrized: {picked} (picked on {corpus.dev.label})", _tuned_pairs(corpus),
         runs, test[picked], seconds, best)
    report.notes.append(eflomal_spread(corpus, results))
    guide_links = [pair.sure for pair in read_alignments(guide / "train.align")[-corpus.appended:]]
    guide_links = guide_links[corpus.test.start:corpus.test.start + corpus.test.size]
    _row(report, corpus, label, f"{GUIDE}: the links the guided model learned (its first run)", corpus.test.label,
         _runs(1, "run"), Scored([links_score(corpus.test, guide_links)], links_counts(corpus.test, guide_links),
                                 "median"), seconds, best)
    if blind is not None:
        run = results[picked].median_run(corpus.dev)
        blind.write("eflomal", results[picked].links(corpus.blind, run),
                    f"{label}, {picked} (the symmetrization picked on {corpus.dev.label}), run {run + 1} of "
                    f"{settings.eflomal_runs} (its median AER on {corpus.dev.label})")
    return EflomalResult(guide, seconds, picked, test[picked])


def best_symmetrized(results: dict[str, EflomalReading], dev: PairSet) -> str:
    """The symmetrization of eflomal's links with the lowest median AER over its runs on the dev pairs."""
    return min(SYMMETRIZED, key=lambda name: statistics.median(score.aer for score in results[name].scores(dev)))


def _eflomal_scored(reading: EflomalReading, pairs: PairSet) -> Scored:
    return Scored(reading.scores(pairs), reading.counts(pairs), "median")


def eflomal_spread(corpus: BenchCorpus, results: dict[str, EflomalReading]) -> str:
    """A note with the lowest and highest AER of each eflomal reading over its runs on the dev
    and test pairs: how far apart two runs of the same aligner land, beside any gap between rows."""
    runs = len(results["forward"].runs)
    spread = "; ".join(
        f"{name} " + ", ".join(f"{pairs.label} {min(aers):.4f}-{max(aers):.4f}" for pairs, aers in (
            (pairs, [score.aer for score in reading.scores(pairs)]) for pairs in (corpus.dev, corpus.test)))
        for name, reading in results.items())
    return f"{corpus.name}: eflomal's AER over its {runs} run(s), lowest-highest: {spread}"


def _combined(out: Path) -> str:
    """How ``nmt align`` combined the two directions into ``out``, as its settings.json says."""
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    return describe_symmetrization(settings["symmetrization"], settings.get("average_threshold"))


def _score_seeds(row: Seeded, pairs: PairSet, out: Path, settings: Settings, options: tuple = (),
                 symmetrization: str | None = None) -> tuple[Scored, list[Aligned]]:
    """Every seed's models of ``row`` aligning ``pairs``, the figures over the seeds."""
    aligned = [align_and_score(system, pairs, out / f"seed{seed}", settings, options, symmetrization)
               for seed, system in enumerate(row, start=1)]
    return Scored([a.score for a in aligned], sum(a.counts for a in aligned), "mean"), aligned


def nmt_rows(report: Report, corpus: BenchCorpus, settings: Settings, eflomal: EflomalResult,
             blind: BlindLinks | None) -> tuple[list[Path], list[Candidate]]:
    """Every nmt-cli system over its seeds: its default reading on the test pairs, a reading
    tuned on the dev pairs (seed 1's models) and scored on the test pairs (every seed), BLEU
    (seed 1); returns the runs of the models behind the rows and the readings without an
    external aligner, with their dev AER."""
    baseline, runs, candidates = None, [], []
    best = eflomal.best_aer
    for number, row in enumerate(nmt_systems(corpus, settings, eflomal.guide, eflomal.seconds)):
        first = row[0]
        runs += [run for system in row for run in system.runs]
        out = settings.folders(corpus.name).scores(number)
        seeds = f"ensemble of {len(first.ensemble) + 1} seeds" if first.ensemble else _runs(len(row), "seed")
        seconds = statistics.mean(system.seconds for system in row)
        scored, aligned = _score_seeds(row, corpus.test, out / "default", settings,
                                       symmetrization=first.symmetrization)
        bleu_text = "-"
        if corpus.bleu is not None and first.translates:
            bleu_text, hypotheses = bleu(first, corpus, out, settings, baseline)
            baseline = baseline or hypotheses
        setting, combined = first.label, None
        if first.reverse is not None:
            combined = _combined(out / "default" / "seed1")
            setting += f", {combined} ({first.why})"
        _row(report, corpus, first.name, setting, corpus.test.label, seeds, scored,
             seconds + statistics.mean(a.seconds for a in aligned), best, bleu_text)
        if first.blind and blind is not None:
            links, _ = align(first, corpus.blind, out / "blind", settings, symmetrization=first.symmetrization)
            blind.write(first.blind, links, f"{first.name}, {setting}, seed 1")
        prefix = f"{first.stage}: " if first.stage else ""
        tried = {}  # the dev AER of each symmetrization the tuning aligned with (seed 1's models)
        if first.reverse is None:
            options, tuned_dev, tuning = tuned_reading(first, corpus.dev, out / "tuning", settings)
            text, method = " ".join(options), None
        else:
            method, options, tuned_dev, tuning, tried = tuned_symmetrization(first, corpus.dev, out / "tuning",
                                                                             settings)
            text = " ".join([f"{first.setting}, --symmetrize", method, *map(str, options)])
        if method is not None and described(method, options) == combined:
            tuned = scored  # the default's own symmetrization: the same nmt align runs, not made again
        else:
            tuned, aligned = _score_seeds(row, corpus.test, out / "tuned", settings, options, method)
        tuned_setting = f"tuned: {prefix}{text} (picked on {corpus.dev.label}, seed 1)"
        _row(report, corpus, first.name, tuned_setting, _tuned_pairs(corpus), seeds, tuned,
             seconds + tuning + statistics.mean(a.seconds for a in aligned), best)
        if first.name in NO_EXTERNAL_ALIGNER:
            default_dev = tried.get(combined)
            if default_dev is None:  # a reading of its own: not among the symmetrizations tuned
                default_dev = align_and_score(first, corpus.dev, out / "dev-default", settings,
                                              symmetrization=first.symmetrization).score.aer
            candidates += [Candidate(first.name, setting, default_dev, scored),
                           Candidate(first.name, tuned_setting, tuned_dev, tuned)]
    return runs, candidates


def headline_interval(corpus: BenchCorpus, eflomal: EflomalResult, candidates: list[Candidate]) -> str | None:
    """The note under the table: the reading without an external aligner with the lowest dev
    AER, against eflomal's best symmetrized reading (also picked on dev), on the test pairs,
    with the paired bootstrap interval of the difference and what it allows one to claim."""
    if eflomal.test is None or not candidates:
        return None
    ours = min(candidates, key=lambda candidate: candidate.dev_aer)
    interval = paired_bootstrap(ours.test.counts, eflomal.test.counts)
    return (f"{corpus.name}: the reading without an external aligner with the lowest AER on {corpus.dev.label} "
            f"(seed 1's models) is {ours.system}, {ours.setting} ({ours.dev_aer:.4f} there); on "
            f"{corpus.test.label} its AER is {ours.test.aer:.4f} against eflomal {eflomal.best}'s "
            f"{eflomal.test.aer:.4f} (mean over {len(ours.test.scores)} seed(s), median over "
            f"{len(eflomal.test.scores)} run(s)). Paired bootstrap over the {corpus.test.size} test sentences "
            f"({interval.samples:,} resamples, seed {BOOTSTRAP_SEED}; each side's counts summed over its "
            f"seeds or runs, AER recomputed from the summed counts of each resample): difference "
            f"{interval.difference:+.4f}, " + interval.claim("ours", "eflomal") + ".")


def method_notes(settings: Settings) -> list[str]:
    """How every figure of the table was made, at this run's settings."""
    scale = settings.scale
    model = scale.model
    steps = ", ".join(f"{name} {steps:,}" for name, steps in scale.steps.items())
    seeds = f"train.seed 1-{settings.seeds}" if settings.seeds > 1 else "train.seed 1 only"
    return [
        "protocol: every choice (a tuned reading, a symmetrization and its threshold, eflomal's best "
        "symmetrized reading, the best reading without an external aligner) is made on the dev pairs "
        "(de-en: gold pairs 1-25; synthetic: a generated dev set); every row is scored on the test pairs "
        "(de-en: gold pairs 26-50), which no choice looks at; the pairs column names both. The blind, dev and "
        "test pairs are all appended to every system's training text, without their links",
        f"runs: nmt-cli's bootstrap and guided models are trained once per seed ({seeds}): their rows give "
        "the mean AER over the seeds and [lowest, highest]; Mask-Align and the ensemble row are one run; "
        f"eflomal ran {settings.eflomal_runs} time(s) (it takes no seed): its rows give the median and "
        "[lowest, highest]; precision and recall are the same mean or median, the wrong links are summed over "
        "the runs; BLEU, and the dev choices of the tuned rows, are seed 1's",
        f"every nmt-cli model: {model['arch']} (Mask-Align rows: mask_align) {model['encoder_layers']}+"
        f"{model['decoder_layers']} layers, d_model "
        f"{model['d_model']}, {model['heads']} heads, FFN {model['ffn_dim']}, {scale.precision}, batches of "
        f"{scale.max_tokens:,} tokens; training steps: {steps}; {settings.threads} thread(s) per step; this run aligns and "
        f"translates on device {settings.device} and trains there the models it trains (models kept by "
        "--reuse-models keep the device they were trained on: see where each model was trained)",
        "guided models: train.alignment_weight 0.05 on head 0 of the penultimate decoder layer, learning each "
        "word's links at the step where it is the decoder input (model.alignment_shift, the default); "
        f"guided by eflomal = its {GUIDE} links of the whole training text (its first run), with a learned "
        "null position for the words they leave unaligned (model.alignment_null; both directions: an en-de "
        "model guided by the same links reversed as well" + (
            f"; an ensemble: the {settings.seeds} seeds' pairs, their word weights averaged per direction"
            if settings.seeds > 1 else "")
        + "); bootstrap = `nmt align bootstrap` with the same settings, the null in its "
        "guided stages (de-en and en-de): round 1 learns the grow-diag-final-and links of its forward and reverse "
        "models (trained without a null: the plain-attention rows), each later round goes on training the "
        f"previous round's models (optimizer and schedule kept) for a fifth of the steps on the links of that "
        f"round's pair ({settings.rounds} round(s))",
        f"{AGREE_HEADS}: each direction read with the head (or head average) and shift on which the two "
        "directions' argmax links agree most over the pairs aligned (no gold links; the bootstrap's links stage "
        "reads its training text so)",
        "tuned rows: the lowest AER on the dev pairs over every layer, head, head average and shift "
        f"(`nmt align sweep`) with argmax links or a threshold in {', '.join(map(str, scale.thresholds)) or '-'}; "
        f"both-directions rows and eflomal: the best symmetrization on the dev pairs (ours: "
        f"{', '.join(SYMMETRIZED_TRIED)} of the default readings, or `--symmetrize average` of their weights at "
        f"a threshold in {', '.join(map(str, scale.average_thresholds))})",
        "wrong links on unaligned words: of the links that are not even possible gold links, how many are on "
        "target words the gold leaves without any link (an argmax reading gives every word a link)",
        "eflomal's time is the median of its runs",
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

