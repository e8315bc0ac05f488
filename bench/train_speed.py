"""Training speed: target tokens/s of nmt-cli against OpenNMT-py, fairseq-fixed and JoeyNMT.

Same Multi30k de->en data and SentencePiece pieces (``nmt prepare``, exported as piece
text for the peers), same architecture and sizes, same token batch (padded tokens per
side, fairseq's ``--max-tokens`` meaning, which our trainer also uses), same schedule,
2 CPU threads each. Every toolkit runs as a subprocess of this script and its figure is
its own logged target tokens/s: first logging interval dropped as warm-up, median of the
rest, validation excluded. Each figure is the median over ``--repeats`` runs, the
toolkits taking turns within a repeat so a change of machine load hits all of them.

Each figure is also shown as matrix-product GFLOP/s and as a share of this machine's
matrix-product peak (``model_flops.py``: FLOPs counted on our model, peak timed with
``torch.mm`` on 2 threads), and each model gets a ceiling: the tokens/s of a trainer that
did nothing but its matrix products at that peak, as a multiple of the fastest peer. It
says how far a target ratio is from what the hardware allows.

Models: ``tiny`` (Transformer 2+2 layers, d 128, ~1M parameters), ``base`` (Transformer-base
shape, a few steps), ``base-bf16`` (the same with bf16 autocast, for the toolkits that train
in bf16 on a CPU), ``rnn`` (Bahdanau RNN, LSTM 256) and ``rnn-bf16`` (the same with bf16
autocast). ``--quick``: 2,000 pairs, a few steps, ``tiny`` and ``rnn`` only, installed peers
only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from common import (THREADS, Report, bench_arguments, fmt, fmt_ratio, fresh_dir, median, project_version,
                    repeats_of)
from model_flops import flops_per_target_token, matmul_peak_gflops
from peers import ours
from peers.arch import BASE_TRANSFORMER, TINY_RNN, TINY_TRANSFORMER, RnnSpec, TrainSpec, TransformerSpec
from peers.corpus import export_pieces, prepare_multi30k
from peers.install import install_record
from peers.results import PeerRunFailed, TrainResult
from peers.selection import TRAINING_PEERS, parse_peer_list, peer_label, ready_peers

from nmt_cli.precision import cpu_has_native_bf16


@dataclass(frozen=True)
class Setting:
    """One comparison: an architecture and its step budget (full run, quick run)."""

    name: str
    spec: TransformerSpec | RnnSpec
    full: TrainSpec
    quick: TrainSpec | None


SETTINGS = {
    "tiny": Setting("tiny", TINY_TRANSFORMER, TrainSpec(steps=140, log_every=20, warmup=4000),
                    TrainSpec(steps=8, log_every=2, warmup=100)),
    "base": Setting("base", BASE_TRANSFORMER, TrainSpec(steps=20, log_every=2, warmup=4000), None),
    "base-bf16": Setting("base-bf16", BASE_TRANSFORMER,
                         TrainSpec(steps=20, log_every=2, warmup=4000, precision="bf16"), None),
    "rnn": Setting("rnn", TINY_RNN, TrainSpec(steps=140, log_every=20, warmup=4000),
                   TrainSpec(steps=8, log_every=2, warmup=100)),
    "rnn-bf16": Setting("rnn-bf16", TINY_RNN, TrainSpec(steps=140, log_every=20, warmup=4000, precision="bf16"),
                        None),
}


#: the dtype of the matrix products under each ``TrainSpec.precision``
PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def run_toolkit(runner, corpus, prepared: Path, setting: Setting, train_spec: TrainSpec,
                out_dir: Path) -> TrainResult:
    """One training run of one toolkit (``runner`` is ``peers.ours`` or a peer module)."""
    if runner is ours:
        return ours.train(prepared, setting.spec, train_spec, out_dir, THREADS)
    return runner.train(corpus, setting.spec, train_spec, out_dir, THREADS)


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--peers", default="all", help=f"all, none, or a comma list of {', '.join(TRAINING_PEERS)}")
    parser.add_argument("--models", default=None, help=f"comma list of {', '.join(SETTINGS)} (default: all; "
                        "--quick: tiny,rnn)")
    args = parser.parse_args()
    repeats = repeats_of(args)
    model_names = args.models.split(",") if args.models else (["tiny", "rnn"] if args.quick else list(SETTINGS))
    runners, missing = ready_peers(parse_peer_list(args.peers, TRAINING_PEERS), args.quick)

    work = args.work / "train_speed"
    prepared = prepare_multi30k(args.work, args.quick)
    corpus = export_pieces(prepared, args.work / f"{prepared.name}-pieces")

    report = Report("train_speed", "Training speed (target tokens/s, 2 CPU threads)",
                    ["model", "toolkit", "parameters", "tgt tok/s", "runs (min-max)", "tgt tok/step",
                     "peak RSS MB", "matmul GFLOP/s (of peak)", "nmt-cli / toolkit"], quick=args.quick)
    report.versions = {"nmt-cli": project_version(),
                       **{peer_label(name): str(install_record(name)["versions"]) for name in runners}}
    toolkits = {"nmt-cli": ours, **{peer_label(name): runner for name, runner in runners.items()}}
    fastest_fp32: dict = {}  # architecture -> fastest peer's tokens/s at fp32 in this run
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
        results: dict[str, list[TrainResult]] = {label: [] for label in toolkits}
        utilisations: dict[str, list[float]] = {label: [] for label in toolkits}  # per run: share of the peak
        peaks: list[float] = []
        failures: dict[str, str] = {}
        for repeat in range(repeats):
            for label, runner in toolkits.items():
                if label in failures:
                    continue
                out_dir = fresh_dir(work / model_name / label.split()[0] / f"run{repeat}")
                peaks.append(matmul_peak_gflops(dtype))  # just before the run: the machine's speed drifts
                try:
                    result = run_toolkit(runner, corpus, prepared, setting, train_spec, out_dir)
                    results[label].append(result)
                    utilisations[label].append(result.tokens_per_second * flops / 1e9 / peaks[-1])
                except PeerRunFailed as error:
                    failures[label] = f"failed: {str(error).splitlines()[0]}"
                except ValueError as error:  # a setting the toolkit cannot run
                    failures[label] = f"not run: {error}"
        speeds = {label: median([r.tokens_per_second for r in runs]) for label, runs in results.items() if runs}
        ours_speed = speeds.get("nmt-cli")
        fastest_peer = max((s for label, s in speeds.items() if label != "nmt-cli"), default=None)
        versus = "vs fastest peer"
        if fastest_peer is None and setting.spec in fastest_fp32:  # no peer trains this way: compare with fp32
            fastest_peer, versus = fastest_fp32[setting.spec], "vs fastest peer at fp32"
        elif train_spec.precision == "fp32" and fastest_peer is not None:
            fastest_fp32[setting.spec] = fastest_peer
        fastest_label = max((label for label in speeds if label != "nmt-cli"), key=speeds.get, default=None)
        describe = f"{model_name}: {setting.spec.describe()}" + (
            f", {train_spec.precision}" if train_spec.precision != "fp32" else "")
        for label, runs in results.items():
            if label in failures:
                report.add_row(describe, label, "-", failures[label], "-", "-", "-", "-", "-")
                continue
            per_run = [r.tokens_per_second for r in runs]
            last = runs[-1]
            if label != "nmt-cli":
                ratio = fmt_ratio(ours_speed, speeds[label])
            else:
                ratio = f"{fmt_ratio(ours_speed, fastest_peer)} {versus}" if fastest_peer else "-"
            report.add_row(describe, label, fmt(last.parameters), fmt(speeds[label]),
                           f"{fmt(min(per_run))}-{fmt(max(per_run))}", fmt(last.tokens_per_step),
                           fmt(max(r.measured.peak_rss_mb for r in runs)),
                           f"{fmt(speeds[label] * flops / 1e9)} ({median(utilisations[label]):.0%})", ratio)
        for name, why in missing.items():
            report.add_row(describe, peer_label(name), "-", why, "-", "-", "-", "-", "-")
        for name, runner in runners.items():
            for deviation in runner.deviations(setting.spec):
                report.notes.append(f"{model_name}, {peer_label(name)}: {deviation}")
        ceiling = (f"; a trainer doing only its matrix products at that peak would be "
                   f"{1 / median(utilisations[fastest_label]):.2f}x {fastest_label}" if fastest_label else "")
        report.notes.append(f"{model_name}: {flops / 1e6:.1f} MFLOP of matrix products per target token; "
                            f"{train_spec.precision} matmul peak {fmt(min(peaks))}-{fmt(max(peaks))} GFLOP/s "
                            f"over the runs{ceiling}")
        report.notes.append(f"{model_name}: {train_spec.steps} steps of <= {train_spec.max_tokens} tokens, "
                            f"logged every {train_spec.log_every}; median of {repeats} run(s)")
    report.notes.append("tgt tok/s: each toolkit's own logged figure, first interval dropped, median of the rest; "
                        "peak RSS: the training process (wait4 maxrss); matmul GFLOP/s: tok/s x the FLOPs counted on "
                        "nmt-cli's model (FlopCounterMode), peak: best torch.mm rate on 2 threads")
    report.emit(args.json)


if __name__ == "__main__":
    main()
