"""Time to quality: test2016 BLEU of nmt-cli, fairseq and OpenNMT-py after equal wall-clock training budgets.

Each toolkit trains the same model (``--models``: ``tiny``, the Transformer of 2+2 layers, d 128,
4 heads, ffn 512; ``rnn``, the attentional LSTM of 256 units; embeddings tied) on the same
Multi30k de->en pieces, on 2 threads, with its own documented recipe for that shape
(:func:`nmt_cli_recipe`, :data:`PEER_RECIPES`, stated in the notes) and the same target tokens
per update: nmt-cli at its default ``train.max_tokens``, each peer at the ``max_tokens`` that
gives the same mean target tokens per update (``train_speed.calibrated_max_tokens``). Pairs as
in ``train_speed.py``: fairseq with nmt-cli post-norm and with nmt-cli's Luong RNN (fairseq's
LSTM has Luong's general attention), OpenNMT-py (pre-norm only) with nmt-cli pre-norm and with
nmt-cli's Bahdanau RNN. nmt-cli trains at its default precision for this CPU (bf16 for the
Transformer where the CPU has bf16 units, fp32 elsewhere); the peers train in fp32, having no
bf16 training on a CPU. A run with nmt-cli in bf16, or of the RNNs, is a variant with a section
and a figure of its own.

One clock for all: every run is a subprocess whose progress lines this script stamps as they
arrive. Each toolkit saves a checkpoint every ``--save-every`` updates (all kept; a progress line
every half of that, so each has a line); the checkpoint of update ``u`` counts as reached at the stamp
of the progress line of ``u`` (its saving falls in the next interval, for every toolkit alike).
The bench stops each run with SIGTERM to its process group at the first progress line after the
largest budget (:class:`peers.arch.TimedRun`). No toolkit validates while it trains.

For each budget the last checkpoint dated at or before it translates test2016 with beam 5 by
the toolkit's own decoder and its own length penalty and limits (nmt-cli: ``nmt translate``'s
defaults; OpenNMT-py: ``onmt_translate``'s; fairseq: ``fairseq-generate``'s); sacreBLEU and
chrF on the detokenised output. Evaluation time is outside the budgets. A learning curve (more
checkpoints, ``--curve-points`` times evenly spread over the largest budget) gives the picture,
and the time nmt-cli took to reach each peer's BLEU at the largest budget, interpolated
linearly between its evaluated checkpoints (from BLEU 0 at time 0).

Resumable: a finished training run (``trained.json``, with the settings it ran under) and a
finished evaluation (``eval/<update>/score.json``) under ``--work`` are reused; an unfinished
training run, or one of other settings, starts over, since a stopped clock cannot resume.
``--seeds N`` trains each toolkit N times (``--repeats`` is not used: figures are medians over
the seeds). ``--quick``: 2,000 pairs, budgets of 30 and 60 seconds, no calibration.
The full run holds the machine for the four training runs at the largest budget, plus the
calibration and the evaluations.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from common import (BENCH_DIR, REPO, THREADS, Report, absolute_path, bench_arguments, fmt, fresh_dir, median,
                    project_version, save_png)
from peers import fairseq, ours, opennmt
from peers.arch import (TINY_LUONG_RNN, TINY_RNN, TINY_TRANSFORMER, DecodeSpec, RnnSpec, TimedRun, TrainSpec,
                        TransformerSpec)
from peers.corpus import PieceCorpus, export_pieces, prepare_multi30k
from peers.install import install_record
from peers.ours import Engine
from peers.results import PeerRunFailed
from peers.selection import TRAINING_PEERS, parse_peer_list, peer_label, ready_peers
from train_speed import calibrated_max_tokens
from translate_speed import Quality, kept_quality, quality

from nmt_cli.config import DecodeConfig, ModelConfig, TrainConfig, load_config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding.search import max_output_length
from nmt_cli.fileio import atomic_write_json
from nmt_cli.precision import Precision

BUDGETS_MINUTES = (5.0, 10.0, 20.0)
QUICK_BUDGETS_MINUTES = (0.5, 1.0)
SAVE_EVERY, CURVE_POINTS = 100, 10
#: below this BLEU a model does not translate yet, and the time to reach its BLEU says nothing
MIN_REACH_BLEU = 1.0
QUICK_SAVE_EVERY, QUICK_CURVE_POINTS = 2, 2
#: a step limit no run reaches: the clock stops every run
UNLIMITED_STEPS = 1_000_000
BEAM = 5
OURS = "nmt-cli"
RESULTS = BENCH_DIR / "results"


#: the shapes ``--models`` names
MODELS = ("tiny", "rnn")

#: nmt-cli's Multi30k recipe for each RNN attention, whose training settings its RNN arm takes
RNN_RECIPES = {"additive": "multi30k-rnn-bahdanau", "general": "multi30k-rnn-luong-local-p"}


@dataclass(frozen=True)
class Recipe:
    """A toolkit's documented settings for a shape, as the runners take them."""

    spec: TransformerSpec | RnnSpec
    train: TrainSpec
    source: str  # where the settings come from, for the notes


