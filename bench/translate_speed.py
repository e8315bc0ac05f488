"""Translation speed with equal work: output tokens/s, sentences/s, BLEU and outputs at the length limit.

Every row decodes the same source (the 1,000 sentences of Multi30k test2016; ``--quick``:
100) with the same rule: at most ``DecodeSpec.max_length`` output pieces (an absolute cap,
the one rule every toolkit applies exactly), the GNMT length penalty ``alpha`` 0.6, the
same beam and the same batches (32 sentences, and 64: a decoding step's fixed cost weighs
less in larger batches, for every engine), after a warm-up (OpenNMT-py excepted: ``onmt_translate``
has none). The primary figure is output tokens/s (pieces generated), with sentences/s
beside it; each row shows its BLEU on the test set and the share of outputs that hit the
length limit, so a fast but broken row is visible.

Models: nmt-cli's tiny Transformer (2+2 layers, d 128, ~2M parameters), Bahdanau RNN and
linear Transformer, trained on the same Multi30k pieces for the same steps. The
CTranslate2 rows decode OUR Transformer, exported with ``nmt export`` (float32 weights;
int8 is CTranslate2's load-time quantization), through ``nmt translate``'s CTranslate2
engine. OpenNMT-py trains and decodes its own Transformer of the same shape (pre-norm).
Ratios compare output tokens/s with CTranslate2 at the row's weight type (float32 or int8,
2 inter threads) and with OpenNMT-py of the same beam and batch, measured in the same run;
a ratio to OpenNMT-py is drawn only where its model translates comparably (BLEU and the
share of outputs at the limit close to our Transformer's), since otherwise the two decode
different work. One more row decodes with the settings ``nmt translate`` ships (the
``a * |x| + b`` length rule and the default token budget per batch): it measures the
defaults and is compared with nothing. Each figure is the median of ``--repeats`` runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import sacrebleu

from common import THREADS, Report, bench_arguments, fmt, fmt_ratio_spread, median, project_version, repeats_of
from peers import ours
from peers.arch import TINY_RNN, TINY_TRANSFORMER, DecodeSpec, TrainSpec
from peers.corpus import export_pieces, prepare_multi30k
from peers.install import install_record
from peers.ours import Engine
from peers.results import PeerRunFailed, TranslateResult, read_pieces
from peers.selection import TRANSLATION_PEERS, parse_peer_list, peer_label, ready_peers

from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_write_json

FULL_TRAINING = TrainSpec(steps=800, log_every=100, warmup=400)
QUICK_TRAINING = TrainSpec(steps=6, log_every=2, warmup=100)
QUICK_MAX_LENGTH = 16  # a model trained 6 steps runs every sentence to the limit
BEAMS = (1, 5)
BATCHES = (32, 64)  # sentences per batch
OPENNMT_ROW = "OpenNMT-py"
#: the CTranslate2 row each weight type's ratio is taken against
CT2_BASE = {"float32": "CTranslate2 float32, 2 inter x 1 intra", "int8": "CTranslate2 int8, 2 inter x 1 intra"}
#: OpenNMT-py's rows get a ratio only when its BLEU and its share of outputs at the limit are this close to
#: our Transformer's at the same beam and batch
COMPARABLE_BLEU, COMPARABLE_AT_LIMIT = 1.0, 0.01
SHIPPED_ROW = "nmt-cli Transformer, shipped defaults"
#: (threads, workers, name): two translators of one thread each (like our two workers), one of two threads
#: (like our one process with two threads), and one thread
CT2_LAYOUTS = ((2, 2, "2 inter x 1 intra"), (2, 1, "1 inter x 2 intra"), (1, 1, "1 inter x 1 intra"))


@dataclass
class System:
    """A row of the table: a name, its threads, and how to decode with a given beam."""

    name: str
    threads: str
    decode: Callable[[DecodeSpec, Path], TranslateResult]
    weights: str = "float32"


def train_once(out_dir: Path, train: Callable[[Path], object]) -> Path:
    """Train into ``out_dir`` unless a previous run left its model there; return the model path."""
    marker = out_dir / "model.path"
    if not marker.is_file():
        result = train(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(Path(result.model).resolve()))
    return Path(marker.read_text())


OUR_SYSTEMS = ("transformer", "shipped", "workers", "int8", "nocache", "rnn", "linear", "ctranslate2")


def trained_model(prepared: Path, models: Path, train_spec: TrainSpec, name: str, spec,
                  arch: str | None = None) -> Path:
    """nmt-cli's model ``name`` of this table, trained once under ``models``."""
    return train_once(models / f"nmt-cli-{name}",
                      lambda out: ours.train(prepared, spec, train_spec, out, THREADS, arch=arch))


