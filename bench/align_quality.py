"""Word alignment quality: nmt-cli attention alignments side by side with eflomal.

For each corpus both systems see the same sentences, the training pairs with the test
pairs appended (without their gold links; word alignment is unsupervised and usually
run on the text it aligns), and both are scored against the gold links of the test
pairs (AER, precision, recall; Och & Ney 2003) by :func:`nmt_cli.alignment.score_files`.

* ``synthetic``: the built-in German-English grammar, whose generator emits the gold
  alignment of every pair (non-monotonic: verb-final subordinate clauses).
* ``de-en``: the 50 Europarl pairs with gold links in ``../shared/data/gold-align/de-en``
  (lowercased, tokenised); training text: Multi30k train, lowercased and tokenised by
  splitting off punctuation, plus the 50 pairs. Out of domain for Multi30k: expect a
  high AER, reported as measured. Skipped with ``--quick``.

Our side runs the CLI, ``nmt prepare`` -> ``nmt train`` -> ``nmt align`` (argmax links,
one per target word, in several layer/shift settings; alignment is cheap once trained).
On the synthetic corpus ``nmt align sweep`` also picks the layer, heads and shift on a
separate gold-aligned development set, and that reading is scored on the test pairs.
A second model is trained in the opposite direction (English -> German) and ``nmt align
--reverse-checkpoint`` symmetrises the two directions' links (Koehn et al. 2003).

eflomal (``bench/.peers/eflomal``, installed by ``python bench/peers/install.py eflomal``)
aligns the same text. Rows are compared like for like: our one-direction readings with
eflomal's forward links (each target word to at most one source word), and each of our
symmetrisations with eflomal's forward and reverse links symmetrised by the same
heuristic (our :func:`nmt_cli.alignment.symmetrize`). Our time is training (both
directions for the symmetrised rows) plus alignment; eflomal's is its whole run, which
always aligns both directions. Training runs once; ``--repeats`` applies to eflomal.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from common import REPO, Report, bench_arguments, fmt, fmt_ratio, repeats_of, run_measured, tail, thread_env
from peers.install import availability, venv_bin

from nmt_cli.alignment import read_alignments, score_files, symmetrize, write_alignments
from nmt_cli.alignment.aer import AlignmentScore
from nmt_cli.config import Config
from nmt_cli.data.synthetic import generate
from nmt_cli.fileio import atomic_write_text

SHARED = REPO.parent / "shared" / "data"
GOLD_DEEN = SHARED / "gold-align" / "de-en"
PUNCTUATION = re.compile(r"""([.,!?;:"()])""")

#: symmetrisations scored for both systems (eflomal also gets "forward")
SYMMETRIZED = ("intersection", "grow-diag-final", "grow-diag-final-and")

# (label, nmt align options): the default reading, then variants worth knowing about
OUR_SETTINGS = (
    ("last layer, no shift (default)", ["--layer", "-1", "--no-shift"]),
    ("last layer, shift-att", ["--layer", "-1", "--shift"]),
    ("all layers, shift-att", ["--layer", "all", "--shift"]),
)


@dataclass(frozen=True)
class Scale:
    """Corpus and model sizes of one mode."""

    synthetic_train: int
    synthetic_test: int
    steps: int
    model: dict
    vocab_size: int
    max_tokens: int


QUICK = Scale(synthetic_train=300, synthetic_test=30, steps=10, vocab_size=200, max_tokens=1024,
              model=dict(arch="transformer", d_model=32, heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=2,
                         dropout=0.0))
FULL = Scale(synthetic_train=20000, synthetic_test=500, steps=2000, vocab_size=4000, max_tokens=4096,
             model=dict(arch="transformer", d_model=128, heads=4, ffn_dim=512, encoder_layers=3, decoder_layers=3,
                        dropout=0.1))


@dataclass(frozen=True)
class Corpus:
    """Raw text folder for ``nmt prepare`` (``train``/``valid``/``test`` ``.de``/``.en``) and the gold links."""

    name: str
    raw: Path
    gold: Path
    dev_gold: Path | None = None  # gold of ``dev.de``/``dev.en``, to pick layer/heads/shift on

    def text(self, split: str, lang: str) -> Path:
        return self.raw / f"{split}.{lang}"


def _write_split(raw: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    atomic_write_text(raw / f"{split}.de", "".join(de + "\n" for de, _ in pairs))
    atomic_write_text(raw / f"{split}.en", "".join(en + "\n" for _, en in pairs))


def synthetic_corpus(work: Path, scale: Scale) -> Corpus:
    """Generated pairs; the test pairs (with gold) are appended to the training text."""
    raw = work / "synthetic" / "raw"
    train = [(p.german, p.english) for p in islice(generate("align-bench:train"), scale.synthetic_train)]
    test = list(islice(generate("align-bench:test"), scale.synthetic_test))
    valid = [(p.german, p.english) for p in islice(generate("align-bench:valid"), 100)]
    dev = list(islice(generate("align-bench:dev"), scale.synthetic_test))
    test_pairs = [(p.german, p.english) for p in test]
    _write_split(raw, "train", train + test_pairs)
    _write_split(raw, "valid", valid)
    _write_split(raw, "test", test_pairs)
    _write_split(raw, "dev", [(p.german, p.english) for p in dev])
    atomic_write_text(raw / "test.gold", "".join(p.alignment + "\n" for p in test))
    atomic_write_text(raw / "dev.gold", "".join(p.alignment + "\n" for p in dev))
    return Corpus("synthetic", raw, raw / "test.gold", raw / "dev.gold")


def _tokenise(line: str) -> str:
    """Lowercase and split off punctuation, close to the gold set's own tokenisation."""
    return " ".join(PUNCTUATION.sub(r" \1 ", line.lower()).split())


def deen_corpus(work: Path) -> Corpus:
    """Multi30k train (tokenised) + the 50 gold Europarl pairs; test = the gold pairs."""
    raw = work / "de-en" / "raw"
    multi30k = SHARED / "multi30k"

    def read(path: Path) -> list[str]:
        return path.read_text(encoding="utf-8").splitlines()

    gold_pairs = list(zip(read(GOLD_DEEN / "src"), read(GOLD_DEEN / "tgt")))
    train = [(_tokenise(de), _tokenise(en)) for de, en in zip(read(multi30k / "train.de"), read(multi30k / "train.en"))]
    valid = [(_tokenise(de), _tokenise(en)) for de, en in zip(read(multi30k / "val.de"), read(multi30k / "val.en"))]
    _write_split(raw, "train", train + gold_pairs)
    _write_split(raw, "valid", valid[:200])
    _write_split(raw, "test", gold_pairs)
    return Corpus("de-en", raw, GOLD_DEEN / "gold")


def _config(corpus: Corpus, scale: Scale, src_lang: str, tgt_lang: str) -> Config:
    return Config.from_dict({
        "data": {"source": "files", "path": str(corpus.raw), "src_lang": src_lang, "tgt_lang": tgt_lang,
                 "valid_split": "valid", "vocab_size": scale.vocab_size, "max_length_ratio": 0},
        "model": scale.model,
        "train": {"max_steps": scale.steps, "max_tokens": scale.max_tokens, "lr": 0.002,
                  "warmup_steps": max(scale.steps // 6, 1), "valid_every": scale.steps, "valid_bleu": False,
                  "early_stop_metric": "loss",
                  "log_every": max(scale.steps // 10, 1), "keep_last": 1, "label_smoothing": 0.1},
    })


def _nmt(*args: object) -> list[str]:
    return [sys.executable, "-m", "nmt_cli", *map(str, args)]


def _run(command: list[str], log: Path):
    """Run a step with two threads; stop the bench with the log's tail when it fails."""
    return _run_to(command, log, None)


def _run_to(command: list[str], log: Path, stdout: Path | None):
    """:func:`_run` with standard output to its own file."""
    measured = run_measured(command, log, env=thread_env(), cwd=REPO, stdout=stdout)
    if measured.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:5])} failed (exit {measured.returncode}):\n{tail(log)}")
    return measured


def _score(corpus: Corpus, hyp: Path) -> AlignmentScore:
    return score_files(corpus.gold, hyp, corpus.text("test", "de"), corpus.text("test", "en"))


def _row(report: Report, corpus: Corpus, system: str, setting: str, score: AlignmentScore, seconds: float,
         eflomal: tuple[AlignmentScore, float] | None) -> None:
    report.add_row(
        corpus.name, system, setting, f"{score.aer:.4f}", f"{score.precision:.4f}", f"{score.recall:.4f}",
        fmt(seconds, 1),
        fmt_ratio(score.aer, eflomal[0].aer) if eflomal else "-",
        fmt_ratio(seconds, eflomal[1]) if eflomal else "-",
    )


def run_eflomal(corpus: Corpus, work: Path, repeats: int) -> dict[str, tuple[AlignmentScore, float]]:
    """eflomal on the training text; the test pairs are its last lines. Median AER over repeats.

    Returns its forward links and every :data:`SYMMETRIZED` combination of forward and reverse.
    """
    tool = venv_bin("eflomal", "eflomal-align")
    test_count = len(read_alignments(corpus.gold))
    lengths = [(len(de.split()), len(en.split())) for de, en in zip(
        corpus.text("test", "de").read_text(encoding="utf-8").splitlines(),
        corpus.text("test", "en").read_text(encoding="utf-8").splitlines())]
    runs: dict[str, list[tuple[AlignmentScore, float]]] = {name: [] for name in ("forward", *SYMMETRIZED)}
    for repeat in range(repeats):
        out = work / corpus.name / "eflomal" / str(repeat)
        forward, reverse = out / "forward.align", out / "reverse.align"
        out.mkdir(parents=True, exist_ok=True)
        measured = _run([str(tool), "-s", corpus.text("train", "de"), "-t", corpus.text("train", "en"),
                         "-f", forward, "-r", reverse, "--overwrite"], out / "eflomal.log")
        forward_links = [pair.sure for pair in read_alignments(forward)[-test_count:]]
        reverse_links = [pair.sure for pair in read_alignments(reverse)[-test_count:]]
        readings = {"forward": forward_links}
        for method in SYMMETRIZED:
            readings[method] = [symmetrize(f, r, method, src_len, tgt_len)
                                for f, r, (src_len, tgt_len) in zip(forward_links, reverse_links, lengths)]
        for name, links in readings.items():
            path = out / f"test.{name}.align"
            write_alignments(path, links)
            runs[name].append((_score(corpus, path), measured.seconds))
    return {name: _median_run(results) for name, results in runs.items()}


def _median_run(results: list[tuple[AlignmentScore, float]]) -> tuple[AlignmentScore, float]:
    """The run with the median AER, and the median time."""
    ordered = sorted(results, key=lambda result: result[0].aer)
    return ordered[len(ordered) // 2][0], statistics.median(seconds for _, seconds in results)


def _train(corpus: Corpus, scale: Scale, base: Path, src_lang: str, tgt_lang: str):
    """``nmt prepare`` + ``nmt train`` of one direction into ``base``; returns the training run."""
    config_path = base / "config.yaml"
    atomic_write_text(config_path, _config(corpus, scale, src_lang, tgt_lang).to_yaml())
    _run(_nmt("prepare", "--config", config_path, "--out", base / "prepared", "--quiet"), base / "prepare.log")
    return _run(_nmt("train", "--config", config_path, "--data", base / "prepared", "--out", base / "run",
                     "--device", "cpu", "--restart"), base / "train.log")


def run_ours(corpus: Corpus, work: Path, scale: Scale,
             fixed_settings: tuple) -> list[tuple[str, str, AlignmentScore, float]]:
    """prepare -> train (both directions) -> (sweep on dev gold) -> align, through the CLI.

    Returns ``(eflomal row to compare with, label, score, seconds)``; seconds add up the
    steps behind the row (the reverse model's training only for symmetrised rows).
    """
    base = work / corpus.name / "nmt"
    trained = _train(corpus, scale, base, "de", "en")
    reverse_base = work / corpus.name / "nmt-reverse"
    reverse = _train(corpus, scale, reverse_base, "en", "de")
    settings = [(label, options, 0.0) for label, options in fixed_settings]
    if corpus.dev_gold is not None:
        ranking = base / "sweep.jsonl"
        swept = _run_to(_nmt("align", "sweep", "--checkpoint", base / "run", "--src", corpus.text("dev", "de"),
                             "--tgt", corpus.text("dev", "en"), "--gold", corpus.dev_gold, "--json"),
                        base / "sweep.log", ranking)
        best = json.loads(ranking.read_text(encoding="utf-8").splitlines()[0])["options"]
        settings.append((f"picked on dev gold: {best}", best.split(), swept.seconds))
    # (eflomal reading, label, nmt align options, seconds spent before aligning)
    readings = [("forward", label, options, trained.seconds + tuning) for label, options, tuning in settings]
    # symmetrise the reading picked on dev gold, else the default one
    label, options, tuning = settings[-1] if corpus.dev_gold is not None else settings[0]
    readings += [(method, f"both directions, {method} ({label})",
                  [*options, "--reverse-checkpoint", reverse_base / "run", "--symmetrize", method],
                  trained.seconds + reverse.seconds + tuning) for method in SYMMETRIZED]
    results = []
    for number, (compared_with, label, options, seconds) in enumerate(readings):
        out = base / f"align-{number}"
        aligned = _run(_nmt("align", "--checkpoint", base / "run", "--src", corpus.text("test", "de"),
                            "--tgt", corpus.text("test", "en"), "--out", out, "--device", "cpu",
                            "--heatmaps", 3, *options), out.with_suffix(".log"))
        results.append((compared_with, label, _score(corpus, out / "alignments.align"), seconds + aligned.seconds))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    work = args.work / "align_quality" / ("quick" if args.quick else "full")
    report = Report(
        script="align_quality",
        title="Word alignment: nmt-cli attention vs eflomal (AER, lower is better)",
        columns=["corpus", "system", "setting", "AER", "precision", "recall", "time s",
                 "AER ratio vs eflomal (same reading)", "time ratio vs eflomal"],
        quick=args.quick,
    )
    corpora = [synthetic_corpus(work, scale)]
    if args.quick:
        report.notes.append("--quick: a tiny synthetic corpus and a few training steps; de-en skipped")
    elif (GOLD_DEEN / "gold").is_file() and (SHARED / "multi30k" / "train.de").is_file():
        corpora.append(deen_corpus(work))
    else:
        report.notes.append(f"de-en skipped: {GOLD_DEEN} or Multi30k not found")
    usable, eflomal_label = availability("eflomal")
    for corpus in corpora:
        eflomal = run_eflomal(corpus, work, repeats_of(args)) if usable else {}
        ours = run_ours(corpus, work, scale, OUR_SETTINGS[:1] if args.quick else OUR_SETTINGS)
        for compared_with, label, score, seconds in ours:
            _row(report, corpus, "nmt-cli", label, score, seconds, eflomal.get(compared_with))
        for name, (score, seconds) in eflomal.items():
            _row(report, corpus, eflomal_label, name, score, seconds, eflomal[name])
        if not usable:
            report.add_row(corpus.name, "eflomal", eflomal_label, *["-"] * 6)
        checked = ours[0][2]
        if checked.out_of_range:
            report.notes.append(f"{corpus.name}: {checked.out_of_range} gold link(s) outside their sentence "
                                f"left out (first at {checked.out_of_range_example})")
    model = scale.model
    report.notes += [
        f"nmt-cli: {model['arch']} {model['encoder_layers']}+{model['decoder_layers']} layers, d_model "
        f"{model['d_model']}, {model['heads']} heads, {scale.steps} steps, trained once; argmax links per target word",
        "the reverse model (en->de) has the same shape and steps; symmetrised rows read it like the forward model",
        f"ratios: ours / eflomal read the same way (one direction: its forward links; symmetrised: the same "
        f"heuristic); eflomal figures are the median of {repeats_of(args)} run(s)",
    ]
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