def nmt_cli_recipe(spec: TransformerSpec | RnnSpec) -> Recipe:
    """nmt-cli's settings for the architecture of ``spec`` (a peer recipe's shape), precision included:
    ``train.precision``'s default resolved for the model family on this CPU (bf16 for a Transformer
    where it has bf16 units).

    The Transformer takes nmt-cli's defaults (``nmt_cli.config``). An RNN takes the training
    settings of nmt-cli's Multi30k recipe for its attention (:data:`RNN_RECIPES`: adam, a
    constant learning rate that a plateau schedule halves only after a validation, which these
    runs never make), at the shape the peers share (LSTM 256).
    """
    if isinstance(spec, TransformerSpec):
        train, model = TrainConfig(), ModelConfig()
        shape = replace(spec, dropout=model.dropout, attention_dropout=model.attention_dropout)
        source = "its defaults (docs/config.md"
    else:
        name = RNN_RECIPES[spec.attention]
        recipe = load_config(REPO / "recipes" / f"{name}.yaml")
        train, shape = recipe.train, replace(spec, dropout=recipe.model.dropout)
        source = f"its recipe recipes/{name}.yaml (training settings"
    precision = Precision(train.precision, torch.device("cpu"), family=spec.kind).name
    schedule = "constant" if train.schedule == "plateau" else train.schedule
    return Recipe(
        shape,
        TrainSpec(max_tokens=train.max_tokens, optimizer=train.optimizer, schedule=schedule, lr=train.lr,
                  warmup=train.warmup_steps if schedule == "inverse_sqrt" else 0,
                  label_smoothing=train.label_smoothing, adam_betas=tuple(train.adam_betas),
                  weight_decay=train.weight_decay, clip_norm=train.clip_norm, precision=precision),
        f"{source}; train.precision {train.precision} is {precision} on this CPU)")


#: fairseq's IWSLT'14 de-en Transformer recipe (examples/translation/README.md,
#: transformer_iwslt_de_en) at the tiny shape; OpenNMT-py's documented Transformer settings
#: (the docs' WMT17 en-de Transformer example: noam with learning_rate 2 and 8,000 warm-up
#: steps, which peaks at 2 * d^-0.5 * 8000^-0.5, the same shape as inverse_sqrt; the loss per
#: target token, ``normalization: tokens``). For the RNN: OpenNMT-py's defaults (``onmt_train
#: -h``; its quickstart trains its default RNN with them: plain SGD at learning rate 1.0,
#: gradient norm clipped at 5, dropout 0.3, no label smoothing, the loss per sentence, decay
#: only from update 50,000); fairseq documents no LSTM translation recipe, so its LSTM
#: trains with the optimisation of the IWSLT'14 recipe it documents.
PEER_RECIPES = {
    ("tiny", "fairseq"): Recipe(
        replace(TINY_TRANSFORMER, dropout=0.3, attention_dropout=0.0),
        TrainSpec(lr=5e-4, warmup=4000, label_smoothing=0.1, adam_betas=(0.9, 0.98), weight_decay=1e-4,
                  clip_norm=0.0),
        "examples/translation IWSLT'14 recipe"),
    ("tiny", "opennmt"): Recipe(
        replace(TINY_TRANSFORMER, dropout=0.1, attention_dropout=0.1, post_norm=False),
        TrainSpec(lr=2 * (TINY_TRANSFORMER.d_model * 8000) ** -0.5, warmup=8000, label_smoothing=0.1,
                  adam_betas=(0.9, 0.998), clip_norm=0.0),
        "its documented Transformer settings (docs: the WMT17 en-de example)"),
    ("rnn", "opennmt"): Recipe(
        replace(TINY_RNN, dropout=0.3),
        TrainSpec(optimizer="sgd", schedule="constant", lr=1.0, warmup=0, label_smoothing=0.0,
                  loss_normalization="sents", clip_norm=5.0),
        "its defaults (onmt_train -h), which its quickstart trains its RNN with (weights Glorot-initialised, as "
        "this runner initialises every OpenNMT-py model, where its default is uniform within 0.1)"),
    ("rnn", "fairseq"): Recipe(
        replace(TINY_LUONG_RNN, dropout=0.3),
        TrainSpec(lr=5e-4, warmup=4000, label_smoothing=0.1, adam_betas=(0.9, 0.98), weight_decay=1e-4,
                  clip_norm=0.0),
        "the examples/translation IWSLT'14 recipe's optimisation (fairseq documents no LSTM translation "
        "recipe)"),
}


