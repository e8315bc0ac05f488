"""Word alignment quality: eflomal and nmt-cli's aligners, trained on the same text, scored on gold.

Every system of a corpus sees the same sentences: the training pairs with the test pairs
appended (without their gold links; word alignment is unsupervised and usually run on the
text it aligns). Scores: AER, precision and recall (Och & Ney 2003) by
:func:`nmt_cli.alignment.score_files`.

Corpora:

* ``synthetic``: the built-in German-English grammar, whose generator emits the gold
  alignment of every pair (non-monotonic: verb-final subordinate clauses);
* ``multi30k``: the 50 Europarl pairs with gold links in ``../shared/data/gold-align/de-en``
  (lowercased, tokenised) after Multi30k train, lowercased and tokenised by splitting off
  punctuation like the gold set;
* ``multi30k+tatoeba``: the same with Tatoeba's 165k training pairs (tokenised alike)
  added, to show what more text does.

Systems, each row naming how it reads its alignments:

* eflomal (``bench/.peers/eflomal``, ``python bench/peers/install.py eflomal``): forward,
  reverse and their symmetrisations (our :func:`nmt_cli.alignment.symmetrize`);
* nmt-cli plain attention: a translation model, read as ``nmt align`` reads it by default
  (last decoder layer, heads averaged, argmax), and both directions symmetrised;
* nmt-cli guided by eflomal: a model trained with guided alignment (Garg et al. 2019) on
  eflomal's grow-diag-final-and links of the training text (:data:`GUIDE`, as fairseq's
  joint alignment example symmetrises its guide), with a learned null position for the
  words the guide leaves unaligned (``model.alignment_null``), read by default (its
  supervised head and null); and with an en-de model guided by the same links reversed,
  both directions symmetrised;
* nmt-cli bootstrap (no external aligner): ``nmt align bootstrap``, a model guided by the
  symmetrised attention links of the two plain models (:mod:`nmt_cli.bootstrap`), with the
  null position as the guided-by-eflomal models have it; de-en alone, and with its en-de
  guided stage combined as the command's aligner does (``--symmetrize average``); each
  round of it (round 2 goes on training round 1's pair on the links that pair gives).
* nmt-cli Mask-Align (no external aligner): ``model.arch: mask_align`` (Chen et al. 2021),
  which predicts each target token from the source and the other target tokens, in one
  direction and both directions symmetrised.

Headline rows use the defaults a user gets without gold links (both directions: ``nmt
align``'s default for the models, the average of their weights for guided models with a
null, grow-diag-final for the others; the row names the one used). "tuned" rows pick a reading
(layer, heads, shift, hard-link rule; both directions and eflomal: the symmetrisation, ours
also the average of the two directions' weights at a threshold) on tuning pairs with
gold (de-en: the first 25 gold pairs; synthetic: a separate development set) and score it
on others (de-en: the last 25). Time: eflomal's whole run; ours adds up data preparation,
training (from the run's own clock, so a reused model keeps its cost) and alignment of
every stage behind a row. BLEU: greedy translations of Multi30k test2016 (tokenised like
the training text), for the de-en models.

Models are cached under ``--work``; ``--reuse-models`` keeps runs with the same settings
instead of training them again (a changed setting still retrains; a kept run that stopped
early is resumed, a finished one is left as it is, so the notes can say from its train.log
where it was trained: models trained on a GPU elsewhere and copied in keep that); ``--systems``
runs only some of nmt-cli's systems (eflomal always runs: it is the guide); ``--steps``
sets every model's training steps (the default 2,000 are about 4 epochs of Multi30k+Tatoeba,
short of what the guided and bootstrap models keep gaining from; another number is a variant
of the report, with a section of its own in BENCHMARKS.md); ``--device cuda`` trains,
aligns and translates on a GPU (the times are then the GPU's, as the notes say); ``--seeds N``
trains N guided models per direction (``train.seed`` 1..N) and adds a row aligning with all
of them as one ensemble.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path

from common import (REPO, Report, bench_arguments, fmt, fmt_ratio, machine_description, repeats_of, run_measured, tail,
                    thread_env)
from peers.install import availability, venv_bin

from nmt_cli.alignment import read_alignments, score_files, symmetrize, write_alignments
from nmt_cli.alignment.aer import AlignmentScore
from nmt_cli.alignment.symmetrize import AVERAGE_THRESHOLD
from nmt_cli.alignment.symmetrize import describe as describe_symmetrization
from nmt_cli.bootstrap import ALIGNER_SYMMETRIZATION, Stages, reverse_config
from nmt_cli.checkpoint import list_checkpoints, load_checkpoint_state
from nmt_cli.pharaoh import write_reversed_alignments
from nmt_cli.config import Config, load_config
from nmt_cli.data.cleaning import normalize_text
from nmt_cli.data.synthetic import generate
from nmt_cli.fileio import atomic_write_text

SHARED = REPO.parent / "shared" / "data"
GOLD_DEEN = SHARED / "gold-align" / "de-en"
PUNCTUATION = re.compile(r"""([.,!?;:"()])""")
EFLOMAL_READINGS = ("forward", "reverse", "intersection", "grow-diag-final", "grow-diag-final-and")
SYMMETRIZED = ("intersection", "grow-diag-final", "grow-diag-final-and")
GUIDE = "grow-diag-final-and"  # the eflomal links a guided model learns
#: the setting of a row of ours aligning with both directions; the row adds how they were
#: combined, which ``nmt align`` picks for the models unless the aligner names one
BOTH_DIRECTIONS = "both directions"
AGREE_HEADS = "--agree-heads"
#: the symmetrisations a tuned both-directions row of ours picks from: these link heuristics,
#: and ``average`` at ``nmt align``'s default threshold and each threshold of the scale
SYMMETRIZED_TRIED = ("intersection", "grow-diag", "grow-diag-final", "grow-diag-final-and")


@dataclass(frozen=True)
class Scale:
    """Corpus and model sizes of one mode."""

    synthetic_train: int
    synthetic_test: int
    steps: dict  # corpus name -> training steps
    model: dict
    vocab_size: int
    max_tokens: int
    precision: str
    thresholds: tuple[float, ...] = ()  # tuned readings try argmax links and these thresholds

    @property
    def average_thresholds(self) -> list[float]:
        """The thresholds a tuned ``--symmetrize average`` tries: ``nmt align``'s default and the scale's."""
        return sorted({AVERAGE_THRESHOLD, *self.thresholds})


QUICK = Scale(synthetic_train=300, synthetic_test=30, steps={"synthetic": 10}, vocab_size=200, max_tokens=1024,
              precision="fp32", thresholds=(),
              model=dict(arch="transformer", d_model=32, heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=2,
                         dropout=0.0))
FULL = Scale(synthetic_train=20000, synthetic_test=500,
             steps={"synthetic": 2000, "multi30k": 2000, "multi30k+tatoeba": 2000}, vocab_size=8000,
             max_tokens=4096, precision="bf16", thresholds=(0.1, 0.2, 0.3, 0.4, 0.5),
             model=dict(arch="transformer", d_model=128, heads=4, ffn_dim=512, encoder_layers=3, decoder_layers=3,
                        dropout=0.1))


@dataclass(frozen=True)
class GoldSet:
    """Gold-aligned pairs: source and target text (tokenised) and their links."""

    src: Path
    tgt: Path
    gold: Path
    label: str  # which pairs, for the table


@dataclass(frozen=True)
class Corpus:
    """Raw text for ``nmt prepare`` (``train``/``valid``/``test`` ``.de``/``.en``; the test pairs are
    the last training lines), the gold sets and the text BLEU is measured on."""

    name: str
    raw: Path
    test: GoldSet  # headline rows
    tune: GoldSet  # tuned readings are picked here ...
    report: GoldSet  # ... and scored here
    bleu: tuple[Path, Path] | None = None  # (source, reference), tokenised

    def text(self, split: str, lang: str) -> Path:
        return self.raw / f"{split}.{lang}"


def _write_lines(path: Path, lines) -> None:
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _write_split(raw: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    _write_lines(raw / f"{split}.de", [de for de, _ in pairs])
    _write_lines(raw / f"{split}.en", [en for _, en in pairs])


def _gold_set(raw: Path, name: str, pairs: list[tuple[str, str]], links: list[str], label: str) -> GoldSet:
    _write_split(raw, name, pairs)
    _write_lines(raw / f"{name}.gold", links)
    return GoldSet(raw / f"{name}.de", raw / f"{name}.en", raw / f"{name}.gold", label)


def synthetic_corpus(work: Path, scale: Scale) -> Corpus:
    """Generated pairs; the test pairs (with gold) are appended to the training text."""
    raw = work / "synthetic" / "raw"
    train = [(p.german, p.english) for p in islice(generate("align-bench:train"), scale.synthetic_train)]
    test = list(islice(generate("align-bench:test"), scale.synthetic_test))
    dev = list(islice(generate("align-bench:dev"), scale.synthetic_test))
    valid = [(p.german, p.english) for p in islice(generate("align-bench:valid"), 100)]
    test_pairs = [(p.german, p.english) for p in test]
    _write_split(raw, "train", train + test_pairs)
    _write_split(raw, "valid", valid)
    gold = _gold_set(raw, "test", test_pairs, [p.alignment for p in test], f"test 1-{len(test)}")
    tune = _gold_set(raw, "dev", [(p.german, p.english) for p in dev], [p.alignment for p in dev], "dev")
    return Corpus("synthetic", raw, gold, tune, gold)


def _tokenise(line: str) -> str:
    """``nmt prepare``'s normalisation, then lowercase and split off punctuation, close to the
    gold set's own tokenisation: eflomal and the models count the same words (a soft hyphen
    standing alone in newstest's German is a word to eflomal, nothing after normalisation)."""
    return " ".join(PUNCTUATION.sub(r" \1 ", normalize_text(line).lower()).split())


def _read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _tokenised_pairs(folder: Path, split: str) -> list[tuple[str, str]]:
    return [(_tokenise(de), _tokenise(en)) for de, en in zip(_read(folder / f"{split}.de"), _read(folder / f"{split}.en"))]


def deen_corpus(work: Path, name: str, with_tatoeba: bool) -> Corpus:
    """Multi30k train (+ Tatoeba train) tokenised, then the 50 gold Europarl pairs; test = the gold pairs."""
    raw = work / name / "raw"
    multi30k = SHARED / "multi30k"
    gold_pairs = list(zip(_read(GOLD_DEEN / "src"), _read(GOLD_DEEN / "tgt")))
    links = _read(GOLD_DEEN / "gold")
    train = _tokenised_pairs(multi30k, "train")
    if with_tatoeba:
        train += _tokenised_pairs(SHARED / "tatoeba-deen", "train")
    _write_split(raw, "train", train + gold_pairs)
    _write_split(raw, "valid", _tokenised_pairs(multi30k, "val")[:500])
    half = len(gold_pairs) // 2
    test = _gold_set(raw, "test", gold_pairs, links, f"1-{len(gold_pairs)}")
    tune = _gold_set(raw, "tune", gold_pairs[:half], links[:half], f"1-{half}")
    report = _gold_set(raw, "report", gold_pairs[half:], links[half:], f"{half + 1}-{len(gold_pairs)}")
    _write_split(raw, "bleu", _tokenised_pairs(multi30k, "test2016"))
    return Corpus(name, raw, test, tune, report, (raw / "bleu.de", raw / "bleu.en"))


# ---- running the tools --------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What every run of this bench shares."""

    work: Path
    scale: Scale
    threads: int
    reuse: bool
    repeats: int
    systems: tuple[str, ...]  # of NMT_SYSTEMS
    device: str = "cpu"  # where every nmt-cli step runs (nmt's --device)
    seeds: int = 1  # guided models per direction (train.seed 1..seeds); more than one adds an ensemble row


def _nmt(*args: object) -> list[str]:
    return [sys.executable, "-m", "nmt_cli", *map(str, args)]


def _run(command: list, log: Path, settings: Settings, stdout: Path | None = None):
    """Run a step with the bench's threads; stop the bench with the log's tail when it fails."""
    measured = run_measured(command, log, env=thread_env(settings.threads), cwd=REPO, stdout=stdout)
    if measured.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command[2:5]))} failed (exit {measured.returncode}):\n{tail(log)}")
    return measured


