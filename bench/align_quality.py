"""Word alignment quality: eflomal and nmt-cli's aligners, trained on the same text, scored on gold.

Every system of a corpus sees the same sentences: the training pairs with the blind, dev and
test pairs appended (without any links; word alignment is unsupervised and usually run on the
text it aligns). Scores: AER, precision and recall (Och & Ney 2003) by
:func:`nmt_cli.alignment.score_files`.

The protocol: every choice the bench makes (a tuned reading, a symmetrization and its
threshold, eflomal's best symmetrized reading, the best reading without an external aligner)
is made on the dev pairs (de-en: gold pairs 1-25); every row is scored on the test pairs
(de-en: gold pairs 26-50), which no choice looks at. The bootstrap's and the guided models are
trained with ``train.seed`` 1..``--seeds`` (mean AER and range), eflomal runs
``--eflomal-runs`` times (median and range), and under the table a paired bootstrap interval
(:mod:`alignment_bench.intervals`) of AER(the best reading without an external aligner) -
AER(eflomal's best) over the test sentences says what the margin allows one to claim.
``bench/align_dev_sweep.py`` re-makes nmt-cli's alignment defaults on the dev pairs alone.

Corpora:

* ``synthetic``: the built-in German-English grammar, whose generator emits the gold
  alignment of every pair (non-monotonic: verb-final subordinate clauses);
* ``multi30k``: Multi30k train, lowercased and tokenised by splitting off punctuation like the
  gold set, then the 50 Europarl pairs of ``gold-align/de-en-blind`` (no gold links: each
  headline system's links of them go to ``bench/results/align_blind/<system>.align``) and
  the 50 with gold links in ``gold-align/de-en`` (dev: 1-25, test: 26-50) of the data folder
  (``--data``, default ``../shared/data``; lowercased, tokenised);
* ``multi30k+tatoeba``: the same with Tatoeba's 165k training pairs (tokenised alike)
  added, to show what more text does.

Systems, each row naming how it reads its alignments:

* eflomal (``bench/.peers/eflomal``, ``python bench/peers/install.py eflomal``): forward,
  reverse and their symmetrizations (our :func:`nmt_cli.alignment.symmetrize`);
* nmt-cli plain attention: a translation model, read as ``nmt align`` reads it by default
  (last decoder layer, heads averaged, argmax), and both directions symmetrized;
* nmt-cli guided by eflomal: a model trained with guided alignment (Garg et al. 2019) on
  eflomal's grow-diag-final-and links of the training text (``alignment_bench.eflomal.GUIDE``,
  as fairseq's joint alignment example symmetrizes its guide), with a learned null position
  for the words the guide leaves unaligned (``model.alignment_null``), read by default (its
  supervised head and null); and with an en-de model guided by the same links reversed,
  both directions symmetrized;
* nmt-cli bootstrap (no external aligner): ``nmt align bootstrap``, a model guided by the
  symmetrized attention links of the two plain models (:mod:`nmt_cli.bootstrap`), with the
  null position as the guided-by-eflomal models have it; de-en alone, and with its en-de
  guided stage combined as the command's aligner does (``--symmetrize average``); each
  round of it (round 2 goes on training round 1's pair on the links that pair gives).
* nmt-cli Mask-Align (no external aligner): ``model.arch: mask_align`` (Chen et al. 2021),
  which predicts each target token from the source and the other target tokens, in one
  direction and both directions symmetrized.

Headline rows use the defaults a user gets without gold links (both directions: ``nmt
align``'s default for the models, the average of their weights for guided models with a
null, grow-diag-final-and for the others; the row names the one used). "tuned" rows pick a reading
(layer, heads, shift, hard-link rule; both directions and eflomal: the symmetrization, ours
also the average of the two directions' weights at a threshold) on the dev pairs (seed 1's
models) and score it on the test pairs (every seed). Time: eflomal's whole run; ours adds up
data preparation, training (from the run's own clock, so a reused model keeps its cost) and
alignment of every stage behind a row. BLEU: greedy translations of Multi30k test2016
(tokenised like the training text), for the de-en models (seed 1).

Models are cached under ``--work``; ``--reuse-models`` keeps runs with the same settings
instead of training them again (a changed setting still retrains; a kept run that stopped
early is resumed, a finished one is left as it is, so the notes can say from its train.log
where it was trained: models trained on a GPU elsewhere and copied in keep that); ``--systems``
runs only some of nmt-cli's systems (eflomal always runs: it is the guide); ``--steps``
sets every model's training steps (the default 2,000 are about 4 epochs of Multi30k+Tatoeba,
short of what the guided and bootstrap models keep gaining from; another number is a variant
of the report, with a section of its own in BENCHMARKS.md); ``--device cuda`` trains,
aligns and translates on a GPU (the times are then the GPU's, as the notes say); ``--seeds N``
trains the bootstrap and the guided models N times (``train.seed`` 1..N) and adds a row
aligning with the N guided pairs as one ensemble.

The parts live in the package ``bench/alignment_bench`` (its docstring lists them); this
script reads the options and puts the report together.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from alignment_bench.corpora import CORPORA, corpora, corpus_names
from alignment_bench.settings import FULL, QUICK, Settings
from alignment_bench.systems import NMT_SYSTEMS, system_names
from alignment_bench.table import (COLUMNS, BlindLinks, eflomal_rows, headline_interval, machine_note, method_notes,
                                   nmt_rows)
from alignment_bench.training import training_devices
from common import BENCH_DIR, REPO, SHARED_DATA, Report, absolute_path, bench_arguments, measured_at

from nmt_cli.bootstrap import DEFAULT_ROUNDS

#: where a full run writes its headline systems' links of the blind pairs (committed)
BLIND_RESULTS = BENCH_DIR / "results" / "align_blind"
EFLOMAL_RUNS = 15


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="synthetic,multi30k,multi30k+tatoeba",
                        help="comma list of synthetic, multi30k, multi30k+tatoeba (--quick: synthetic only)")
    parser.add_argument("--data", type=absolute_path, default=SHARED_DATA,
                        help="the folder of the real data the de-en corpora read (default: NMT_SHARED_DATA, "
                             "else ../shared/data beside the repository)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every step (default 2)")
    parser.add_argument("--reuse-models", action="store_true",
                        help="keep finished training runs with the same settings instead of training again, and "
                             "finished eflomal runs of the same training text")
    parser.add_argument("--systems", default=",".join(NMT_SYSTEMS),
                        help="comma list of the nmt-cli systems to run: bootstrap (with the plain-attention rows), "
                             "guided, mask-align; eflomal always runs (default: all)")
    parser.add_argument("--device", default="cpu",
                        help="where nmt-cli trains, aligns and translates: cpu (default), cuda or cuda:N")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="training steps of every nmt-cli model, for every corpus (default: the scale's, "
                             "2,000 each; 2,000 steps are about 4 epochs of multi30k+tatoeba)")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="train the bootstrap's and the guided models N times each (train.seed 1..N): their "
                             "rows give the mean AER and range; N > 1 adds a row aligning with the N guided "
                             "pairs as one ensemble (default 1)")
    parser.add_argument("--eflomal-runs", type=int, default=None, metavar="N",
                        help=f"eflomal runs per corpus (it takes no seed): median and range (default {EFLOMAL_RUNS}; "
                             "--repeats when given; 2 with --quick)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
                        help=f"nmt align bootstrap --rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--blind-out", type=absolute_path, default=None, metavar="DIR",
                        help="where the headline systems' links of the last corpus's blind pairs go "
                             f"(default: {BLIND_RESULTS.relative_to(REPO)}; --quick: align_blind in the work folder)")
    args = parser.parse_args(argv)
    for option in ("seeds", "eflomal_runs", "rounds"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1, got {value}")
    default_scale = scale = QUICK if args.quick else FULL
    if args.steps is not None:
        if args.steps < 1:
            parser.error(f"--steps must be at least 1, got {args.steps}")
        scale = replace(scale, steps={name: args.steps for name in scale.steps})
    eflomal_runs = args.eflomal_runs or args.repeats or (2 if args.quick else EFLOMAL_RUNS)
    work = (args.work / "align_quality" / ("quick" if args.quick else "full")).resolve()
    settings = Settings(work, scale, args.threads, args.reuse_models, eflomal_runs, system_names(args.systems),
                        args.device, args.seeds, args.data, args.rounds)
    report = Report(script="align_quality", columns=COLUMNS, quick=args.quick,
                    title="Word alignment: eflomal and nmt-cli's aligners (AER, lower is better)",
                    variant="" if scale == default_scale else f"{args.steps:,} training steps")
    if args.quick:
        report.notes.append("--quick: a tiny synthetic corpus and a few training steps; de-en skipped")
    load_before = os.getloadavg()
    names = corpus_names(args.corpora)
    found, skipped = corpora(names, args.quick, settings)
    report.notes += skipped
    runs = []
    blind = None
    if found:
        folder = args.blind_out or (work / "align_blind" if args.quick else BLIND_RESULTS)
        blind = BlindLinks(folder, found[-1])
    for corpus in found:
        corpus_blind = blind if corpus is found[-1] else None
        eflomal = eflomal_rows(report, corpus, settings, corpus_blind)
        corpus_runs, candidates = nmt_rows(report, corpus, settings, eflomal, corpus_blind)
        runs += corpus_runs
        interval = headline_interval(corpus, eflomal, candidates)
        if interval:
            report.notes.append(interval)
    report.notes += method_notes(settings)
    if runs:
        report.notes.append("where each model trained (the sessions its train.log names; a model kept by "
                            f"--reuse-models keeps its own): {training_devices(runs, work)}")
    left_out = [name for name in CORPORA if name not in names]
    if left_out and not args.quick:
        report.notes.append(f"corpora left out of this run (--corpora): {', '.join(left_out)}")
    systems_left_out = [name for name in NMT_SYSTEMS if name not in settings.systems]
    if systems_left_out:
        report.notes.append(f"nmt-cli systems left out of this run (--systems): {', '.join(systems_left_out)}")
    report.notes.append(machine_note(load_before))
    if blind is not None and blind.written:
        made = measured_at(None if argv is None else [str(BENCH_DIR / "align_quality.py"), *argv])
        blind.finish(settings, made["command"], made)  # the command without where its files went
        folder = blind.folder.relative_to(REPO) if blind.folder.is_relative_to(REPO) else blind.folder
        report.notes.append(f"{blind.corpus.name}: the headline systems' links of the {blind.corpus.blind.size} blind "
                            f"pairs are in {folder} ({', '.join(sorted(blind.written))}; README.md says how)")
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