def describe_recipe(recipe: Recipe) -> str:
    """The settings of a recipe, one phrase each."""
    train, spec = recipe.train, recipe.spec
    optimizer = f"adam betas {train.adam_betas}" if train.optimizer == "adam" else train.optimizer
    schedule = (f"peak lr {train.lr:.2e} after {train.warmup:,} warm-up updates then 1/sqrt decay"
                if train.schedule == "inverse_sqrt" else f"lr {train.lr:.2e} throughout")
    attention = (f"attention dropout {spec.attention_dropout}, " if isinstance(spec, TransformerSpec) else "")
    normalization = {"tokens": "target token", "sents": "sentence"}[train.loss_normalization]
    return (f"{recipe.source}: {optimizer}, {schedule}, loss per {normalization}, label smoothing "
            f"{train.label_smoothing}, dropout {spec.dropout}, {attention}weight decay {train.weight_decay}, "
            f"clip norm {train.clip_norm or 'off'}, {train.precision}")


@dataclass(frozen=True)
class Arm:
    """One toolkit's runs in this table: its label, runner module, recipe and peer name (None: ours)."""

    label: str
    runner: object
    recipe: Recipe
    peer: str | None = None

    @property
    def folder(self) -> str:
        spec = self.recipe.spec
        if isinstance(spec, TransformerSpec):
            return f"{self.peer or 'nmt-cli'}-{'post' if spec.post_norm else 'pre'}"
        return f"{self.peer or 'nmt-cli'}-rnn-{spec.attention}"

    @property
    def architecture(self) -> str:
        spec = self.recipe.spec
        if isinstance(spec, TransformerSpec):
            return "post-norm" if spec.post_norm else "pre-norm"
        return "Bahdanau RNN" if spec.attention == "additive" else "Luong RNN"

    @property
    def name(self) -> str:
        return f"{self.label} {self.architecture}"


@dataclass
class TrainedRun:
    """A timed run as recorded: progress ``(update, seconds, target tokens of the interval)``, the
    checkpoint of each update it saved, and the settings and load average it ran under."""

    progress: list[tuple[int, float, float]]
    checkpoints: dict[int, str]
    parameters: int | None
    settings: dict
    load_average: list[float]

    @classmethod
    def load(cls, path: Path) -> TrainedRun:
        record = json.loads(path.read_text())
        record["progress"] = [tuple(line) for line in record["progress"]]
        record["checkpoints"] = {int(update): checkpoint for update, checkpoint in record["checkpoints"].items()}
        return cls(**record)

    def dated_checkpoints(self) -> dict[int, float]:
        """{update: seconds} of each checkpoint that has a progress line to date it."""
        stamps = {update: seconds for update, seconds, _ in self.progress}
        return {update: stamps[update] for update in self.checkpoints if update in stamps}

    def tokens_until(self, update: int) -> float:
        return sum(tokens for done, _, tokens in self.progress if done <= update)


def checkpoint_for(dated: dict[int, float], seconds: float) -> int | None:
    """The update of the last checkpoint dated at or before ``seconds``; None when none is."""
    reached = [update for update, stamp in dated.items() if stamp <= seconds]
    return max(reached) if reached else None


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    """Seconds at which a learning curve ``[(seconds, BLEU), ...]`` first reaches ``target``,
    linear between its points and from BLEU 0 at time 0; None when it never does."""
    if target <= 0:
        return 0.0
    previous = (0.0, 0.0)
    for seconds, bleu in sorted(curve):
        if bleu >= target:  # the previous point is below the target, so bleu > b0
            t0, b0 = previous
            return t0 + (target - b0) * (seconds - t0) / (bleu - b0)
        previous = (seconds, bleu)
    return None