def work_dir(root: Path, quick: bool) -> Path:
    return root / ("translate_speed-quick" if quick else "translate_speed")


def tiny_transformer(root: Path, quick: bool) -> tuple[Path, Path, Path]:
    """This table's trained tiny Transformer (trained once, shared with decode_profile) and the
    raw source and reference text of the test set."""
    prepared = prepare_multi30k(root, quick)
    checkpoint = trained_model(prepared, work_dir(root, quick) / "models", QUICK_TRAINING if quick else FULL_TRAINING,
                               "transformer", TINY_TRANSFORMER)
    data = PreparedData(prepared)
    return checkpoint, data.text_path("test", "src"), data.text_path("test", "tgt")


def our_systems(prepared: Path, source_text: Path, models: Path, train_spec: TrainSpec,
                wanted: list[str]) -> tuple[list[System], dict[str, str]]:
    """nmt-cli rows (torch fp32/int8, RNN, linear, CTranslate2 on our export) and why any are missing."""
    def trained(name: str, spec, arch: str | None = None) -> Path:
        return trained_model(prepared, models, train_spec, name, spec, arch)

    def system(name: str, model: Callable[[], Path], engine: Engine = Engine(), threads: int = THREADS) -> System:
        return System(name, str(threads), lambda decode, out: ours.translate(
            model(), source_text, decode, out / re.sub(r"\W+", "_", name), threads, name, engine),
            weights="int8" if "int8" in (engine.quantize or "") else "float32")

    transformer = lambda: trained("transformer", TINY_TRANSFORMER)  # noqa: E731
    rnn = lambda: trained("rnn", TINY_RNN)  # noqa: E731
    linear = lambda: trained("linear", TINY_TRANSFORMER, arch="linear_transformer")  # noqa: E731
    workers = f"{THREADS} workers x 1 thread"
    choices = {
        "transformer": [system("nmt-cli Transformer", transformer)],
        "shipped": [system(SHIPPED_ROW, transformer, Engine(shipped_defaults=True))],
        "workers": [system(f"nmt-cli Transformer, {workers}", transformer, Engine(workers=THREADS))],
        "int8": [system("nmt-cli Transformer int8", transformer, Engine(quantize="int8")),
                 system(f"nmt-cli Transformer int8, {workers}", transformer,
                        Engine(quantize="int8", workers=THREADS))],
        "nocache": [system("nmt-cli Transformer, no cache", transformer, Engine(use_cache=False))],
        "rnn": [system("nmt-cli Bahdanau RNN (LSTM)", rnn),
                system("nmt-cli Bahdanau RNN (LSTM) int8", rnn, Engine(quantize="int8"))],
        "linear": [system("nmt-cli linear Transformer", linear),
                   system("nmt-cli linear Transformer int8", linear, Engine(quantize="int8"))],
    }
    systems = [row for name in OUR_SYSTEMS if name in wanted and name in choices for row in choices[name]]
    missing = {}
    if "ctranslate2" in wanted:
        try:
            exported = export_for_ctranslate2(transformer, models / "nmt-cli-transformer-ct2")
        except NmtError as error:
            missing["CTranslate2 (our exported Transformer)"] = f"not run: {error}"
        else:
            for compute in ("float32", "int8"):
                for threads, worker_count, layout in CT2_LAYOUTS:
                    systems.append(system(f"CTranslate2 {compute}, {layout}", lambda: exported,
                                          Engine("ctranslate2", compute, workers=worker_count), threads))
    return systems, missing


def export_for_ctranslate2(model: Callable[[], Path], out_dir: Path) -> Path:
    """``nmt export`` of our Transformer as float32 (once); CTranslate2 quantizes int8 at load."""
    from nmt_cli.export import export_ctranslate2, is_export_dir

    if not is_export_dir(out_dir):
        export_ctranslate2(model(), out_dir, "float32")
    return out_dir


def peer_systems(runners: dict, corpus, source_pieces: Path, models: Path, train_spec: TrainSpec) -> list[System]:
    """OpenNMT-py's own tiny Transformer, decoded by ``onmt_translate`` under the same rule."""
    systems = []
    for name, runner in runners.items():
        model = train_once(models / name, lambda out, runner=runner: runner.train(
            corpus, TINY_TRANSFORMER, train_spec, out, THREADS))
        systems.append(System(runner.NAME, str(THREADS), lambda decode, out, runner=runner, model=model:
                              runner.translate(model, source_pieces, decode, out / runner.PEER, THREADS)))
    return systems


@dataclass
class Quality:
    """What a row's outputs are worth: BLEU and chrF against the references, share at the length limit."""

    bleu: float
    chrf: float
    at_limit: float


