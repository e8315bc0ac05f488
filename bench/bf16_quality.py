"""bf16 against float32 training on a CPU with bf16 units: validation BLEU at equal updates.

Issue 57 asks whether bf16 autocast reaches float32's validation BLEU on Multi30k at the same
number of updates (within 0.3 BLEU, two seeds) before it may become the CPU default. Here the
``multi30k-transformer`` recipe (3+3 layers, d 256, batches of 4,096 tokens, lr 1e-3 after
1,000 warm-up updates) trains on Multi30k de->en for ``--steps`` updates, once per precision
and seed. Within a seed the runs differ only in ``train.precision``: same initial weights,
same batches in the same order.

* **Dev figure, the one the decision reads:** validation BLEU every ``--valid-every`` updates,
  measured by the trainer (greedy, the first 500 sentences of Multi30k val).
* **Held-out figure, which no choice looks at:** the last checkpoint (not averaged, so both
  precisions stand at the same update) translates test2016 with beam 5 and ``nmt translate``'s
  shipped defaults; sacreBLEU, chrF and the share of outputs at the length limit, and within
  each seed a paired bootstrap of the two precisions' BLEU (:func:`held_out_test`).

Translation runs in float32 on a CPU whatever precision trained the model, so only the training
differs. The rule (:func:`verdict`): bf16 qualifies when its mean validation BLEU over the seeds at
the last update is at most ``TOLERANCE`` below float32's. ``nmt_cli.precision`` holds the
default this table decided. Speed columns are the trainer's own clock (updates after the first
progress line; start-up and validation excluded) and wall seconds of the whole command.

Resumable: a finished run (``summary.json`` at ``--steps``) and a finished test evaluation
(``score.json``) under ``--work`` are reused; an interrupted training run resumes from its
newest checkpoint (its speed figures then cover the last session only, and the notes say so).
On a CPU without bf16 units (AVX-512 BF16 or AMX) the script says so and trains nothing.
``--quick``: 2,000 pairs, the tiny shape, 4 updates.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from common import (BENCH_DIR, REPO, THREADS, UNBUFFERED, Report, bench_arguments, fmt, load_averages, nmt_command,
                    run_measured, save_png, thread_env)
from peers import ours
from peers.arch import DecodeSpec
from peers.corpus import export_pieces, prepare_multi30k
from peers.ours import Engine, hypotheses_path
from peers.results import check, read_pieces
from translate_speed import Quality, detokenised, kept_quality, quality

from nmt_cli.config import DecodeConfig
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding.search import max_output_length
from nmt_cli.evaluation import paired_bootstrap
from nmt_cli.precision import cpu_has_native_bf16
from nmt_cli.training.progress import read_metrics

RECIPE = REPO / "recipes" / "multi30k-transformer.yaml"
PRECISIONS = ("fp32", "bf16")
#: bf16's mean validation BLEU may lie this far below float32's (issue 57)
TOLERANCE = 0.3
BEAM = 5
VALID_SENTENCES = 500
RESULTS = BENCH_DIR / "results"
QUICK_OVERRIDES = {"model.d_model": 64, "model.ffn_dim": 128, "model.encoder_layers": 1,
                   "model.decoder_layers": 1, "train.warmup_steps": 2}


@dataclass
class RunResult:
    """One training run: its validation curve, speed and the test score of its last checkpoint."""

    precision: str
    seed: int
    steps: int
    valid_bleu: dict[int, float]
    valid_loss: float  # per target token, unsmoothed, at the last update
    tokens_per_second: float
    tokens_per_update: float
    train_seconds: float
    wall_seconds: float | None
    peak_rss_mb: float
    resumed: bool
    test: Quality
    test_output: list[str]  # the detokenised test2016 translations


def train(prepared: Path, run: Path, precision: str, seed: int, steps: int, valid_every: int, quick: bool,
          threads: int) -> tuple[float | None, bool]:
    """``nmt train`` with the recipe; (wall seconds of this command or None when reused, resumed)."""
    summary = run / "summary.json"
    if summary.is_file() and json.loads(summary.read_text())["step"] >= steps:
        return None, False
    resumed = (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir())
    overrides = {"train.max_steps": steps, "train.max_minutes": 0, "train.seed": seed, "train.precision": precision,
                 "train.valid_every": valid_every, "train.save_every": valid_every, "train.patience": 0,
                 "train.valid_max_sentences": VALID_SENTENCES, "train.average_last": 0, "train.num_threads": threads,
                 **(QUICK_OVERRIDES if quick else {})}
    command = nmt_command("train", "--config", RECIPE, "--data", prepared, "--out", run, "--device", "cpu",
                          *[part for key, value in overrides.items() for part in ("--set", f"{key}={value}")])
    measured = check("nmt-cli", run_measured(command, run.parent / f"{run.name}.log", env=thread_env(threads, UNBUFFERED),
                                             cwd=REPO))
    return measured.seconds, resumed


ENGINE = Engine(shipped_defaults=True)


def evaluate(checkpoint: Path, data: PreparedData, source_pieces: list[int], folder: Path,
             threads: int) -> tuple[Quality, list[str]]:
    """test2016 with beam 5 under the shipped decoding defaults, in float32: its scores and its
    detokenised translations; reused when done."""
    defaults = DecodeConfig()

    def score() -> Quality:
        decode = DecodeSpec(beam=BEAM, alpha=defaults.alpha)
        hypotheses = ours.translate(checkpoint, data.text_path("test", "src"), decode, folder, threads,
                                    engine=ENGINE).hypotheses
        return quality(hypotheses, references_of(data), data.tokenizer,
                       [max_output_length(n, defaults.max_len_a, defaults.max_len_b) for n in source_pieces])

    scored = kept_quality(folder, score)
    return scored, detokenised(read_pieces(hypotheses_path(folder, BEAM, ENGINE)), data.tokenizer)


def references_of(data: PreparedData) -> list[str]:
    """test2016's reference translations."""
    return data.text_path("test", "tgt").read_text(encoding="utf-8").splitlines()