@dataclass(frozen=True)
class Setup:
    """What every arm of one invocation shares: data, stop rule, evaluation times and seeds."""

    corpus: PieceCorpus
    prepared: Path
    data: PreparedData
    references: list[str]
    #: pieces of each test source sentence, for each toolkit's length limit
    source_pieces: list[int]
    timed: TimedRun
    #: seconds at which a checkpoint is evaluated: the budgets and the learning curve's points
    times: list[float]
    seeds: int
    work: Path


def train_timed(arm: Arm, seed: int, max_tokens: int, setup: Setup, folder: Path) -> TrainedRun:
    """One timed training run of ``arm``, or the one a previous invocation finished in ``folder``
    with the same settings (an unfinished one, or one of other settings, starts over)."""
    marker = folder / "trained.json"
    settings = {"save_every": setup.timed.save_every, "stop_seconds": setup.timed.stop_seconds,
                "max_tokens": max_tokens, "seed": seed}
    if marker.is_file() and TrainedRun.load(marker).settings == settings:
        return TrainedRun.load(marker)
    train_spec = replace(arm.recipe.train, max_tokens=max_tokens, steps=UNLIMITED_STEPS, seed=seed,
                         log_every=max(setup.timed.save_every // 2, 1))  # every checkpoint gets a progress line
    marker.unlink(missing_ok=True)  # from here until the new marker, no run is finished in this folder
    fresh_dir(folder / "eval")  # nor are the scores of an earlier run this one's
    load_average = list(os.getloadavg())
    out_dir = fresh_dir(folder / "train")
    if arm.peer is None:
        result = ours.train(setup.prepared, arm.recipe.spec, train_spec, out_dir, THREADS, timed=setup.timed)
    else:
        result = arm.runner.train(setup.corpus, arm.recipe.spec, train_spec, out_dir, THREADS, timed=setup.timed)
    atomic_write_json(marker, {"progress": [(p.update, p.seconds, p.tokens) for p in result.progress],
                               "checkpoints": {update: str(path) for update, path
                                               in arm.runner.checkpoints(result.model).items()},
                               "parameters": result.parameters, "settings": settings,
                               "load_average": load_average})
    return TrainedRun.load(marker)  # as a rerun reads it


#: each peer's own length limit on a sentence of ``n`` source pieces decoded alone: fairseq-generate's
#: max_len_a 0 and max_len_b 200; onmt_translate's min(max_length 250, max_length_ratio 1.25 x source + 5)
#: (it takes the batch's padded source length, so a sentence's own is the lowest limit it can get)
PEER_LENGTH_LIMITS = {"fairseq": lambda n: 200, "opennmt": lambda n: int(min(250, n * 1.25 + 5))}


def length_limits(arm: Arm, source_pieces: list[int]) -> list[int]:
    """Each test sentence's output limit in pieces under ``arm``'s own decoder settings."""
    if arm.peer is None:
        decode = DecodeConfig()
        return [max_output_length(n, decode.max_len_a, decode.max_len_b) for n in source_pieces]
    return [PEER_LENGTH_LIMITS[arm.peer](n) for n in source_pieces]


def evaluate(arm: Arm, checkpoint: Path, setup: Setup, folder: Path) -> Quality:
    """Translate test2016 with ``checkpoint`` by the toolkit's own decoder (beam 5, its own length
    penalty and limit); reuses a finished evaluation in ``folder``."""
    def score() -> Quality:
        decode = DecodeSpec(beam=BEAM)
        if arm.peer is None:
            decode = replace(decode, alpha=DecodeConfig().alpha)
            hypotheses = ours.translate(checkpoint, setup.data.text_path("test", "src"), decode, folder, THREADS,
                                        engine=Engine(shipped_defaults=True)).hypotheses
        elif arm.peer == "opennmt":
            hypotheses = opennmt.translate(checkpoint, setup.corpus.text("test", "src"), decode, folder, THREADS,
                                           own_defaults=True).hypotheses
        else:
            hypotheses = fairseq.generate(checkpoint, setup.corpus, BEAM, folder, THREADS)
        return quality(hypotheses, setup.references, setup.data.tokenizer, length_limits(arm, setup.source_pieces))

    return kept_quality(folder, score)


@dataclass
class SeedRun:
    """One seed's timed run and the scores of its evaluated checkpoints."""

    run: TrainedRun
    scores: dict[int, Quality]

    def curve(self) -> list[tuple[float, float]]:
        dated = self.run.dated_checkpoints()
        return [(dated[update], score.bleu) for update, score in self.scores.items()]

    def at(self, minutes: float) -> int | None:
        """The update of the checkpoint that stands for a budget of ``minutes``."""
        return checkpoint_for(self.run.dated_checkpoints(), minutes * 60)


def run_arm(arm: Arm, max_tokens: int, setup: Setup) -> list[SeedRun]:
    """Train ``arm`` once per seed and evaluate the checkpoints of ``setup.times``."""
    runs = []
    for seed in range(1, setup.seeds + 1):
        folder = setup.work / arm.folder / f"seed{seed}"
        run = train_timed(arm, seed, max_tokens, setup, folder)
        dated = run.dated_checkpoints()
        updates = sorted({checkpoint_for(dated, seconds) for seconds in setup.times} - {None})
        runs.append(SeedRun(run, {update: evaluate(arm, Path(run.checkpoints[update]), setup,
                                                   folder / "eval" / str(update)) for update in updates}))
    return runs


def add_rows(report: Report, arm: Arm, max_tokens: int, runs: list[SeedRun], budgets: list[float]) -> None:
    """A row per budget: medians over the seeds that had a checkpoint by then."""
    for minutes in budgets:
        reached = [(seed_run, update) for seed_run in runs if (update := seed_run.at(minutes)) is not None]
        if not reached:
            report.add_row(arm.label, arm.architecture, f"{minutes:g}", fmt(max_tokens), "no checkpoint yet",
                           *["-"] * 5)
            continue
        bleus = [seed_run.scores[update].bleu for seed_run, update in reached]
        spread = f" ({min(bleus):.1f}-{max(bleus):.1f})" if len(bleus) > 1 else ""
        report.add_row(arm.label, arm.architecture, f"{minutes:g}", fmt(max_tokens),
                       fmt(median([update for _, update in reached])),
                       fmt(median([seed_run.run.tokens_until(update) for seed_run, update in reached])),
                       f"{median(bleus):.1f}{spread}",
                       f"{median([seed_run.scores[update].chrf for seed_run, update in reached]):.1f}",
                       f"{100 * median([seed_run.scores[update].at_limit for seed_run, update in reached]):.1f}%",
                       f"{median([seed_run.run.dated_checkpoints()[update] / 60 for seed_run, update in reached]):.2f}")


def reach_note(peer: Arm, peer_runs: list[SeedRun], ours_arm: Arm, ours_runs: list[SeedRun],
               largest: float) -> str | None:
    """When nmt-cli reached ``peer``'s BLEU at the largest budget, seed by seed (seed k against
    the peer's seed k); None when the peer has no checkpoint by then. No time is given when a
    seed of the peer stays below :data:`MIN_REACH_BLEU`: any model reaches that at once."""
    pairs = []
    for peer_run, ours_run in zip(peer_runs, ours_runs):
        update = peer_run.at(largest)
        if update is not None:
            target = peer_run.scores[update].bleu
            pairs.append((target, time_to_reach(ours_run.curve(), target)))
    if not pairs:
        return None
    targets = ", ".join(f"{target:.2f}" for target, _ in pairs)
    if min(target for target, _ in pairs) < MIN_REACH_BLEU:
        return (f"time to {peer.label}'s {largest:g}-minute BLEU ({targets}): not given, since below BLEU "
                f"{MIN_REACH_BLEU:g} its output does not translate yet and nmt-cli {ours_arm.architecture} "
                "would reach it at once")
    taken = [seconds for _, seconds in pairs if seconds is not None]
    if len(taken) < len(pairs):
        verdict = (f"did not reach it within {largest:g} minute(s) in {len(pairs) - len(taken)} of {len(pairs)} "
                   "seed(s)")
    else:
        minutes = median(taken) / 60
        verdict = (f"reached it after {minutes:.2f} minutes, {minutes / largest:.0%} of the budget (median over "
                   "seeds; linear between its evaluated checkpoints, from BLEU 0 at time 0)")
    return f"time to {peer.label}'s {largest:g}-minute BLEU ({targets}): nmt-cli {ours_arm.architecture} {verdict}"


def warmup_note(arms: list[Arm], runs: dict[str, list[SeedRun]]) -> str | None:
    """How far into its learning-rate warm-up each toolkit got by the end of its runs: within
    the warm-up, the budgets compare the first phase of training, not trained models. None when
    no run had a warm-up."""
    reached = {arm: max(seed_run.run.progress[-1][0] for seed_run in runs[arm.name])
               for arm in arms if runs.get(arm.name) and arm.recipe.train.schedule == "inverse_sqrt"}
    if not reached:
        return None
    parts = [f"{arm.name} {update:,} of {arm.recipe.train.warmup:,}" for arm, update in reached.items()]
    within = all(update < arm.recipe.train.warmup for arm, update in reached.items())
    constant = [arm.name for arm in arms if runs.get(arm.name) and arm not in reached]
    return ("updates by the end of the largest budget, against each recipe's learning-rate warm-up: "
            + "; ".join(parts)
            + (f" ({'each of these' if constant else 'every run'} ended within its warm-up, at a rising learning "
               "rate: these budgets compare the first phase of training, not trained models)" if within else "")
            + (f"; with no warm-up, at a constant learning rate: {', '.join(constant)}" if constant else ""))


def arms_for(runners: dict, models: list[str]) -> list[Arm]:
    """For each model, each selected peer after the nmt-cli arm of its architecture; with no peer,
    nmt-cli alone in the architecture of the first peer (fairseq's post-norm Transformer,
    OpenNMT-py's Bahdanau RNN)."""
    arms: list[Arm] = []
    for model in models:
        peers = [name for name in runners if (model, name) in PEER_RECIPES]
        for name in peers or [next(name for shape, name in PEER_RECIPES if shape == model)]:
            recipe = PEER_RECIPES[model, name]
            arms.append(Arm(OURS, ours, nmt_cli_recipe(recipe.spec)))
            if name in runners:
                arms.append(Arm(peer_label(name), runners[name], recipe, name))
    return arms


def plot_curves(curves: dict[str, list[list[tuple[float, float]]]], budgets: list[float], path: Path) -> None:
    """BLEU against minutes, one colour per toolkit and architecture (a line per seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for index, (label, seeds) in enumerate(curves.items()):
        for number, curve in enumerate(seeds):
            points = sorted(curve)
            axis.plot([seconds / 60 for seconds, _ in points], [bleu for _, bleu in points], marker="o",
                      color=f"C{index}", label=label if number == 0 else None)
    for minutes in budgets:
        axis.axvline(minutes, color="grey", linewidth=0.5, linestyle=":")
    axis.set_xlim(left=0)
    axis.set_ylim(bottom=0)
    axis.set_xlabel("training wall-clock minutes (2 CPU threads)")
    axis.set_ylabel("test2016 BLEU (beam 5)")
    axis.legend()
    save_png(figure, path)


def figure_path(args: argparse.Namespace, ours_precision: str, models: list[str]) -> Path:
    """Where the learning curve goes: ``--figure``; else a full run's beside the committed results
    (``bench/results/``, so BENCHMARKS.md can show it; one per set of models and precision nmt-cli
    trained in, as each has a section of its own), a quick run's beside its ``--json`` or in its work
    folder."""
    if args.figure is not None:
        return args.figure
    if not args.quick:
        parts = ["time_to_quality", *([] if models == ["tiny"] else models),
                 *([] if ours_precision == "fp32" else [ours_precision])]
        return RESULTS / f"{'-'.join(parts)}.png"
    return args.json.with_suffix(".png") if args.json else args.work / "time_to_quality-quick" / "time_to_quality.png"


def method_notes(setup: Setup, arms: list[Arm], budgets: list[float], ours_tokens: int, quick: bool,
                 runs: dict[str, list[SeedRun]]) -> list[str]:
    """How the figures were made, one note each."""
    decode = DecodeConfig()
    loads = [f"{name} {', '.join(f'{seed_run.run.load_average[0]:.2f}' for seed_run in seed_runs)}"
             for name, seed_runs in runs.items()]
    shapes = dict.fromkeys(arm.recipe.spec.describe().rsplit(",", 1)[0] if arm.recipe.spec.kind == "transformer"
                           else arm.recipe.spec.describe() for arm in arms if arm.peer is None)
    return [
        f"every toolkit: {' / '.join(shapes)}, embeddings tied, the same joint "
        f"SentencePiece pieces; seeds 1..{setup.seeds}; nmt-cli at its default max tokens {ours_tokens}, each "
        + ("peer at the same (--quick: no calibration)" if quick else
           "peer's scaled so its mean target tokens per update match nmt-cli's (train_speed.calibrated_max_tokens)"),
        f"budgets {', '.join(f'{b:g}' for b in budgets)} minutes of the bench's clock from the launch of the "
        f"training command (start-up included); a checkpoint every {setup.timed.save_every} updates, all kept, "
        "dated by the stamp of its update's progress line; every run stopped by SIGTERM to its process group at "
        f"the first progress line after {budgets[-1]:g} minute(s); no validation during training",
        f"decoding: beam {BEAM}, each toolkit's own decoder with its own length penalty and length limit "
        f"(nmt-cli: nmt translate's defaults, GNMT alpha {decode.alpha}, at most {decode.max_len_a:g} x source + "
        f"{decode.max_len_b} pieces, its default source-token budget per batch; OpenNMT-py: onmt_translate's, "
        "length_penalty avg (score over length), batches of 32 sentences; fairseq: fairseq-generate's, lenpen 1 "
        f"(score over length), at most 200 tokens, batches of 32 sentences); {len(setup.references):,} test "
        "sentences; sacreBLEU BLEU and chrF on the detokenised output; evaluation time outside the budgets",
        "at limit: share of outputs as long as the toolkit's own limit for that sentence (OpenNMT-py: "
        "min(250, 1.25 x source + 5) on the sentence alone; it applies the padded batch's, so a sentence "
        "counted here may have stopped short of its batch's limit)",
        "tgt tokens: target tokens trained on up to the checkpoint, as each toolkit counts its batches'; "
        "median over seeds (BLEU range in brackets with several)",
        f"load average (1 minute) when each training run started: {'; '.join(loads)} (a shared machine: figures "
        "under load are not benchmark figures)",
    ]


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--peers", default="all", help=f"all, none, or a comma list of {', '.join(TRAINING_PEERS)}")
    parser.add_argument("--budgets", default=None,
                        help="comma list of training budgets in minutes (default 5,10,20; --quick: 0.5,1)")
    parser.add_argument("--save-every", type=int, default=None,
                        help=f"updates between checkpoints (default {SAVE_EVERY}; --quick: {QUICK_SAVE_EVERY})")
    parser.add_argument("--curve-points", type=int, default=None,
                        help=f"extra evaluation times spread over the largest budget for the learning curve "
                             f"(default {CURVE_POINTS}; --quick: {QUICK_CURVE_POINTS})")
    parser.add_argument("--seeds", type=int, default=1, help="training runs per toolkit (seeds 1..N)")
    parser.add_argument("--models", default="tiny",
                        help=f"comma list of {', '.join(MODELS)}: the Transformer, the RNNs (default: tiny)")
    parser.add_argument("--figure", type=absolute_path, default=None,
                        help="the learning-curve PNG (default: bench/results/time_to_quality.png; --quick: beside "
                             "--json, else under --work)")
    args = parser.parse_args()
    default_budgets = list(QUICK_BUDGETS_MINUTES if args.quick else BUDGETS_MINUTES)
    budgets = sorted(float(value) for value in args.budgets.split(",")) if args.budgets else default_budgets
    models = args.models.split(",")
    if budgets[0] <= 0 or args.seeds < 1 or not models or set(models) - set(MODELS):
        parser.error(f"--budgets: positive minutes; --seeds: at least 1; --models: a comma list of "
                     f"{', '.join(MODELS)}")
    save_every = args.save_every or (QUICK_SAVE_EVERY if args.quick else SAVE_EVERY)
    curve_points = args.curve_points if args.curve_points is not None else (
        QUICK_CURVE_POINTS if args.quick else CURVE_POINTS)
    runners, missing = ready_peers(parse_peer_list(args.peers, TRAINING_PEERS), args.quick)

    prepared = prepare_multi30k(args.work, args.quick)
    data = PreparedData(prepared)
    pieces = export_pieces(prepared, args.work / f"{prepared.name}-pieces")
    setup = Setup(corpus=pieces, prepared=prepared,
                  data=data, references=data.text_path("test", "tgt").read_text(encoding="utf-8").splitlines(),
                  source_pieces=[len(line.split()) for line in pieces.text("test", "src").read_text(
                      encoding="utf-8").splitlines()],
                  timed=TimedRun(save_every=save_every, stop_seconds=budgets[-1] * 60),
                  times=sorted({*(minutes * 60 for minutes in budgets),
                                *(budgets[-1] * 60 * point / curve_points for point in range(1, curve_points + 1))}),
                  seeds=args.seeds, work=args.work / ("time_to_quality-quick" if args.quick else "time_to_quality"))
    ours_tokens = TrainConfig().max_tokens
    calibration = setup.work / f"calibration-{ours_tokens}.json"
    peer_tokens = json.loads(calibration.read_text()) if calibration.is_file() else {}
    if args.quick:
        peer_tokens = {name: ours_tokens for name in runners}
    elif set(runners) - set(peer_tokens):
        peer_tokens = calibrated_max_tokens(runners, setup.corpus, prepared, setup.work, ours_tokens)
        atomic_write_json(calibration, peer_tokens)

    report = Report("time_to_quality",
                    "Time to quality (Multi30k test2016 BLEU after equal training time, 2 CPU threads)",
                    ["toolkit", "architecture", "budget (min)", "max tokens", "updates", "tgt tokens", "BLEU",
                     "chrF", "at limit", "checkpoint dated (min)"], quick=args.quick)
    arms = arms_for(runners, models)
    # the precision a section is known by: bf16 where any nmt-cli arm trains in it
    ours_precision = "bf16" if any(arm.peer is None and arm.recipe.train.precision == "bf16" for arm in arms) \
        else "fp32"
    report.variant = ", ".join(filter(None, [
        f"models {', '.join(models)}" if models != ["tiny"] else "",
        f"nmt-cli in {ours_precision}" if ours_precision != "fp32" else "",
        f"budgets of {', '.join(f'{minutes:g}' for minutes in budgets)} minutes" if budgets != default_budgets
        else ""]))
    report.versions = {"nmt-cli": project_version(),
                       **{peer_label(name): str(install_record(name)["versions"]) for name in runners}}
    runs: dict[str, list[SeedRun]] = {}  # by "<label> <architecture>"
    for arm in arms:
        max_tokens = ours_tokens if arm.peer is None else peer_tokens[arm.peer]
        try:
            runs[arm.name] = run_arm(arm, max_tokens, setup)
        except PeerRunFailed as error:
            report.add_row(arm.label, arm.architecture, "-", fmt(max_tokens),
                           f"failed: {str(error).splitlines()[0]}", *["-"] * 5)
            continue
        add_rows(report, arm, max_tokens, runs[arm.name], budgets)
    for name, why in missing.items():
        report.add_row(peer_label(name), "-", "-", "-", why, *["-"] * 5)

    for peer in (arm for arm in arms if arm.peer is not None):
        ours_arm = next(arm for arm in arms if arm.peer is None and arm.architecture == peer.architecture)
        if peer.name in runs and ours_arm.name in runs:
            note = reach_note(peer, runs[peer.name], ours_arm, runs[ours_arm.name], budgets[-1])
            report.notes += [note] if note else []
    if runs:
        figure = figure_path(args, ours_precision, models)
        plot_curves({name: [seed_run.curve() for seed_run in seed_runs] for name, seed_runs in runs.items()},
                    budgets, figure)
        shown = figure.relative_to(REPO) if figure.is_relative_to(REPO) else figure
        report.notes.append("learning curve (BLEU against minutes, one line per toolkit and seed): "
                            f"![learning curves]({shown})")
    report.notes += [f"{arm.name} settings, {describe_recipe(arm.recipe)}" for arm in arms]
    report.notes += [f"{arm.name}: {deviation}" for arm in arms if arm.peer is not None
                     for deviation in arm.runner.deviations(arm.recipe.spec)]
    report.notes += [note] if runs and (note := warmup_note(arms, runs)) else []
    report.notes += method_notes(setup, arms, budgets, ours_tokens, args.quick, runs)
    report.emit(args.json)


if __name__ == "__main__":
    main()
