"""When the constrained search may end a sentence: decode.constrained_stop chosen on one half of a dev set, reported on the other.

The terminology dev set (``bench/terminology.py``'s: 450 German-English sentences with
"proper" and "random" term lists) is cut in two: lines 1-225 choose, lines 226-450 report.
Each half is translated with no terms, and with each list's terms under both stopping rules of
the constrained search:

* ``exact``: a sentence ends once no live beam could beat its n-best hypotheses that meet
  every constraint even at its output limit (the outputs of the search that waits for K);
* ``now``: once no live beam would beat them if it ended at its next token (fewer steps;
  outputs may change).

The choice, made on the dev half only: ``now`` is the default if at every beam its term
success and chrF are no lower than ``exact``'s there. The test half's rows, which no choice
looked at, are the figures to quote. Times are the process's CPU time (one torch thread),
interleaved over ``--repeats`` runs after an untimed warm-up.
"""

from __future__ import annotations

import time

import torch

from common import (RATIO_SPREAD_NOTE, Report, absolute_path, bench_arguments, fmt, fmt_ratio_spread, median,
                    project_version, repeats_of)
from terminology import (GENERAL_MODEL, LISTS, TERMINOLOGY, WARMUP_SENTENCES, output_quality, quick_lines,
                         read_dev_set, requests, term_success)

from nmt_cli.decoding import load_translator

STOPS = ("exact", "now")
COLUMNS = ["lines", "beam", "terms given", "stop", "term success", "chrF", "BLEU", "at limit", "outputs as exact",
           "CPU s", "out tok/s", "time vs no terms"]


def timed_runs(translator, halves: dict, beam: int, repeats: int) -> dict:
    """``(half, mode, stop) -> [(cpu seconds, hypotheses)]`` at one beam, every setting warmed up,
    then run in turn ``repeats`` times."""
    decoders = {stop: translator.with_decode({"decode.beam_size": beam, "decode.on_unmet": "relax",
                                              "decode.constrained_stop": stop}) for stop in STOPS}
    settings = [(half, mode, stop) for half in halves for mode in ("none", *LISTS) for stop in STOPS
                if mode != "none" or stop == "exact"]  # without terms the rule never acts
    for half, mode, stop in settings:
        decoders[stop].translate(halves[half][mode][:WARMUP_SENTENCES])
    runs: dict = {key: [] for key in settings}
    for _ in range(repeats):
        for half, mode, stop in settings:
            started = time.process_time()
            hypotheses = decoders[stop].translate(halves[half][mode])
            runs[half, mode, stop].append((time.process_time() - started, hypotheses))
    return runs


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", type=absolute_path, default=GENERAL_MODEL, help="checkpoint or run directory")
    parser.add_argument("--data", type=absolute_path, default=TERMINOLOGY, help="the terminology dev set")
    parser.add_argument("--beams", default="5,10", help="comma list of beam sizes")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.model.exists():
        parser.error(f"--model {args.model}: not found (python recipes/run_recipe.py general-deen-transformer)")
    translator = load_translator(args.model, engine="torch", device="cpu")
    lines = read_dev_set(args.data)
    if args.quick:
        lines = quick_lines(lines, translator.tokenizer)
    middle = len(lines) // 2
    spans = {f"dev 1-{middle}": lines[:middle], f"test {middle + 1}-{len(lines)}": lines[middle:]}
    halves = {name: {mode: requests(span, translator.tokenizer, mode) for mode in ("none", *LISTS)}
              for name, span in spans.items()}
    report = Report("constrained_stop", "When the constrained search ends a sentence (decode.constrained_stop)",
                    COLUMNS, quick=args.quick, versions={"nmt-cli": project_version(), "torch": torch.__version__})
    for beam in (int(beam) for beam in args.beams.split(",")):
        runs = timed_runs(translator, halves, beam, repeats_of(args))
        for (half, mode, stop), measured in runs.items():
            hypotheses = measured[-1][1]
            outputs = [hypothesis.text for hypothesis in hypotheses]
            exact = [hypothesis.text for hypothesis in runs[half, mode, "exact"][-1][1]]
            references = [line.reference for line in spans[half]]
            success = "-" if mode == "none" else \
                f"{100 * term_success(outputs, [line.terms[mode] for line in spans[half]]):.1f}%"
            seconds = [run[0] for run in measured]
            scored = output_quality(hypotheses, halves[half][mode], references, translator.decode)
            report.add_row(half, str(beam), mode, "-" if mode == "none" else stop, success,
                           f"{scored.chrf:.1f}", f"{scored.bleu:.1f}", f"{100 * scored.at_limit:.1f}%",
                           "-" if stop == "exact" else f"{sum(a == b for a, b in zip(outputs, exact))}/{len(exact)}",
                           fmt(median(seconds), 1),
                           fmt(sum(len(hypothesis.tokens) for hypothesis in hypotheses) / median(seconds)),
                           "-" if mode == "none" else
                           fmt_ratio_spread(seconds, [run[0] for run in runs[half, "none", "exact"]]))
    report.notes += [
        f"Model: {translator.signature()}; {args.threads} torch thread(s); device cpu; decode.on_unmet relax.",
        "term success: the share of the row's own list's terms whose English side appears in the output "
        "(exact, case-sensitive substring); chrF, BLEU: sacreBLEU against dev.en; at limit: the share of outputs "
        "with as many pieces as the length rule allows their sentence before constraints; outputs as exact: "
        "outputs identical to those of the exact rule on the same lines.",
        f"CPU s: the process's CPU time of the half, median of {repeats_of(args)} run(s), settings interleaved, "
        f"after an untimed warm-up on {WARMUP_SENTENCES} sentences; out tok/s: output pieces (EOS not counted) of "
        "the last run over the median CPU time; time vs no terms: " + RATIO_SPREAD_NOTE + ".",
        "The choice (dev rows only): now is the default if at every beam its term success and chrF are no lower "
        "than exact's on the dev half. The test rows were not looked at for it.",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
