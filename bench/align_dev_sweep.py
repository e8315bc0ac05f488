"""nmt-cli's alignment defaults re-made on the dev pairs alone (issue 52).

Each default below was once picked by AER on all 50 de-en gold pairs, the pairs its headline
is scored on. This sweep makes each choice again on the dev pairs (gold pairs 1-25; ``--quick``:
the synthetic corpus's generated dev set) and never reads the test pairs (26-50). Each
choice can be made alone (``--choices``, the names in brackets):

* ``plain pair`` (plain): how ``nmt align`` combines two plain-attention directions (default
  grow-diag-final-and, ``api.default_symmetrization``): the bootstrap's plain pair, read by
  default and with ``--agree-heads``;
* ``guided pair`` (guided): how it combines two guided directions read with their null (default
  ``--symmetrize average`` at 0.4): the pair guided by eflomal and the bootstrap's aligner;
* ``rounds`` (rounds): ``nmt align bootstrap --rounds`` (default 2): each round's pair, read as the
  command's aligner is;
* ``alignment_shift`` (shift): ``model.alignment_shift`` (default true) of the guided models: the
  pair guided by eflomal trained both ways, each direction alone and both averaged.

Every candidate is scored on the dev pairs with every seed's models (``--seeds``: mean and
range); a choice's verdict compares its dev-best candidate with the current default by a
paired bootstrap interval over the dev sentences (counts summed over the seeds): a change is
supported only where that interval excludes 0. The models are the bench's own
(``bench/align_quality.py``, same ``--work``, ``--steps`` and ``--seeds``; with ``--reuse-models``
the ones it trained are kept), plus the guided pairs trained with ``model.alignment_shift`` false.
The sweep reports; it changes no default.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import replace
from functools import cached_property
from pathlib import Path

from alignment_bench.corpora import BenchCorpus, PairSet, corpora
from alignment_bench.eflomal import guide_links
from alignment_bench.intervals import paired_bootstrap
from alignment_bench.scoring import Aligned, align_and_score, symmetrization_candidates
from alignment_bench.settings import FULL, QUICK, Settings
from alignment_bench.systems import AGREE_HEADS, BOTH_DIRECTIONS, Seeded, bootstrap_systems, guided_systems
from alignment_bench.table import machine_note
from common import SHARED_DATA, Report, absolute_path, bench_arguments

from nmt_cli.alignment.symmetrize import AVERAGE_THRESHOLD
from nmt_cli.bootstrap import DEFAULT_ROUNDS

COLUMNS = ["corpus", "choice", "system", "candidate", "pairs", "runs", "dev AER", "default"]
#: the thresholds the guided pairs' average is tried at, around the default
AVERAGE_THRESHOLDS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)
PLAIN_DEFAULT, GUIDED_DEFAULT = "grow-diag-final-and", f"average {AVERAGE_THRESHOLD}"


def candidate_name(method: str, options: tuple) -> str:
    """``grow-diag-final-and``, ``average 0.35``."""
    return " ".join([method, *map(str, options[1:])])


def score_on_dev(row: Seeded, dev: PairSet, out: Path, settings: Settings, options: tuple = (),
                 symmetrization: str | None = None) -> list[Aligned]:
    """Every seed's models of ``row`` aligning the dev pairs: the one set any choice here reads."""
    return [align_and_score(system, dev, out / f"seed{seed}", settings, options, symmetrization)
            for seed, system in enumerate(row, start=1)]


def symmetrization_choice(row: Seeded, dev: PairSet, out: Path, settings: Settings,
                          thresholds: tuple[float, ...]) -> dict[str, list[Aligned]]:
    """Each link heuristic and the average at each threshold combining ``row``'s two directions, on dev."""
    return {candidate_name(method, options): score_on_dev(row, dev, out / f"candidate-{number}", settings, options,
                                                          method)
            for number, (method, options) in enumerate(symmetrization_candidates(list(thresholds)))}


def verdict(choice: str, scored: dict[str, list[Aligned]], default: str) -> str:
    """Keep or change ``default``: the dev-best candidate against it, with the paired bootstrap
    interval of the difference over the dev sentences (each side's counts summed over its seeds)."""
    means = {name: statistics.mean(a.score.aer for a in aligned) for name, aligned in scored.items()}
    best = min(means, key=means.get)
    if means[default] <= means[best]:
        return f"{choice}: keep {default}: it has the lowest dev AER ({means[default]:.4f})"
    interval = paired_bootstrap(sum(a.counts for a in scored[best]), sum(a.counts for a in scored[default]))
    head = (f"{choice}: {best} has the lowest dev AER, {means[best]:.4f} against the default {default}'s "
            f"{means[default]:.4f}; ")
    if interval.high < 0:
        return head + interval.claim(best, default) + f": dev supports changing the default to {best}"
    return head + interval.claim(best, default) + f": dev does not support a change; keep {default}"


