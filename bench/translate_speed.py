"""Translation speed: sentences/s and output tokens/s, greedy and beam 5, against the peers.

Models: every toolkit trains its own tiny Transformer (2+2 layers, d 128, ~1M parameters)
on the same Multi30k pieces for the same steps (a brief training: enough for outputs of
a sensible length, not for a good score); CTranslate2 runs the OpenNMT-py model converted.
nmt-cli also decodes its Transformer with two single-threaded workers (``decode.workers``,
like CTranslate2's ``inter_threads``), without the key/value cache (``model.use_cache =
False``), its Bahdanau RNN and its linear Transformer, trained the same way.

Decoding: the 1,000 sentences of Multi30k test2016 (``--quick``: 100), batches of 32
sentences, beam 1 and 5, at most 100 output pieces, 2 CPU threads (CTranslate2 also with
1 thread). Time is each toolkit's own decode time, model load excluded; output pieces are
counted from the hypotheses, so a model that writes longer outputs gets more tokens/s but
fewer sentences/s. Each figure is the median over ``--repeats`` runs; ratios compare
sentences/s with OpenNMT-py and CTranslate2 float32 (2 inter threads) measured in the same run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common import THREADS, Report, bench_arguments, fmt, fmt_ratio, median, project_version, repeats_of
from peers import ctranslate2, ours
from peers.arch import TINY_RNN, TINY_TRANSFORMER, DecodeSpec, TrainSpec
from peers.corpus import export_pieces, prepare_multi30k
from peers.install import install_record
from peers.results import PeerRunFailed, TranslateResult
from peers.selection import TRANSLATION_PEERS, parse_peer_list, peer_label, ready_peers

from nmt_cli.data.prepared import PreparedData

FULL_TRAINING = TrainSpec(steps=800, log_every=100, warmup=400)
QUICK_TRAINING = TrainSpec(steps=6, log_every=2, warmup=100)
QUICK_MAX_LENGTH = 16  # a model trained 6 steps runs every sentence to the limit
BEAMS = (1, 5)
OPENNMT_ROW = "OpenNMT-py"
CT2_ROW = "CTranslate2 float32, 2 inter x 1 intra"


@dataclass
class System:
    """A row of the table: a name, its threads, and how to decode with a given beam."""

    name: str
    threads: str
    decode: Callable[[DecodeSpec, Path], TranslateResult]


def train_once(out_dir: Path, train: Callable[[Path], object]) -> Path:
    """Train into ``out_dir`` unless a previous run left its model there; return the model path."""
    marker = out_dir / "model.path"
    if not marker.is_file():
        result = train(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(result.model))
    return Path(marker.read_text())


OUR_SYSTEMS = ("transformer", "workers", "nocache", "rnn", "linear")


def our_systems(prepared: Path, source_text: Path, models: Path, train_spec: TrainSpec,
                wanted: list[str]) -> list[System]:
    """nmt-cli Transformer with and without cache, Bahdanau RNN, linear Transformer (those ``wanted``)."""
    def trained(name: str, spec, arch: str | None = None) -> Path:
        return train_once(models / f"nmt-cli-{name}",
                          lambda out: ours.train(prepared, spec, train_spec, out, THREADS, arch=arch))

    def system(name: str, model: Callable[[], Path], use_cache: bool = True, workers: int = 1) -> System:
        return System(name, str(THREADS), lambda decode, out: ours.translate(
            model(), source_text, decode, out / re.sub(r"\W+", "_", name), THREADS, use_cache, name, workers))

    def transformer() -> Path:
        return trained("transformer", TINY_TRANSFORMER)

    choices = {
        "transformer": lambda: system("nmt-cli Transformer", transformer),
        "workers": lambda: system(f"nmt-cli Transformer, {THREADS} workers x 1 thread", transformer,
                                  workers=THREADS),
        "nocache": lambda: system("nmt-cli Transformer, no cache", transformer, use_cache=False),
        "rnn": lambda: system("nmt-cli Bahdanau RNN (LSTM)", lambda: trained("rnn", TINY_RNN)),
        "linear": lambda: system("nmt-cli linear Transformer",
                                 lambda: trained("linear", TINY_TRANSFORMER, arch="linear_transformer")),
    }
    return [choices[name]() for name in OUR_SYSTEMS if name in wanted]


def peer_systems(runners: dict, corpus, source_pieces: Path, models: Path, train_spec: TrainSpec) -> list[System]:
    """Each peer's own tiny Transformer; CTranslate2 on the converted OpenNMT-py model."""
    systems = []
    trained = {}
    for name in ("opennmt", "fairseq", "joeynmt"):
        if name not in runners:
            continue
        runner = runners[name]
        trained[name] = train_once(models / name, lambda out, runner=runner: runner.train(
            corpus, TINY_TRANSFORMER, train_spec, out, THREADS))
        systems.append(System(runner.NAME, str(THREADS), lambda decode, out, runner=runner, model=trained[name]:
                              runner.translate(model, source_pieces, decode, out / runner.PEER, THREADS)))
    if "ctranslate2" in runners and "opennmt" in trained:
        converted = ctranslate2.convert(trained["opennmt"], models / "ctranslate2")
        for compute_type in ctranslate2.COMPUTE_TYPES:
            for layout in ctranslate2.THREAD_LAYOUTS:
                systems.append(System(
                    f"CTranslate2 {compute_type}, {layout.describe()}", str(layout.inter * layout.intra),
                    lambda decode, out, c=compute_type, t=layout: ctranslate2.translate(
                        converted, source_pieces, decode, out / "ctranslate2", c, t)))
    return systems


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--peers", default="all",
                        help=f"all, none, or a comma list of {', '.join(TRANSLATION_PEERS)}")
    parser.add_argument("--ours", default=",".join(OUR_SYSTEMS),
                        help=f"comma list of nmt-cli systems: {', '.join(OUR_SYSTEMS)} (default: all)")
    args = parser.parse_args()
    repeats = repeats_of(args)
    wanted = [name for name in args.ours.split(",") if name]
    if set(wanted) - set(OUR_SYSTEMS):
        parser.error(f"--ours: choose from {', '.join(OUR_SYSTEMS)}")
    names = parse_peer_list(args.peers, TRANSLATION_PEERS)
    runners, missing = ready_peers(names, args.quick)
    if "ctranslate2" in runners and "opennmt" not in runners:
        missing["ctranslate2"] = "not run: converts the OpenNMT-py model, which is not available"
        del runners["ctranslate2"]
    train_spec = QUICK_TRAINING if args.quick else FULL_TRAINING

    work = args.work / ("translate_speed-quick" if args.quick else "translate_speed")
    prepared = prepare_multi30k(args.work, args.quick)
    corpus = export_pieces(prepared, args.work / f"{prepared.name}-pieces")
    source_text = PreparedData(prepared).text_path("test", "src")
    systems = (our_systems(prepared, source_text, work / "models", train_spec, wanted)
               + peer_systems(runners, corpus, corpus.text("test", "src"), work / "models", train_spec))

    report = Report("translate_speed", "Translation speed (Multi30k test2016, batches of 32 sentences)",
                    ["system", "threads", "beam", "sent/s", "out tok/s", "output pieces", "peak RSS MB",
                     "vs OpenNMT-py", "vs CT2 float32"], quick=args.quick)
    report.versions = {"nmt-cli": project_version(),
                       **{peer_label(name): str(install_record(name)["versions"]) for name in runners}}
    for beam in BEAMS:
        decode = DecodeSpec(beam=beam, max_length=QUICK_MAX_LENGTH if args.quick else DecodeSpec.max_length)
        runs: dict[str, list[TranslateResult]] = {system.name: [] for system in systems}
        failures: dict[str, str] = {}
        for repeat in range(repeats):
            for system in systems:
                if system.name in failures:
                    continue
                try:
                    runs[system.name].append(system.decode(decode, work / f"decode{repeat}"))
                except PeerRunFailed as error:
                    failures[system.name] = str(error).splitlines()[0]
        speed = {name: median([r.sentences_per_second for r in results]) for name, results in runs.items() if results}
        for system in systems:
            results = runs[system.name]
            if system.name in failures:
                report.add_row(system.name, system.threads, str(beam), f"failed: {failures[system.name]}",
                               "-", "-", "-", "-", "-")
                continue
            report.add_row(system.name, system.threads, str(beam), fmt(speed[system.name], 1),
                           fmt(median([r.tokens_per_second for r in results])), fmt(results[-1].output_tokens),
                           fmt(max(r.measured.peak_rss_mb for r in results)),
                           fmt_ratio(speed[system.name], speed.get(OPENNMT_ROW)),
                           fmt_ratio(speed[system.name], speed.get(CT2_ROW)))
        for name, why in missing.items():
            report.add_row(peer_label(name), "-", str(beam), why, "-", "-", "-", "-", "-")
    report.notes += [
        f"{len(PreparedData(prepared).split('test'))} test sentences; each toolkit's model trained for "
        f"{train_spec.steps} steps of <= {train_spec.max_tokens} tokens on the same pieces; "
        f"median of {repeats} run(s); at most {decode.max_length} output pieces",
        "peak RSS: the decoding process including model load (wait4 maxrss)",
        "ratios: sentences/s of the row divided by that of OpenNMT-py / CTranslate2 float32 (2 inter threads)",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
