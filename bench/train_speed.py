"""Training speed: target tokens/s of nmt-cli against OpenNMT-py and fairseq-fixed, on equal work.

Same Multi30k de->en data and SentencePiece pieces (``nmt prepare``, exported as piece
text for the peers), same schedule, 2 CPU threads each. Each comparison matches one peer's
architecture: nmt-cli trains whatever the peer can express (OpenNMT-py's Transformer is
pre-norm only, so it is compared with our pre-norm Transformer; fairseq's LSTM has Luong
"general" attention with input feeding, so it is compared with our ``rnn_luong``), and what
still differs is stated in the notes.

Equal work, measured the same way for everyone:

- **Tokens per update.** Each toolkit packs ``max_tokens`` differently, so before the timed
  runs each peer trains a few updates at nmt-cli's ``max_tokens`` and its ``max_tokens`` is
  scaled so that its mean target tokens per update match ours; every row shows the
  ``max_tokens`` it ran with and the target tokens per update it trained on.
- **One clock.** Every toolkit is a subprocess whose progress lines (every ``log_every``
  updates) this script stamps with its own clock as they arrive. The figure is the target
  tokens of the updates after the first line (the toolkit's count of its batches' target
  tokens) over the time from that line to the last: start-up and the first interval are
  the warm-up, validation is off or after the last line.

Each figure is the median over ``--repeats`` runs, the toolkits taking turns within a repeat
so a change of machine load hits all of them. A ratio comes with an interval for the median of the
paired runs' ratios (``common.median_interval``: 95% from 6 runs on; fewer give their whole range,
at the confidence it has), so a target near the ratio can be called met or missed.

Each figure is also shown as matrix-product GFLOP/s and as a share of this machine's
matrix-product peak (``model_flops.py``: FLOPs counted on our model, peak timed with
``torch.mm`` and oneDNN's packed product on 2 threads), and each model gets a ceiling: the tokens/s of a trainer that
did nothing but its matrix products at that peak, as a multiple of the peer. It says how
far a target ratio is from what the hardware allows.

Models: ``tiny`` (Transformer 2+2 layers, d 128, post-norm; fairseq) and ``tiny-prenorm``
(OpenNMT-py); ``base`` and ``base-prenorm`` (Transformer-base shape, a few steps);
``tiny-bf16`` and ``base-bf16`` (bf16 autocast, where the CPU has bf16 units; no peer trains
bf16 on a CPU, so these rows are compared with the peer's fp32 run of the same model);
``rnn`` (Bahdanau RNN, LSTM 256; OpenNMT-py) and ``rnn-luong`` (fairseq); ``rnn-bf16``.
``--quick``: 2,000 pairs, a few steps, ``tiny`` and ``rnn`` only, installed peers only, no
batch calibration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from common import (RATIO_SPREAD_NOTE, THREADS, Report, bench_arguments, fmt, fmt_ratio, fmt_ratio_spread, fresh_dir,
                    median, project_version, repeats_of)
from model_flops import flops_per_target_token, matmul_peak_gflops
from peers import ours
from peers.arch import (BASE_TRANSFORMER, TINY_LUONG_RNN, TINY_RNN, TINY_TRANSFORMER, RnnSpec, TrainSpec,
                        TransformerSpec)
from peers.corpus import export_pieces, prepare_multi30k
from peers.install import install_record
from peers.results import PeerRunFailed, TrainResult
from peers.selection import TRAINING_PEERS, parse_peer_list, peer_label, ready_peers

from nmt_cli.precision import cpu_has_native_bf16


@dataclass(frozen=True)
class Setting:
    """One comparison: an architecture, its step budget (full run, quick run) and the peers that train it."""

    name: str
    spec: TransformerSpec | RnnSpec
    full: TrainSpec
    quick: TrainSpec | None
    peers: tuple[str, ...]


TINY_STEPS = TrainSpec(steps=140, log_every=20, warmup=4000)
TINY_QUICK = TrainSpec(steps=8, log_every=2, warmup=100)
BASE_STEPS = TrainSpec(steps=20, log_every=2, warmup=4000)
SETTINGS = {setting.name: setting for setting in (
    Setting("tiny", TINY_TRANSFORMER, TINY_STEPS, TINY_QUICK, ("fairseq",)),
    Setting("tiny-bf16", TINY_TRANSFORMER, replace(TINY_STEPS, precision="bf16"), None, ()),
    Setting("tiny-prenorm", replace(TINY_TRANSFORMER, post_norm=False), TINY_STEPS, None, ("opennmt",)),
    Setting("base", BASE_TRANSFORMER, BASE_STEPS, None, ("fairseq",)),
    Setting("base-prenorm", replace(BASE_TRANSFORMER, post_norm=False), BASE_STEPS, None, ("opennmt",)),
    Setting("base-bf16", BASE_TRANSFORMER, replace(BASE_STEPS, precision="bf16"), None, ()),
    Setting("rnn", TINY_RNN, TINY_STEPS, TINY_QUICK, ("opennmt",)),
    Setting("rnn-luong", TINY_LUONG_RNN, TINY_STEPS, None, ("fairseq",)),
    Setting("rnn-bf16", TINY_RNN, replace(TINY_STEPS, precision="bf16"), None, ()),
)}

#: the dtype of the matrix products under each ``TrainSpec.precision``
PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

#: the short run that measures a peer's target tokens per update at a given ``max_tokens``
CALIBRATION = TrainSpec(steps=60, log_every=20, warmup=4000)


def run_toolkit(runner, corpus, prepared: Path, spec: TransformerSpec | RnnSpec, train_spec: TrainSpec,
                out_dir: Path) -> TrainResult:
    """One training run of one toolkit (``runner`` is ``peers.ours`` or a peer module)."""
    if runner is ours:
        return ours.train(prepared, spec, train_spec, out_dir, THREADS)
    return runner.train(corpus, spec, train_spec, out_dir, THREADS)


def calibrated_max_tokens(runners: dict, corpus, prepared: Path, work: Path, max_tokens: int) -> dict[str, int]:
    """Each peer's ``max_tokens`` that gives nmt-cli's mean target tokens per update at ``max_tokens``.

    Batching depends on the data and the packing rule, not on the model, so one short run of
    the tiny Transformer per toolkit serves every architecture.
    """
    spec = replace(CALIBRATION, max_tokens=max_tokens)
    tokens = {name: run_toolkit(runner, corpus, prepared, TINY_TRANSFORMER, spec,
                                fresh_dir(work / "calibration" / name)).tokens_per_step
              for name, runner in {"nmt-cli": ours, **runners}.items()}
    return {name: round(max_tokens * tokens["nmt-cli"] / tokens[name]) for name in runners}


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--peers", default="all", help=f"all, none, or a comma list of {', '.join(TRAINING_PEERS)}")
    parser.add_argument("--models", default=None, help=f"comma list of {', '.join(SETTINGS)} (default: all; "
                        "--quick: tiny,rnn)")
    args = parser.parse_args()
    repeats = repeats_of(args)
    model_names = args.models.split(",") if args.models else (["tiny", "rnn"] if args.quick else list(SETTINGS))
    unknown = [name for name in model_names if name not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    runners, missing = ready_peers(parse_peer_list(args.peers, TRAINING_PEERS), args.quick)

    work = args.work / "train_speed"
    prepared = prepare_multi30k(args.work, args.quick)
    corpus = export_pieces(prepared, args.work / f"{prepared.name}-pieces")

    report = Report("train_speed", "Training speed (target tokens/s, 2 CPU threads)",
                    ["model", "toolkit", "parameters", "max tokens", "tgt tok/update", "tgt tok/s", "runs (min-max)",
                     "peak RSS MB", "matmul GFLOP/s (of peak)", "nmt-cli / toolkit"], quick=args.quick)
    if args.models:  # a subset of the models is a section of its own: it does not replace the full table
        report.variant = "models " + ", ".join(model_names)
    report.versions = {"nmt-cli": project_version(),
                       **{peer_label(name): str(install_record(name)["versions"]) for name in runners}}
    used = {name: runner for name, runner in runners.items()
            if any(name in SETTINGS[model].peers for model in model_names)}
    base_tokens = (SETTINGS[model_names[0]].quick if args.quick else SETTINGS[model_names[0]].full).max_tokens
    if args.quick or not used:
        peer_tokens = {name: base_tokens for name in used}
        if used:
            report.notes.append(f"max tokens: {base_tokens} for every toolkit (--quick: no calibration)")
    else:
        peer_tokens = calibrated_max_tokens(used, corpus, prepared, work, base_tokens)
        report.notes.append(
            "max tokens: each peer's scaled so that its target tokens per update match nmt-cli's at "
            f"{base_tokens} ({CALIBRATION.steps} updates of the tiny Transformer each: "
            + ", ".join(f"{peer_label(name)} {tokens}" for name, tokens in peer_tokens.items()) + ")")
    fp32_peer_speed: dict = {}  # (architecture, peer) -> that peer's tokens/s at fp32 in this run
    step_flops: dict = {}  # architecture -> matrix-product FLOPs per target token
    for model_name in model_names:
        setting = SETTINGS[model_name]
        train_spec = setting.quick if args.quick else setting.full
        if train_spec is None:
            report.notes.append(f"{model_name}: skipped in --quick mode")
            continue
        if train_spec.precision == "bf16" and not cpu_has_native_bf16():
            report.notes.append(f"{model_name}: skipped: this CPU has no bf16 units (AVX-512 BF16 or AMX), "
                                "where nmt-cli trains bf16 settings in fp32")
            continue
        if setting.spec not in step_flops:
            step_flops[setting.spec] = flops_per_target_token(prepared, setting.spec, train_spec.max_tokens)
        flops, dtype = step_flops[setting.spec], PRECISION_DTYPES[train_spec.precision]
        toolkits = {"nmt-cli": (ours, train_spec)}
        toolkits.update({peer_label(name): (runners[name], replace(train_spec, max_tokens=peer_tokens[name]))
                         for name in setting.peers if name in runners})
        results: dict[str, list[TrainResult]] = {label: [] for label in toolkits}
        utilisations: dict[str, list[float]] = {label: [] for label in toolkits}  # per run: share of the peak
        peaks: list[float] = []
        failures: dict[str, str] = {}
        for repeat in range(repeats):
            for label, (runner, spec) in toolkits.items():
                if label in failures:
                    continue
                out_dir = fresh_dir(work / model_name / label.split()[0] / f"run{repeat}")
                peaks.append(matmul_peak_gflops(dtype))  # just before the run: the machine's speed drifts
                try:
                    result = run_toolkit(runner, corpus, prepared, setting.spec, spec, out_dir)
                    results[label].append(result)
                    utilisations[label].append(result.tokens_per_second * flops / 1e9 / peaks[-1])
                except PeerRunFailed as error:
                    failures[label] = f"failed: {str(error).splitlines()[0]}"
                except ValueError as error:  # a setting the toolkit cannot run
                    failures[label] = f"not run: {error}"
        speeds = {label: median([r.tokens_per_second for r in runs]) for label, runs in results.items() if runs}
        ours_speed = speeds.get("nmt-cli")
        peer_speeds = {label: speed for label, speed in speeds.items() if label != "nmt-cli"}
        if train_spec.precision == "fp32":
            fp32_peer_speed.update({(setting.spec, label): speed for label, speed in peer_speeds.items()})
        fp32_base = [(label, speed) for (spec, label), speed in fp32_peer_speed.items() if spec == setting.spec]
        describe = f"{model_name}: {setting.spec.describe()}" + (
            f", {train_spec.precision}" if train_spec.precision != "fp32" else "")
        for label, runs in results.items():
            spec = toolkits[label][1]
            if label in failures:
                report.add_row(describe, label, "-", fmt(spec.max_tokens), "-", failures[label], "-", "-", "-", "-")
                continue
            per_run = [r.tokens_per_second for r in runs]
            if label != "nmt-cli":
                ratio = fmt_ratio_spread([r.tokens_per_second for r in results["nmt-cli"]], per_run)
            elif peer_speeds:
                ratio = "see peer row"
            elif fp32_base:  # no peer trains this way: compare with the peer's fp32 run of the same model
                ratio = "; ".join(f"{fmt_ratio(ours_speed, speed)} vs {label} at fp32" for label, speed in fp32_base)
            else:
                ratio = "-"
            report.add_row(describe, label, fmt(runs[-1].parameters), fmt(spec.max_tokens),
                           fmt(median([r.tokens_per_step for r in runs])), fmt(speeds[label]),
                           f"{fmt(min(per_run))}-{fmt(max(per_run))}",
                           fmt(max(r.measured.peak_rss_mb for r in runs)),
                           f"{fmt(speeds[label] * flops / 1e9)} ({median(utilisations[label]):.0%})", ratio)
        for name in setting.peers:
            if name in missing:
                report.add_row(describe, peer_label(name), "-", "-", "-", missing[name], "-", "-", "-", "-")
            elif name not in runners:
                report.notes.append(f"{model_name}: {peer_label(name)} not selected (--peers)")
            else:
                for deviation in runners[name].deviations(setting.spec):
                    report.notes.append(f"{model_name}, {peer_label(name)}: {deviation}")
        ceilings = [f"{1 / median(utilisations[label]):.2f}x {label}" for label in peer_speeds]
        report.notes.append(
            f"{model_name}: {flops / 1e6:.1f} MFLOP of matrix products per target token; {train_spec.precision} "
            f"matmul peak {fmt(min(peaks))}-{fmt(max(peaks))} GFLOP/s over the runs"
            + (f"; a trainer doing only its matrix products at that peak would be {', '.join(ceilings)}"
               if ceilings else ""))
        report.notes.append(f"{model_name}: {train_spec.steps} updates, progress every {train_spec.log_every}, "
                            f"the first {train_spec.log_every} untimed; median of {repeats} run(s)")
    report.notes.append(
        "tgt tok/s: this script's clock over every update after the first progress line (target tokens as each "
        "toolkit counts its batches'); tgt tok/update: mean over the run; peak RSS: the training process (wait4 "
        "maxrss); matmul GFLOP/s: tok/s x the FLOPs counted on nmt-cli's model (FlopCounterMode), peak: best "
        "rate of torch.mm and of oneDNN's packed product (float32 training's on CPUs other than Intel's) on 2 "
        "threads; nmt-cli / toolkit: "
        + RATIO_SPREAD_NOTE)
    report.emit(args.json)


if __name__ == "__main__":
    main()