def _score(gold: GoldSet, hyp: Path) -> AlignmentScore:
    return score_files(gold.gold, hyp, gold.src, gold.tgt)


def _config(corpus: Corpus, settings: Settings, **data: object) -> Config:
    scale = settings.scale
    steps = scale.steps[corpus.name]
    return Config.from_dict({
        "data": {"source": "files", "path": str(corpus.raw), "src_lang": "de", "tgt_lang": "en",
                 "valid_split": "valid", "vocab_size": scale.vocab_size, "max_length_ratio": 0, **data},
        "model": scale.model,
        "train": {"max_steps": steps, "max_tokens": scale.max_tokens, "lr": 0.002, "precision": scale.precision,
                  "warmup_steps": max(steps // 8, 1), "valid_every": steps, "valid_bleu": False,
                  "early_stop_metric": "loss", "num_threads": settings.threads,
                  "log_every": max(steps // 20, 1), "keep_last": 1, "label_smoothing": 0.1},
        "decode": {"beam_size": 1},
    })


def _newest_state(run_dir: Path) -> dict | None:
    """The state.json of the run's newest checkpoint (None before its first)."""
    return load_checkpoint_state(run_dir) if list_checkpoints(run_dir) else None


def _run_seconds(run_dir: Path, prepared: Path) -> float:
    """Data preparation plus training time, as the prepared manifest and the run's clock recorded them."""
    state = _newest_state(run_dir)
    manifest = json.loads((prepared / "manifest.json").read_text(encoding="utf-8"))
    return manifest["elapsed_seconds"] + state["elapsed_seconds"]


#: settings that decide how fast a model decodes, never what it learns or outputs: a run
#: whose config differs from the new one only in these is kept by ``--reuse-models``
SPEED_ONLY = (("decode", "max_tokens"),)


def _same_models(stored: Config, wanted: Config) -> bool:
    """Whether ``stored`` trains the models ``wanted`` would, speed-only settings aside."""
    return stored.with_overrides(
        {f"{section}.{key}": getattr(getattr(wanted, section), key) for section, key in SPEED_ONLY}) == wanted


def _kept(settings: Settings, config_path: Path, config: Config) -> bool:
    """With ``--reuse-models``: whether the models built from ``config_path`` can stay (the
    same settings as now, read as a config: a key added since, at its default, changes
    nothing, nor does a :data:`SPEED_ONLY` one); the new settings are written there either way."""
    same = settings.reuse and config_path.is_file() and _same_models(load_config(config_path), config)
    config_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, config.to_yaml())
    return same


def _finished(run_dir: Path, config: Config) -> bool:
    """Whether the run's newest checkpoint has made all of ``config``'s training steps."""
    state = _newest_state(run_dir)
    return state is not None and state["step"] >= config.train.max_steps


def train_model(corpus: Corpus, settings: Settings, base: Path, config: Config) -> float:
    """``nmt prepare`` + ``nmt train`` into ``base``; returns their seconds (see :func:`_run_seconds`).
    A kept run that has made all its steps is not resumed: its train.log keeps naming only
    the sessions that trained it (:func:`training_devices`)."""
    config_path = base / "config.yaml"
    kept = _kept(settings, config_path, config)
    _run(_nmt("prepare", "--config", config_path, "--out", base / "prepared", "--quiet"), base / "prepare.log", settings)
    if not (kept and _finished(base / "run", config)):
        _run(_nmt("train", "--config", config_path, "--data", base / "prepared", "--out", base / "run",
                  "--device", settings.device, *([] if kept else ["--restart"])), base / "train.log", settings)
    return _run_seconds(base / "run", base / "prepared")


TRAINED_ON = re.compile(r"\| device (\S+ x \d+) \|")


def training_devices(runs: list[Path], work: Path) -> str:
    """Where each run trained, from the sessions its train.log names (``nmt train``'s first
    line each time it starts): ``cuda:0 x 1: a/run, b/run; cpu x 1: c/run``."""
    by_device: dict[str, list[str]] = {}
    for run in dict.fromkeys(runs):  # one entry per run, in the order of the rows
        log = run / "train.log"
        found = TRAINED_ON.findall(log.read_text(encoding="utf-8")) if log.is_file() else []
        devices = ", then ".join(dict.fromkeys(found)) or "not recorded"
        by_device.setdefault(devices, []).append(str(run.relative_to(work)))
    return "; ".join(f"{device}: {', '.join(names)}" for device, names in by_device.items())


def bootstrap_models(corpus: Corpus, settings: Settings) -> dict:
    """``nmt align bootstrap`` (forward, reverse, links, guided); its record with each stage's seconds."""
    base = settings.work / corpus.name / "bootstrap"
    config_path = settings.work / corpus.name / "bootstrap.yaml"
    config = _config(corpus, settings).with_overrides({"model.alignment_null": True})  # its guided stage's
    if not _kept(settings, config_path, config) and base.exists():
        shutil.rmtree(base)
    _run(_nmt("align", "bootstrap", "--config", config_path, "--out", base, "--device", settings.device, "--quiet"),
         settings.work / corpus.name / "bootstrap.log", settings)
    return json.loads((base / "bootstrap.json").read_text(encoding="utf-8"))


# ---- eflomal ----------------------------------------------------------------------------------------


def _lengths(src: Path, tgt: Path) -> list[tuple[int, int]]:
    return [(len(de.split()), len(en.split())) for de, en in zip(_read(src), _read(tgt))]


def _eflomal_readings(forward: Path, reverse: Path, lengths: list[tuple[int, int]]) -> dict[str, list]:
    """Forward, reverse and symmetrised links of the last ``len(lengths)`` lines."""
    count = len(lengths)
    forward_links = [pair.sure for pair in read_alignments(forward)[-count:]]
    reverse_links = [pair.sure for pair in read_alignments(reverse)[-count:]]
    readings = {"forward": forward_links, "reverse": reverse_links}
    for method in SYMMETRIZED:
        readings[method] = [symmetrize(f, r, method, src_len, tgt_len)
                            for f, r, (src_len, tgt_len) in zip(forward_links, reverse_links, lengths)]
    return readings


@dataclass(frozen=True)
class EflomalReading:
    """One reading of eflomal's links over its runs."""

    links: list  # of the test pairs, from the run with the median AER
    seconds: float  # the median time of a run
    aers: list[float]  # every run's AER (eflomal takes no seed, so runs differ)


def run_eflomal(corpus: Corpus, settings: Settings) -> tuple[dict[str, EflomalReading], Path]:
    """eflomal on the training text, ``repeats`` times: each reading over the runs; and the
    :data:`GUIDE` links of the whole training text of the first run, written as
    ``<work>/eflomal-links/train.align``."""
    tool = venv_bin("eflomal", "eflomal-align")
    test_lengths = _lengths(corpus.test.src, corpus.test.tgt)
    runs: dict[str, list[tuple[list, float, float]]] = {name: [] for name in EFLOMAL_READINGS}
    out = settings.work / corpus.name / "eflomal"
    for repeat in range(settings.repeats):
        forward, reverse = out / f"{repeat}.forward.align", out / f"{repeat}.reverse.align"
        out.mkdir(parents=True, exist_ok=True)
        measured = _run([str(tool), "-s", corpus.text("train", "de"), "-t", corpus.text("train", "en"),
                         "-f", forward, "-r", reverse, "--overwrite"], out / f"{repeat}.log", settings)
        for name, links in _eflomal_readings(forward, reverse, test_lengths).items():
            aer = _links_score(corpus.test, links).aer
            runs[name].append((links, measured.seconds, aer))
    guide = _write_guide(corpus, out / "0.forward.align", out / "0.reverse.align", settings)
    results = {}
    for name, found in runs.items():
        ordered = sorted(found, key=lambda run: run[2])
        results[name] = EflomalReading(ordered[len(ordered) // 2][0], statistics.median(run[1] for run in found),
                                       [run[2] for run in found])
    return results, guide


def _write_guide(corpus: Corpus, forward: Path, reverse: Path, settings: Settings) -> Path:
    """:data:`GUIDE` links of every training pair: the links a guided model learns. With
    ``--reuse-models`` the links of an earlier run stay (eflomal takes no seed, and a kept
    guided model learned those)."""
    folder = settings.work / corpus.name / "eflomal-links"
    if settings.reuse and (folder / "train.align").is_file():
        return folder
    lengths = _lengths(corpus.text("train", "de"), corpus.text("train", "en"))
    links = _eflomal_readings(forward, reverse, lengths)[GUIDE]
    folder.mkdir(parents=True, exist_ok=True)
    write_alignments(folder / "train.align", links)
    return folder


def reversed_guide(guide: Path) -> Path:
    """The guide's links for the opposite direction (``i-j`` as ``j-i``), in a folder beside it."""
    folder = guide.with_name(guide.name + "-reverse")
    folder.mkdir(parents=True, exist_ok=True)
    write_reversed_alignments(guide / "train.align", folder / "train.align")
    return folder


def _links_score(gold: GoldSet, links: list, offset: int = 0) -> AlignmentScore:
    """Score the links of ``gold``'s pairs, taken from ``links`` starting at ``offset``."""
    from nmt_cli.alignment import score_alignments

    lengths = _lengths(gold.src, gold.tgt)
    return score_alignments(read_alignments(gold.gold), links[offset:offset + len(lengths)], lengths)


# ---- nmt-cli -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aligner:
    """One nmt-cli system: its model(s) and the seconds it took to build them."""

    system: str
    setting: str
    checkpoint: Path
    seconds: float
    reverse: Path | None = None  # a reverse-direction model: the two directions are symmetrised
    translates: bool = True  # its model translates; BLEU is measured for those without a reverse
    symmetrization: str | None = None  # how its default row combines two directions (None: nmt align's default)
    why: str = "nmt align's defaults"  # what its default row's reading is, for the row's setting
    ensemble: tuple[Path, ...] = ()  # more models of the forward direction, aligning as an ensemble with it
    reverse_ensemble: tuple[Path, ...] = ()  # the same for the reverse direction
    agree_heads: bool = False  # each direction read as the two agree most (``nmt align --agree-heads``)
    stage: str = ""  # which of a system's models (a bootstrap round): prefixes every row's setting, tuned ones too

    @property
    def runs(self) -> list[Path]:
        """Every model it aligns with."""
        return [self.checkpoint, *self.ensemble] + ([self.reverse, *self.reverse_ensemble] if self.reverse else [])

    def align_options(self, symmetrization: str | None) -> list:
        """``nmt align``'s model options: every checkpoint, and how two directions combine (None: its default)."""
        models = [option for path in (self.checkpoint, *self.ensemble) for option in ("--checkpoint", path)]
        if self.reverse is None:
            return models
        reverse = [option for path in (self.reverse, *self.reverse_ensemble)
                   for option in ("--reverse-checkpoint", path)]
        return (models + reverse + (["--agree-heads"] if self.agree_heads else [])
                + (["--symmetrize", symmetrization] if symmetrization else []))


def align_and_score(aligner: Aligner, gold: GoldSet, out: Path, settings: Settings, options: tuple = (),
                    symmetrization: str | None = None) -> tuple[AlignmentScore, float]:
    """``nmt align`` of ``gold``'s pairs with ``options`` (none: the defaults), an aligner with a
    reverse model symmetrised by ``symmetrization`` (None: `nmt align`'s default); its score and seconds."""
    measured = _run(_nmt("align", *aligner.align_options(symmetrization), "--src", gold.src, "--tgt", gold.tgt,
                         "--out", out, "--device", settings.device, *options), out.with_suffix(".log"), settings)
    return _score(gold, out / "alignments.align"), measured.seconds


def tuned_reading(aligner: Aligner, corpus: Corpus, out: Path, settings: Settings) -> tuple[str, float]:
    """The ``nmt align`` options with the lowest AER on the tuning pairs: every layer, head and
    shift (``nmt align sweep``) with argmax links and each threshold of the scale."""
    best, seconds = None, 0.0
    rules = [("argmax", 0.2)] + [("threshold", value) for value in settings.scale.thresholds]
    for number, (method, threshold) in enumerate(rules):
        ranking = out / f"sweep-{number}.jsonl"
        measured = _run(_nmt("align", "sweep", "--checkpoint", aligner.checkpoint, "--src", corpus.tune.src,
                             "--tgt", corpus.tune.tgt, "--gold", corpus.tune.gold, "--method", method,
                             "--threshold", threshold, "--json", "--device", settings.device),
                        out / f"sweep-{number}.log", settings, stdout=ranking)
        seconds += measured.seconds
        top = json.loads(ranking.read_text(encoding="utf-8").splitlines()[0])
        options = f"{top['options']} --method {method}" + (f" --threshold {threshold}" if method == "threshold" else "")
        if best is None or top["aer"] < best[1]:
            best = (options, top["aer"])
    return best[0], seconds


def tuned_symmetrization(aligner: Aligner, corpus: Corpus, out: Path,
                         settings: Settings) -> tuple[str, tuple, float]:
    """How to combine the two default readings with the lowest AER on the tuning pairs: each
    link heuristic, and the average of their weights at each threshold (:data:`SYMMETRIZED_TRIED`);
    the symmetrisation, its ``nmt align`` options and the seconds spent."""
    candidates = [(method, ()) for method in SYMMETRIZED_TRIED] + [
        ("average", ("--average-threshold", value)) for value in settings.scale.average_thresholds]
    scored, seconds = [], 0.0
    for number, (method, options) in enumerate(candidates):
        score, spent = align_and_score(aligner, corpus.tune, out / f"symmetrize-{number}", settings, options,
                                       symmetrization=method)
        scored.append((score.aer, number))
        seconds += spent
    method, options = candidates[min(scored)[1]]
    return method, options, seconds


def bleu(aligner: Aligner, corpus: Corpus, out: Path, settings: Settings, baseline: Path | None) -> tuple[str, Path]:
    """Greedy BLEU of the model on ``corpus.bleu`` (with a paired bootstrap p-value against ``baseline``)."""
    source, reference = corpus.bleu
    hypotheses = out / "bleu.hyp"
    _run(_nmt("translate", "--checkpoint", aligner.checkpoint, "--input", source, "--output", hypotheses,
              "--beam", 1, "--device", settings.device), out / "translate.log", settings)
    compared = ["--baseline", baseline, "--bootstrap-samples", 1000] if baseline else []
    report = out / "bleu.json"
    _run(_nmt("evaluate", "--hyp", hypotheses, "--ref", reference, "--metrics", "bleu", "--json", *compared),
         out / "evaluate.log", settings, stdout=report)
    result = json.loads(report.read_text(encoding="utf-8"))
    text = f"{result['scores'][0]['score']:.2f}"
    if baseline:
        text += f" (p={result['bootstrap']['results'][0]['p_value']:.3f})"
    return text, hypotheses


def nmt_aligners(corpus: Corpus, settings: Settings, guide: Path | None, eflomal_seconds: float) -> list[Aligner]:
    """The nmt-cli systems of ``settings.systems``: plain (one and both directions) and
    bootstrapped models, guided by eflomal (when it ran), Mask-Align."""
    plain, booted = bootstrap_aligners(corpus, settings) if "bootstrap" in settings.systems else ([], [])
    guided = guided_aligners(corpus, settings, guide, eflomal_seconds) if (
        guide is not None and "guided" in settings.systems) else []
    masked = mask_aligners(corpus, settings) if "mask-align" in settings.systems else []
    return plain + guided + booted + masked


def bootstrap_aligners(corpus: Corpus, settings: Settings) -> tuple[list[Aligner], list[Aligner]]:
    """``nmt align bootstrap``'s models: its two plain stages (one and both directions) and its
    guided rounds (:func:`bootstrap_rounds`)."""
    record = bootstrap_models(corpus, settings)
    cost = _cumulative_seconds(record)
    root = settings.work / corpus.name / "bootstrap"
    plain = [
        Aligner("nmt-cli plain attention", "default reading (last layer, heads averaged)", root / "forward" / "run",
                cost["forward"]),
        Aligner("nmt-cli plain attention", BOTH_DIRECTIONS, root / "forward" / "run", cost["reverse"],
                reverse=root / "reverse" / "run", translates=False),
        Aligner("nmt-cli plain attention", f"{BOTH_DIRECTIONS} with {AGREE_HEADS}", root / "forward" / "run",
                cost["reverse"], reverse=root / "reverse" / "run", translates=False,
                agree_heads=True, why="nmt align's default symmetrisation"),
    ]
    return plain, bootstrap_rounds(record, root, cost)


def _cumulative_seconds(record: dict) -> dict[str, float]:
    """Each bootstrap stage's cost with every stage before it (bootstrap.json lists them in order)."""
    spent, cost = 0.0, {}
    for name, stage in record["stages"].items():
        spent += stage["seconds"]
        cost[name] = spent
    return cost


def bootstrap_rounds(record: dict, root: Path, cost: dict[str, float]) -> list[Aligner]:
    """Each guided round of a bootstrap: de-en alone, and the pair (one of them the aligner the
    command names), each timed with every stage before it (``cost``)."""
    system = "nmt-cli bootstrap (no external aligner)"
    rows, round_number = [], 1
    while Stages.guided(round_number)[1] in cost:
        forward, reverse = Stages.guided(round_number)
        named = Path(record["aligner"]) == root / forward / "run"
        stage = f"round {round_number}"
        rows += [
            Aligner(system, "default reading (supervised head)", root / forward / "run", cost[forward], stage=stage),
            Aligner(system, BOTH_DIRECTIONS, root / forward / "run", cost[reverse], reverse=root / reverse / "run",
                    translates=False, symmetrization=ALIGNER_SYMMETRIZATION, stage=stage,
                    why="default readings" + ("; the aligner the command names" if named else "")),
        ]
        round_number += 1
    return rows


def train_both_directions(corpus: Corpus, settings: Settings, folders: tuple[str, str],
                          configs: tuple[Config, Config]) -> list[tuple[Path, float]]:
    """The forward and reverse models of ``configs`` trained into ``folders``: each one's run and seconds."""
    bases = [settings.work / corpus.name / folder for folder in folders]
    return [(base / "run", train_model(corpus, settings, base, config)) for base, config in zip(bases, configs)]


def guided_aligners(corpus: Corpus, settings: Settings, guide: Path, eflomal_seconds: float) -> list[Aligner]:
    """Guided by eflomal's links: de-en, and with an en-de model guided by the same links
    reversed, both directions symmetrised (as Garg et al. 2019 report their aligner); with
    ``--seeds N`` > 1, N such pairs (``train.seed`` 1..N) aligning as one ensemble too."""
    forward_config = _config(corpus, settings, alignment_path=str(guide)).with_overrides(
        {"train.alignment_weight": 0.05, "model.alignment_null": True})
    reverse_guided = reverse_config(forward_config).with_overrides(
        {"data.alignment_path": str(reversed_guide(guide))})
    pairs = []  # per seed: ((forward run, seconds), (reverse run, seconds))
    for seed in range(1, settings.seeds + 1):
        suffix, seeded = ("", {}) if seed == 1 else (f"-seed{seed}", {"train.seed": seed})
        pairs.append(train_both_directions(
            corpus, settings, (f"guided-eflomal{suffix}", f"guided-eflomal-reverse{suffix}"),
            (forward_config.with_overrides(seeded), reverse_guided.with_overrides(seeded))))
    (forward, forward_seconds), (reverse, reverse_seconds) = pairs[0]
    system = "nmt-cli guided by eflomal"
    aligners = [
        Aligner(system, "default reading (supervised head)", forward, eflomal_seconds + forward_seconds),
        Aligner(system, BOTH_DIRECTIONS, forward, eflomal_seconds + forward_seconds + reverse_seconds,
                reverse=reverse, translates=False),
    ]
    if len(pairs) > 1:
        seconds = eflomal_seconds + sum(run[1] for pair in pairs for run in pair)
        aligners.append(Aligner(system, f"ensemble of {len(pairs)} seeds per direction, {BOTH_DIRECTIONS}",
                                forward, seconds, reverse=reverse, translates=False,
                                ensemble=tuple(pair[0][0] for pair in pairs[1:]),
                                reverse_ensemble=tuple(pair[1][0] for pair in pairs[1:])))
    return aligners


def mask_aligners(corpus: Corpus, settings: Settings) -> list[Aligner]:
    """Mask-Align (``model.arch: mask_align``) in both directions: the other path without an external aligner."""
    forward_config = _config(corpus, settings).with_overrides({"model.arch": "mask_align"})
    (forward, forward_seconds), (reverse, reverse_seconds) = train_both_directions(
        corpus, settings, ("mask-align-forward", "mask-align-reverse"),
        (forward_config, reverse_config(forward_config)))
    system = "nmt-cli Mask-Align (no external aligner)"
    return [
        Aligner(system, "default reading (its one cross-attention, heads averaged)", forward, forward_seconds,
                translates=False),
        Aligner(system, BOTH_DIRECTIONS, forward, forward_seconds + reverse_seconds, reverse=reverse,
                translates=False),
    ]


# ---- the report ------------------------------------------------------------------------------------------

COLUMNS = ["corpus", "system", "setting", "pairs", "AER", "precision", "recall",
           "wrong links on unaligned words", "time s",
           "AER / eflomal's best symmetrised", "BLEU test2016 (greedy)"]


def _unaligned_share(score: AlignmentScore) -> str:
    """How many of the wrong links are on target words the gold leaves unaligned: ``112/251 (45%)``."""
    share = f" ({100 * score.predicted_unaligned / score.wrong:.0f}%)" if score.wrong else ""
    return f"{score.predicted_unaligned}/{score.wrong}{share}"


def _row(report: Report, corpus: Corpus, system: str, setting: str, gold: GoldSet, score: AlignmentScore,
         seconds: float, best_eflomal: float | None, bleu_text: str = "-") -> None:
    report.add_row(corpus.name, system, setting, gold.label, f"{score.aer:.4f}", f"{score.precision:.4f}",
                   f"{score.recall:.4f}", _unaligned_share(score), fmt(seconds, 1),
                   fmt_ratio(score.aer, best_eflomal), bleu_text)


def eflomal_rows(report: Report, corpus: Corpus, settings: Settings) -> tuple[Path | None, float, dict]:
    """eflomal's rows; returns its guide links, its time and its best symmetrised AER per gold set."""
    usable, label = availability("eflomal")
    if not usable:
        report.add_row(corpus.name, "eflomal", label, *["-"] * (len(COLUMNS) - 3))
        return None, 0.0, {}
    results, guide = run_eflomal(corpus, settings)
    scores = {name: _links_score(corpus.test, reading.links) for name, reading in results.items()}
    best = {corpus.test.label: min(scores[name].aer for name in SYMMETRIZED)}
    seconds = results["forward"].seconds
    for name in EFLOMAL_READINGS:
        _row(report, corpus, label, name, corpus.test, scores[name], seconds, best[corpus.test.label])
    report.notes.append(_eflomal_spread(corpus, results))
    guide_links = [pair.sure for pair in read_alignments(guide / "train.align")[-len(_read(corpus.test.src)):]]
    _row(report, corpus, label, f"{GUIDE}: the links the guided model learned (one run)", corpus.test,
         _links_score(corpus.test, guide_links), seconds, best[corpus.test.label])
    if corpus.report is not corpus.test:  # the tuning and report pairs are test pairs eflomal aligned
        offset = len(_read(corpus.tune.src))
        picked = min(SYMMETRIZED, key=lambda name: _links_score(corpus.tune, results[name].links).aer)
        score = _links_score(corpus.report, results[picked].links, offset)
        best[corpus.report.label] = score.aer
        _row(report, corpus, label, f"tuned: {picked} (picked on pairs {corpus.tune.label})", corpus.report, score,
             seconds, score.aer)
    return guide, seconds, best


def _eflomal_spread(corpus: Corpus, results: dict[str, EflomalReading]) -> str:
    """A note with the lowest and highest AER of each eflomal reading over its runs: how far
    apart two runs of the same aligner land, beside any gap between rows."""
    runs = len(results["forward"].aers)
    spread = ", ".join(f"{name} {min(reading.aers):.4f}-{max(reading.aers):.4f}" for name, reading in results.items())
    return f"{corpus.name}: eflomal's AER on pairs {corpus.test.label} over its {runs} run(s), lowest-highest: {spread}"


def _combined(out: Path) -> str:
    """How ``nmt align`` combined the two directions into ``out``, as its settings.json says."""
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    return describe_symmetrization(settings["symmetrization"], settings.get("average_threshold"))


def nmt_rows(report: Report, corpus: Corpus, settings: Settings, guide: Path | None, eflomal_seconds: float,
             best: dict) -> list[Path]:
    """Every nmt-cli system: its default reading on the test pairs, a reading tuned on gold, BLEU;
    returns the runs of the models behind the rows."""
    baseline, runs = None, []
    for number, aligner in enumerate(nmt_aligners(corpus, settings, guide, eflomal_seconds)):
        runs += aligner.runs
        out = settings.work / corpus.name / "scores" / str(number)
        score, seconds = align_and_score(aligner, corpus.test, out / "default", settings,
                                         symmetrization=aligner.symmetrization)
        bleu_text = "-"
        if corpus.bleu is not None and aligner.translates:
            bleu_text, hypotheses = bleu(aligner, corpus, out, settings, baseline)
            baseline = baseline or hypotheses
        prefix = f"{aligner.stage}: " if aligner.stage else ""
        setting = prefix + aligner.setting
        if aligner.reverse is not None:
            setting += f", {_combined(out / 'default')} ({aligner.why})"
        _row(report, corpus, aligner.system, setting, corpus.test, score, aligner.seconds + seconds,
             best.get(corpus.test.label), bleu_text)
        if aligner.reverse is None:
            options, tuning = tuned_reading(aligner, corpus, out, settings)
            score, seconds = align_and_score(aligner, corpus.report, out / "tuned", settings, tuple(options.split()))
        else:
            method, chosen, tuning = tuned_symmetrization(aligner, corpus, out, settings)
            options = " ".join([f"{aligner.setting}, --symmetrize", method, *map(str, chosen)])
            score, seconds = align_and_score(aligner, corpus.report, out / "tuned", settings, chosen,
                                             symmetrization=method)
        _row(report, corpus, aligner.system, f"tuned: {prefix}{options} (picked on pairs {corpus.tune.label})",
             corpus.report, score, aligner.seconds + tuning + seconds, best.get(corpus.report.label))
    return runs


CORPORA = ("synthetic", "multi30k", "multi30k+tatoeba")
#: the nmt-cli systems --systems can pick (bootstrap brings the plain-attention rows: its first stages)
NMT_SYSTEMS = ("bootstrap", "guided", "mask-align")


def corpus_names(text: str) -> list[str]:
    """The corpora of a ``--corpora`` comma list (whole names: ``multi30k`` is not ``multi30k+tatoeba``)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CORPORA]
    if unknown:
        raise SystemExit(f"--corpora: unknown corpus {unknown[0]!r} (choose from {', '.join(CORPORA)})")
    return names


def system_names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in NMT_SYSTEMS]
    if unknown:
        raise SystemExit(f"--systems: unknown system {unknown[0]!r} (choose from {', '.join(NMT_SYSTEMS)})")
    return names


def corpora(names: list[str], quick: bool, work: Path, scale: Scale, report: Report) -> list[Corpus]:
    found = [synthetic_corpus(work, scale)] if "synthetic" in names else []
    for name, with_tatoeba in (("multi30k", False), ("multi30k+tatoeba", True)):
        if name not in names or quick:
            continue
        needed = [GOLD_DEEN / "gold", SHARED / "multi30k" / "train.de"] + (
            [SHARED / "tatoeba-deen" / "train.de"] if with_tatoeba else [])
        missing = [str(path) for path in needed if not path.is_file()]
        if missing:
            report.notes.append(f"{name} skipped: {missing[0]} not found")
        else:
            found.append(deen_corpus(work, name, with_tatoeba))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="synthetic,multi30k,multi30k+tatoeba",
                        help="comma list of synthetic, multi30k, multi30k+tatoeba (--quick: synthetic only)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every step (default 2)")
    parser.add_argument("--reuse-models", action="store_true",
                        help="keep finished training runs with the same settings instead of training again")
    parser.add_argument("--systems", default=",".join(NMT_SYSTEMS),
                        help="comma list of the nmt-cli systems to run: bootstrap (with the plain-attention rows), "
                             "guided, mask-align; eflomal always runs (default: all)")
    parser.add_argument("--device", default="cpu",
                        help="where nmt-cli trains, aligns and translates: cpu (default), cuda or cuda:N")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="training steps of every nmt-cli model, for every corpus (default: the scale's, "
                             "2,000 each; 2,000 steps are about 4 epochs of multi30k+tatoeba)")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="guided models per direction, each with its own train.seed; N > 1 adds a row aligning "
                             "with all of them as an ensemble (nmt align's repeated --checkpoint) (default 1)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    default_scale = scale = QUICK if args.quick else FULL
    if args.steps is not None:
        if args.steps < 1:
            parser.error(f"--steps must be at least 1, got {args.steps}")
        scale = replace(scale, steps={name: args.steps for name in scale.steps})
    work = (args.work / "align_quality" / ("quick" if args.quick else "full")).resolve()
    settings = Settings(work, scale, args.threads, args.reuse_models, repeats_of(args), system_names(args.systems),
                        args.device, args.seeds)
    report = Report(script="align_quality", columns=COLUMNS, quick=args.quick,
                    title="Word alignment: eflomal and nmt-cli's aligners (AER, lower is better)",
                    variant="" if scale == default_scale else f"{args.steps:,} training steps")
    if args.quick:
        report.notes.append("--quick: a tiny synthetic corpus and a few training steps; de-en skipped")
    load_before = os.getloadavg()
    names = corpus_names(args.corpora)
    runs = []
    for corpus in corpora(names, args.quick, work, scale, report):
        guide, eflomal_seconds, best = eflomal_rows(report, corpus, settings)
        runs += nmt_rows(report, corpus, settings, guide, eflomal_seconds, best)
    report.notes += _notes(scale, settings)
    if runs:
        report.notes.append("where each model trained (the sessions its train.log names; a model kept by "
                            f"--reuse-models keeps its own): {training_devices(runs, work)}")
    left_out = [name for name in CORPORA if name not in names]
    if left_out and not args.quick:
        report.notes.append(f"corpora left out of this run (--corpora): {', '.join(left_out)}")
    systems_left_out = [name for name in NMT_SYSTEMS if name not in settings.systems]
    if systems_left_out:
        report.notes.append(f"nmt-cli systems left out of this run (--systems): {', '.join(systems_left_out)}")
    report.notes.append(f"machine: {machine_description()['cpu']}, {os.cpu_count()} cores; load average (1/5/15 min) "
                        f"{'/'.join(f'{v:.1f}' for v in load_before)} at the start and "
                        f"{'/'.join(f'{v:.1f}' for v in os.getloadavg())} at the end of this run (other work shares "
                        "the machine, so times of models trained in earlier runs and kept by --reuse-models were "
                        "taken under their own load)")
    report.emit(args.json)
    return 0


def _notes(scale: Scale, settings: Settings) -> list[str]:
    model = scale.model
    steps = ", ".join(f"{name} {steps:,}" for name, steps in scale.steps.items())
    return [
        f"every nmt-cli model: {model['arch']} (Mask-Align rows: mask_align) {model['encoder_layers']}+"
        f"{model['decoder_layers']} layers, d_model "
        f"{model['d_model']}, {model['heads']} heads, FFN {model['ffn_dim']}, {scale.precision}, batches of "
        f"{scale.max_tokens:,} tokens; training steps: {steps}; {settings.threads} thread(s) per step; this run trains, "
        f"aligns and translates on device {settings.device}",
        "guided models: train.alignment_weight 0.05 on head 0 of the penultimate decoder layer, learning each "
        "word's links at the step where it is the decoder input (model.alignment_shift, the default); "
        f"guided by eflomal = its {GUIDE} links of the whole training text, with a learned null position for "
        "the words they leave unaligned (model.alignment_null; both directions: an en-de model guided by the same "
        "links reversed as well" + (f"; an ensemble: {settings.seeds} such pairs, train.seed 1-{settings.seeds}, "
                                    "their word weights averaged per direction" if settings.seeds > 1 else "")
        + "); bootstrap = `nmt align bootstrap` with the same settings, the null in its "
        "guided stages (de-en and en-de): round 1 learns the grow-diag-final-and links of its forward and reverse "
        "models (trained without a null: the plain-attention rows), round 2 goes on training round 1's models "
        "(optimizer and schedule kept) for a fifth of the steps on the links of round 1's pair",
        f"{AGREE_HEADS}: each direction read with the head (or head average) and shift on which the two "
        "directions' argmax links agree most over the pairs aligned (no gold links; the bootstrap's links stage "
        "reads its training text so)",
        "tuned rows: the lowest AER on the tuning pairs over every layer, head, head average and shift "
        f"(`nmt align sweep`) with argmax links or a threshold in {', '.join(map(str, scale.thresholds)) or '-'}; "
        f"both-directions rows and eflomal: the best symmetrisation on the tuning pairs (ours: "
        f"{', '.join(SYMMETRIZED_TRIED)} of the default readings, or `--symmetrize average` of their weights at "
        f"a threshold in {', '.join(map(str, scale.average_thresholds))})",
        "wrong links on unaligned words: of the links that are not even possible gold links, how many are on "
        "target words the gold leaves without any link (an argmax reading gives every word a link)",
        f"eflomal figures are the run with the median AER of {settings.repeats} run(s); its time is the median",
        "BLEU: greedy decoding of Multi30k test2016 lowercased and tokenised like the training text; p: paired "
        "bootstrap test against the plain model's translations (1,000 samples)",
    ]


if __name__ == "__main__":
    sys.exit(main())