def detokenised(pieces: list[list[str]], tokenizer) -> list[str]:
    """Each sentence's pieces (:func:`peers.results.read_pieces`) as text, by our SentencePiece model."""
    return [tokenizer.tgt.decode_pieces(sentence) for sentence in pieces]


def quality(hypotheses: Path, references: list[str], tokenizer, limits: int | Sequence[int]) -> Quality:
    """Detokenise piece output with our SentencePiece model; score with sacreBLEU (``limits``: as
    :func:`text_quality` takes them)."""
    pieces = read_pieces(hypotheses)
    return text_quality(detokenised(pieces, tokenizer), [len(sentence) for sentence in pieces], references, limits)


def kept_quality(folder: Path, score: Callable[[], Quality]) -> Quality:
    """``score()``, kept in ``folder/score.json``: a rerun reads it back instead of translating again."""
    marker = folder / "score.json"
    if marker.is_file():
        return Quality(**json.loads(marker.read_text()))
    scored = score()
    atomic_write_json(marker, asdict(scored))
    return scored


def text_quality(texts: list[str], lengths: list[int], references: list[str],
                 limits: int | Sequence[int]) -> Quality:
    """sacreBLEU BLEU and chrF of detokenised ``texts``; the share of ``lengths`` (in pieces) at
    their length limit: one for every sentence, or each sentence's own."""
    per_sentence = [limits] * len(lengths) if isinstance(limits, int) else limits
    if len(per_sentence) != len(lengths):
        raise ValueError(f"{len(per_sentence)} length limits for {len(lengths)} outputs")
    return Quality(sacrebleu.corpus_bleu(texts, [references]).score, sacrebleu.corpus_chrf(texts, [references]).score,
                   sum(length >= limit for length, limit in zip(lengths, per_sentence)) / max(len(lengths), 1))


def ctranslate2_version() -> str:
    try:
        import ctranslate2
    except ImportError:
        return "not installed (pip install 'nmt-cli[ctranslate2]')"
    return f"ctranslate2 {ctranslate2.__version__} (nmt-cli[ctranslate2] extra)"


COLUMNS = ["system", "threads", "beam", "batch", "out tok/s", "sent/s", "output pieces", "at limit", "BLEU",
           "peak RSS MB", "vs CT2 (same weights)", "vs OpenNMT-py"]


def measure(systems: list[System], decode: DecodeSpec, repeats: int, work: Path
            ) -> tuple[dict[str, list[TranslateResult]], dict[str, str]]:
    """Every system ``repeats`` times, interleaved so a slow spell of the machine hits them all."""
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
    return runs, failures


def comparable(peer: Quality | None, ours: Quality | None) -> bool:
    """Whether a peer's model translates closely enough to ours that their speeds compare equal work."""
    return (peer is not None and ours is not None and abs(peer.bleu - ours.bleu) <= COMPARABLE_BLEU
            and abs(peer.at_limit - ours.at_limit) <= COMPARABLE_AT_LIMIT)