def _rows(report: Report, corpus: BenchCorpus, choice: str, system: str, scored: dict[str, list[Aligned]],
          default: str) -> None:
    for name, aligned in scored.items():
        aers = [a.score.aer for a in aligned]
        spread = f" [{min(aers):.4f}, {max(aers):.4f}]" if len(aers) > 1 else ""
        report.add_row(corpus.name, choice, system, name, corpus.dev.label, f"{len(aers)} seed(s)",
                       f"{statistics.mean(aers):.4f}{spread}", "yes" if name == default else "")
    report.notes.append(verdict(f"{corpus.name}, {choice} ({system})", scored, default))


def _both(rows: list[Seeded], setting: str, stage: str = "") -> Seeded:
    """The row of ``rows`` with ``setting`` (and ``stage``)."""
    return next(row for row in rows if row[0].setting == setting and row[0].stage == stage)


class SweepModels:
    """The bench's models one corpus's sweep reads, each found (or trained) once, when a choice first
    needs it: finding them runs ``nmt align bootstrap`` and writes the reversed guide again."""

    def __init__(self, corpus: BenchCorpus, settings: Settings):
        self.corpus, self.settings = corpus, settings

    @cached_property
    def bootstrap(self) -> tuple[list[Seeded], list[Seeded]]:
        """The bootstrap's plain rows and its guided rounds' rows."""
        return bootstrap_systems(self.corpus, self.settings)

    @cached_property
    def guide(self) -> Path:
        return guide_links(self.corpus, self.settings)

    @cached_property
    def guided(self) -> list[Seeded]:
        """The pair guided by eflomal, with ``model.alignment_shift`` (the default)."""
        return guided_systems(self.corpus, self.settings, self.guide, 0.0)


def plain_pair_choice(report: Report, models: SweepModels, out: Path) -> None:
    """How ``nmt align`` combines two plain-attention directions, read by default and with ``--agree-heads``."""
    plain, _ = models.bootstrap
    for number, setting in enumerate((BOTH_DIRECTIONS, f"{BOTH_DIRECTIONS} with {AGREE_HEADS}")):
        scored = symmetrization_choice(_both(plain, setting), models.corpus.dev, out / f"plain-{number}",
                                       models.settings, (AVERAGE_THRESHOLD,))
        _rows(report, models.corpus, "plain pair: symmetrization", f"plain attention, {setting}", scored,
              PLAIN_DEFAULT)


def guided_pair_choice(report: Report, models: SweepModels, out: Path) -> None:
    """How it combines two guided directions: the pair guided by eflomal and the bootstrap's aligner."""
    _, booted = models.bootstrap
    last = f"round {models.settings.rounds}"
    for number, (system, row) in enumerate((("guided by eflomal", _both(models.guided, BOTH_DIRECTIONS)),
                                             (f"bootstrap {last}", _both(booted, BOTH_DIRECTIONS, last)))):
        scored = symmetrization_choice(row, models.corpus.dev, out / f"guided-{number}", models.settings,
                                       AVERAGE_THRESHOLDS)
        _rows(report, models.corpus, "guided pair: symmetrization and threshold", system, scored, GUIDED_DEFAULT)


def rounds_choice(report: Report, models: SweepModels, out: Path) -> None:
    """``nmt align bootstrap --rounds``: each round's pair, read as the command's aligner is."""
    _, booted = models.bootstrap
    rounds = {f"{round_number} round(s)": score_on_dev(_both(booted, BOTH_DIRECTIONS, f"round {round_number}"),
                                                       models.corpus.dev, out / "rounds" / str(round_number),
                                                       models.settings)
              for round_number in range(1, models.settings.rounds + 1)}
    _rows(report, models.corpus, "bootstrap --rounds", "bootstrap's aligner (average 0.4)", rounds,
          f"{DEFAULT_ROUNDS} round(s)")