def held_out_test(seed: int, fp32: list[str], bf16: list[str], references: list[str]) -> str:
    """Within one seed, is bf16's test2016 BLEU different from float32's? sacreBLEU's paired bootstrap
    (Koehn 2004; :func:`nmt_cli.evaluation.paired_bootstrap`, 1,000 resamples): both scores with
    their 95% half-widths and the p-value of the difference. The same translations from both
    precisions are said to be so: sacreBLEU gives them a p-value of 1 / (resamples + 1)."""
    (bleu,) = paired_bootstrap(bf16, fp32, [references], metrics=("bleu",))
    if fp32 == bf16:
        return f"seed {seed}: the same translations from both precisions (BLEU {bleu.baseline:.2f})"
    return (f"seed {seed}: fp32 {bleu.baseline:.2f} (+/- {bleu.baseline_ci:.2f}), bf16 {bleu.system:.2f} "
            f"(+/- {bleu.system_ci:.2f}), difference {bleu.system - bleu.baseline:+.2f}, p = {bleu.p_value:.3f}")


def read_run(run: Path) -> tuple[dict[int, float], float, float, dict]:
    """({step: validation BLEU}, the last validation's loss, the mean target tokens per update over
    the progress lines, summary.json) of a finished run."""
    records = read_metrics(run)
    validations = [record for record in records if record.get("kind") == "valid"]
    curve = {record["step"]: record["bleu"] for record in validations if record.get("bleu") is not None}
    tokens = statistics.mean(record["tokens_per_update"] for record in records if record.get("kind") == "train")
    return curve, validations[-1]["loss"], tokens, json.loads((run / "summary.json").read_text())


def verdict(results: list[RunResult], steps: int) -> tuple[float, float, bool]:
    """(float32's and bf16's mean validation BLEU at ``steps`` over the seeds, whether bf16 is at
    most :data:`TOLERANCE` below float32)."""
    means = [statistics.mean(run.valid_bleu[steps] for run in results if run.precision == precision)
             for precision in PRECISIONS]
    return means[0], means[1], means[1] >= means[0] - TOLERANCE