def add_rows(report: Report, systems: list[System], decode: DecodeSpec, runs, failures, score) -> None:
    rates = {name: [r.tokens_per_second for r in results] for name, results in runs.items() if results}
    worth = {name: score(results[-1].hypotheses) for name, results in runs.items() if results}
    opennmt_comparable = comparable(worth.get(OPENNMT_ROW), worth.get("nmt-cli Transformer"))
    for system in systems:
        results = runs[system.name]
        if system.name in failures:
            report.add_row(system.name, system.threads, str(decode.beam), str(decode.batch_sentences),
                           f"failed: {failures[system.name]}", *["-"] * (len(COLUMNS) - 5))
            continue
        rate, quality_of_row = rates[system.name], worth[system.name]
        if system.name == SHIPPED_ROW:  # other work than every other row: measured, compared with nothing
            versus_ct2 = versus_opennmt = "-"
        else:
            versus_ct2 = fmt_ratio_spread(rate, rates.get(CT2_BASE[system.weights], []))
            versus_opennmt = (fmt_ratio_spread(rate, rates.get(OPENNMT_ROW, [])) if opennmt_comparable
                              else "not comparable" if OPENNMT_ROW in worth else "-")
        report.add_row(system.name, system.threads, str(decode.beam), str(decode.batch_sentences), fmt(median(rate)),
                       fmt(median([r.sentences_per_second for r in results]), 1), fmt(results[-1].output_tokens),
                       f"{100 * quality_of_row.at_limit:.1f}%", f"{quality_of_row.bleu:.1f}",
                       fmt(max(r.measured.peak_rss_mb for r in results)), versus_ct2, versus_opennmt)


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--peers", default="all",
                        help=f"all, none, or a comma list of {', '.join(TRANSLATION_PEERS)}")
    parser.add_argument("--ours", default=",".join(OUR_SYSTEMS),
                        help=f"comma list of nmt-cli systems: {', '.join(OUR_SYSTEMS)} (default: all)")
    parser.add_argument("--beams", default=",".join(map(str, BEAMS)), help="comma list of beam sizes")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)), help="comma list of sentences per batch")
    args = parser.parse_args()
    repeats = repeats_of(args)
    wanted = [name for name in args.ours.split(",") if name]
    if set(wanted) - set(OUR_SYSTEMS):
        parser.error(f"--ours: choose from {', '.join(OUR_SYSTEMS)}")
    runners, missing = ready_peers(parse_peer_list(args.peers, TRANSLATION_PEERS), args.quick)
    train_spec = QUICK_TRAINING if args.quick else FULL_TRAINING

    work = work_dir(args.work, args.quick)
    prepared = prepare_multi30k(args.work, args.quick)
    data = PreparedData(prepared)
    corpus = export_pieces(prepared, args.work / f"{prepared.name}-pieces")
    source_text = data.text_path("test", "src")
    references = data.text_path("test", "tgt").read_text(encoding="utf-8").splitlines()
    systems, our_missing = our_systems(prepared, source_text, work / "models", train_spec, wanted)
    systems += peer_systems(runners, corpus, corpus.text("test", "src"), work / "models", train_spec)
    missing = {**our_missing, **{peer_label(name): why for name, why in missing.items()}}

    report = Report("translate_speed", "Translation speed, equal work (Multi30k test2016)",
                    COLUMNS, quick=args.quick)
    report.versions = {"nmt-cli": project_version(), "CTranslate2": ctranslate2_version(),
                       **{peer_label(name): str(install_record(name)["versions"]) for name in runners}}
    max_length = QUICK_MAX_LENGTH if args.quick else DecodeSpec.max_length
    batches, beams = ([int(value) for value in option.split(",")] for option in (args.batches, args.beams))
    for batch in batches:
        for beam in beams:
            decode = DecodeSpec(beam=beam, batch_sentences=batch, max_length=max_length)
            runs, failures = measure(systems, decode, repeats, work / f"batch{batch}")
            add_rows(report, systems, decode, runs, failures,
                     lambda path: quality(path, references, data.tokenizer, max_length))
            for name, why in missing.items():
                report.add_row(name, "-", str(beam), str(batch), why, *["-"] * (len(COLUMNS) - 5))
    report.notes += [
        f"{len(references)} test sentences; every row: at most {max_length} output pieces, GNMT length penalty "
        f"alpha {DecodeSpec.alpha}, length-sorted batches of {' or '.join(map(str, batches))} sentences (batch); "
        f"each model trained {train_spec.steps} steps of <= {train_spec.max_tokens} tokens on the same pieces",
        f"out tok/s and sent/s: median of {repeats} run(s), each timed after a warm-up on the first "
        f"{ours.WARMUP_SENTENCES} sentences (OpenNMT-py: onmt_translate's own time, no warm-up possible); "
        "model load excluded",
        "at limit: share of outputs with the maximum number of pieces; BLEU: sacreBLEU on the detokenised "
        "output of the last run",
        "CTranslate2 rows: our Transformer exported by nmt export, decoded by nmt translate's ctranslate2 "
        "engine (same hypotheses as the torch engine at float32, re-ranked by the GNMT score; an output cut at "
        "the limit is re-scored with score_batch, extra work on the rows' 'at limit' share)",
        f"{SHIPPED_ROW}: nmt translate's own decode settings but for beam and alpha (the a * |x| + b length "
        "rule and the default source-token budget per batch), so its work differs from every other row's: "
        "no ratio is drawn from it",
        "peak RSS: the decoding process including model load, summed over its forked workers where it has "
        "them (shared pages counted once per process: an upper bound); ratios: output tokens/s of the row over "
        "that of CTranslate2 at the row's weight type (float32 or int8, 2 inter threads) / OpenNMT-py at the "
        "same beam and batch: the ratio of the medians, and in brackets the lowest and highest ratio of the "
        "runs made side by side (the systems run in turn, repeat after repeat), which shows how far the "
        "machine's noise moves it",
        f"OpenNMT-py: a ratio only where its model's BLEU is within {COMPARABLE_BLEU:g} of our Transformer's and "
        f"its share of outputs at the limit within {100 * COMPARABLE_AT_LIMIT:g} points, at the same beam and "
        "batch; otherwise 'not comparable': a model that translates worse emits other outputs (more pieces, "
        "more of them cut), so its speed is of other work",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