def shift_choice(report: Report, models: SweepModels, out: Path) -> None:
    """``model.alignment_shift`` of the guided models: the pair guided by eflomal trained both ways."""
    unshifted = guided_systems(models.corpus, models.settings, models.guide, 0.0, shift=False)
    for number, setting in enumerate(("default reading (supervised head)", BOTH_DIRECTIONS)):
        scored = {f"alignment_shift {shift}": score_on_dev(_both(rows, setting), models.corpus.dev,
                                                           out / f"shift-{number}-{shift}", models.settings)
                  for shift, rows in ((True, models.guided), (False, unshifted))}
        _rows(report, models.corpus, "model.alignment_shift", f"guided by eflomal, {setting}", scored,
              "alignment_shift True")


#: the choices of the module docstring, by the name ``--choices`` takes; only ``shift`` trains
#: models the bench itself does not (the guided pair without the shift)
CHOICES = {"plain": plain_pair_choice, "guided": guided_pair_choice, "rounds": rounds_choice, "shift": shift_choice}


def sweep(report: Report, corpus: BenchCorpus, settings: Settings, choices: tuple[str, ...] = tuple(CHOICES)) -> None:
    """The ``choices`` (default: all) on ``corpus``'s dev pairs."""
    out = settings.folders(corpus.name).root / "dev-sweep"
    models = SweepModels(corpus, settings)
    for name in choices:
        CHOICES[name](report, models, out)


def sweep_variant(steps: int | None, choices: tuple[str, ...]) -> str:
    """The report's variant: the training steps when not the bench's, the choices when not all
    (a section of its own, so a partial run never replaces a complete one)."""
    parts = [f"{steps:,} training steps"] if steps else []
    if choices != tuple(CHOICES):
        parts.append(f"choices {', '.join(choices)}")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="multi30k+tatoeba",
                        help="comma list of multi30k, multi30k+tatoeba (default multi30k+tatoeba; --quick: synthetic)")
    parser.add_argument("--data", type=absolute_path, default=SHARED_DATA, help="the real data's folder")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every step (default 2)")
    parser.add_argument("--reuse-models", action="store_true",
                        help="keep the bench's finished training runs with the same settings")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="training steps of every model (default: the bench's, 2,000)")
    parser.add_argument("--seeds", type=int, default=1, metavar="N", help="train.seed 1..N of every model (default 1)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
                        help=f"the bootstrap's rounds compared (1..N; default {DEFAULT_ROUNDS})")
    parser.add_argument("--choices", default=",".join(CHOICES),
                        help=f"comma list of the choices to make again: {', '.join(CHOICES)} (default: all; "
                             "shift trains a guided pair of its own)")
    args = parser.parse_args(argv)
    choices = tuple(name.strip() for name in args.choices.split(",") if name.strip())
    unknown = [name for name in choices if name not in CHOICES]
    if unknown or not choices:
        parser.error(f"--choices takes a comma list of {', '.join(CHOICES)}; got {args.choices!r}")
    scale = QUICK if args.quick else FULL
    if args.steps is not None:
        scale = replace(scale, steps={name: args.steps for name in scale.steps})
    work = (args.work / "align_quality" / ("quick" if args.quick else "full")).resolve()
    settings = Settings(work, scale, args.threads, args.reuse_models, 1, ("bootstrap", "guided"), args.device,
                        args.seeds, args.data, args.rounds)
    report = Report(script="align_dev_sweep", columns=COLUMNS, quick=args.quick,
                    title="nmt-cli's alignment defaults chosen on the dev pairs alone (AER, lower is better)",
                    variant=sweep_variant(scale != (QUICK if args.quick else FULL) and args.steps, choices))
    load_before = os.getloadavg()
    names = ["synthetic"] if args.quick else [name.strip() for name in args.corpora.split(",")]
    found, skipped = corpora(names, args.quick, settings)
    report.notes += skipped
    for corpus in found:
        sweep(report, corpus, settings, choices)
    if left_out := [name for name in CHOICES if name not in choices]:
        report.notes.append(f"choices left out of this run (--choices): {', '.join(left_out)}")
    steps = ", ".join(f"{name} {steps:,}" for name, steps in scale.steps.items() if name in names)
    report.notes.append(f"models: the bench's ({steps} training steps, train.seed 1-{settings.seeds}, "
                        f"{settings.threads} thread(s), device {settings.device}); every figure is on the dev pairs "
                        "only, mean and [lowest, highest] over the seeds")
    report.notes.append(machine_note(load_before))
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