def plot_curves(results: list[RunResult], path: Path) -> None:
    """Validation BLEU against updates, one colour per precision, a line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for index, precision in enumerate(PRECISIONS):
        for number, run in enumerate(r for r in results if r.precision == precision):
            steps = sorted(run.valid_bleu)
            axis.plot(steps, [run.valid_bleu[step] for step in steps], marker="o", color=f"C{index}",
                      linestyle="-" if number == 0 else "--", label=f"{precision}, seed {run.seed}")
    axis.set_xlabel("updates")
    axis.set_ylabel("validation BLEU (greedy, 500 sentences)")
    axis.set_ylim(bottom=0)
    axis.legend()
    save_png(figure, path)


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="updates per run (default 1,500; 4 with --quick)")
    parser.add_argument("--valid-every", type=int, default=None,
                        help="updates between validations and checkpoints (default 500; 2 with --quick)")
    parser.add_argument("--seeds", type=int, default=2, help="training runs per precision, train.seed 1..N (default 2)")
    parser.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS})")
    args = parser.parse_args()
    steps = args.steps or (4 if args.quick else 1500)
    valid_every = args.valid_every or (2 if args.quick else 500)
    seeds = list(range(1, args.seeds + 1))
    if args.seeds < 1:
        parser.error("--seeds: at least 1")
    if steps % valid_every:
        parser.error("--steps must be a multiple of --valid-every, so that both precisions validate at the last update")
    report = Report("bf16_quality", f"bf16 against float32 training on a CPU (Multi30k, {args.threads} CPU threads)",
                    ["precision", "seed", "updates", "tgt tok/update", "tgt tok/s", "train s", "peak RSS MB",
                     "validation BLEU by update", "validation loss", "test2016 BLEU (beam 5)", "chrF", "at limit"], quick=args.quick)
    if not cpu_has_native_bf16():
        report.notes.append("skipped: this CPU has no bf16 units (AVX-512 BF16 or AMX), where nmt-cli trains bf16 "
                            "settings in fp32, so there is nothing to compare")
        report.emit(args.json)
        return
    load_before = load_averages()
    prepared = prepare_multi30k(args.work, args.quick)
    data = PreparedData(prepared)
    pieces = export_pieces(prepared, args.work / f"{prepared.name}-pieces")
    source_pieces = [len(line.split()) for line in pieces.text("test", "src").read_text(encoding="utf-8").splitlines()]
    work = args.work / ("bf16_quality-quick" if args.quick else "bf16_quality")
    results = []
    for seed in seeds:
        for precision in PRECISIONS:
            run = work / f"{precision}-seed{seed}"
            wall, resumed = train(prepared, run, precision, seed, steps, valid_every, args.quick, args.threads)
            curve, valid_loss, tokens, summary = read_run(run)
            test, output = evaluate(Path(summary["last_checkpoint"]), data, source_pieces,
                                    run.parent / f"{run.name}-test", args.threads)
            results.append(RunResult(precision, seed, summary["step"], curve, valid_loss,
                                     summary["target_tokens_per_second"],
                                     tokens, summary["train_seconds"], wall, summary["peak_rss_mb"],
                                     resumed, test, output))
    for result in results:
        report.add_row(result.precision, str(result.seed), fmt(result.steps), fmt(result.tokens_per_update),
                       fmt(result.tokens_per_second), fmt(result.train_seconds), fmt(result.peak_rss_mb),
                       ", ".join(f"{step:,}: {bleu:.2f}" for step, bleu in sorted(result.valid_bleu.items())),
                       f"{result.valid_loss:.4f}",
                       f"{result.test.bleu:.2f}", f"{result.test.chrf:.2f}", f"{result.test.at_limit:.1%}")
    fp32_valid, bf16_valid, fit = verdict(results, steps)
    test_means = {precision: statistics.mean(r.test.bleu for r in results if r.precision == precision)
                  for precision in PRECISIONS}
    loss_means = {precision: statistics.mean(r.valid_loss for r in results if r.precision == precision)
                  for precision in PRECISIONS}
    speed = {precision: statistics.mean(r.tokens_per_second for r in results if r.precision == precision)
             for precision in PRECISIONS}
    outputs = {(r.seed, r.precision): r.test_output for r in results}
    references = references_of(data)
    paired = [held_out_test(seed, outputs[seed, "fp32"], outputs[seed, "bf16"], references) for seed in seeds]
    plot = work / "bf16_quality.png" if args.quick else RESULTS / "bf16_quality.png"
    plot_curves(results, plot)
    report.notes += [
        f"Decision (dev): mean validation BLEU at update {steps:,} over {len(seeds)} seed(s): fp32 {fp32_valid:.2f}, "
        f"bf16 {bf16_valid:.2f}, difference {bf16_valid - fp32_valid:+.2f}; the rule (bf16 at most {TOLERANCE} "
        f"below fp32) says: {'bf16 reaches fp32' if fit else 'bf16 falls short'}. Mean validation loss (nats per "
        f"target token, unsmoothed) at that update: fp32 {loss_means['fp32']:.4f}, bf16 {loss_means['bf16']:.4f}.",
        f"Held out (test2016, beam 5, last checkpoint): mean BLEU fp32 {test_means['fp32']:.2f}, bf16 "
        f"{test_means['bf16']:.2f}, difference {test_means['bf16'] - test_means['fp32']:+.2f}. Paired bootstrap "
        f"within each seed (sacreBLEU, 1,000 resamples): {'; '.join(paired)}.",
        f"Speed: bf16 trains at {speed['bf16'] / speed['fp32']:.2f}x fp32's target tokens/s (mean over the seeds; "
        "the trainer's clock over the updates after its first progress line).",
        f"Model and settings: {RECIPE.relative_to(REPO)} (3+3 layers, d 256, 4 heads, FFN 1024, dropout 0.2, "
        "batches of 4,096 tokens, lr 1e-3 after 1,000 warm-up updates), for the number of updates above; "
        f"validation: greedy, the first {VALID_SENTENCES} sentences of val, decoded in float32; test: beam {BEAM}, "
        "length penalty and limit as `nmt translate` ships them, float32."
        + (" Quick run: the tiny shape of --quick, 2,000 pairs." if args.quick else ""),
        f"Picture: validation BLEU against updates, `{plot.relative_to(REPO) if plot.is_relative_to(REPO) else plot}`.",
        f"Load average (1/5/15 minutes) before: {load_before}, after: {load_averages()}.",
    ]
    resumed = [f"{r.precision} seed {r.seed}" for r in results if r.resumed]
    reused = [f"{r.precision} seed {r.seed}" for r in results if r.wall_seconds is None]
    if resumed:
        report.notes.append("resumed after an interruption (speed figures cover the last session): " + ", ".join(resumed))
    if reused:
        report.notes.append("trained by an earlier run under --work and reused: " + ", ".join(reused))
    report.emit(args.json)


if __name__ == "__main__":
    main()
