"""Sequence-level knowledge distillation: a small, fast student trained on a teacher's translations.

``nmt distill --teacher RUN [--teacher RUN ...] --data PREPARED --out DIR`` runs, into DIR:

1. ``translate``: the teacher (several: their ensemble) translates the training source of
   PREPARED with beam search and an n-best list as long as the beam; of each list it keeps
   the hypothesis closest to the reference by sentence chrF (the sequence-level
   interpolation of Kim & Rush 2016), or the beam's best (``keep="best"``).
   ``translate/train.<tgt>`` is line-exact with the training source (a blank source, or
   one too long for the teacher, gives an empty line) and ``translate/train.scores`` holds
   the teacher's log-probability of each kept line divided by its tokens + 1 (EOS). The
   corpus is translated ``chunk_lines`` lines at a time, each chunk kept in
   ``translate/.chunks`` (:class:`~nmt_cli.resumable.ChunkFolder`) until the stage is
   recorded, so a killed translation resumes at its first unfinished chunk; on the CPU every core decodes
   (``decode.workers``), a GPU when there is one;
2. ``filter``: the worst ``drop_share`` of the pairs by that score are dropped (and every
   empty translation); ``filter/`` holds the kept pairs and the validation and test text
   of PREPARED (the real references). The scores are read ``chunk_lines`` at a time, the
   cutoff found in a bounded number of passes (:func:`worst_share`), so no stage holds the
   corpus;
3. ``shortlist``: the lexical shortlist of the kept pairs (:mod:`nmt_cli.shortlist`): the
   teacher (the ensemble) aligns them, ``chunk_lines`` pairs at a time into
   ``shortlist/train.align.chunks`` (a killed alignment resumes at its first unfinished chunk),
   and each source piece keeps its ``k`` likeliest target pieces, with the ``frequent``
   most frequent ones (``shortlist/shortlist.txt``, Marian's ``50 50`` by default; none
   with ``shortlist=None``);
4. ``prepare``: ``filter/`` prepared with the teacher's SentencePiece model
   (``--tokenizer-from``), so the student's pieces are the teacher's;
5. ``train``: the student (:data:`STUDENT_PRESETS`, or a config file) on that data;
6. ``average``: the student's last ``average_last`` checkpoints averaged (``student/average``);
7. ``export``: that average as an int8 CTranslate2 model (``export/``) with the shortlist as
   its vocabulary map, or recorded as skipped when CTranslate2 is not installed or the
   student is not a softmax Transformer.

Another student of the same corpus (another preset, decoder or config) need not translate
it again: ``corpus_from`` (``--corpus-from DIR0``) takes stages 1-3 from a distillation in
DIR0 made with the same teachers, data and corpus settings, and runs stages 4-7 in DIR.

Every stage is recorded in ``DIR/distill.json`` (:mod:`nmt_cli.stages`: inputs, outputs,
details, seconds) and skipped on a rerun once finished; the settings of the distillation
are recorded there too, and a rerun with other settings is refused rather than mixed into
the same directory. Ctrl-C and SIGTERM leave every file whole: the training stage saves its
step and stops the pipeline, which the same command resumes.

:func:`distill_check` (``nmt distill --check``) runs everything on the synthetic corpus,
with a small teacher trained first in DIR, and scores teacher and student (with and without
the shortlist) on its test split.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Sequence, TextIO

import numpy as np

from nmt_cli.alignment.corpus import link_chunks
from nmt_cli.checkpoint import (checkpoints_to_average, load_checkpoint_config, load_checkpoint_state,
                                resolve_checkpoint, tokenizer_directory, weights_digest, write_average)
from nmt_cli.config import Config, load_config
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import load_translator
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.device import resolve_device
from nmt_cli.errors import InputError, NmtError
from nmt_cli.evaluation.checkpoint_eval import evaluate_split
from nmt_cli.evaluation.metrics import build_metric
from nmt_cli.export import export_ctranslate2
from nmt_cli.fileio import atomic_open
from nmt_cli.progress import Progress, format_duration
from nmt_cli.resumable import CHUNKS, ChunkFolder
from nmt_cli.shortlist import DEFAULT_FREQUENT, DEFAULT_K, write_shortlist
from nmt_cli.shortlist_build import align_in_chunks, shortlist_from_links
from nmt_cli.stages import PipelineRecord, Stage, run_finished, training_seconds
from nmt_cli.textio import CHUNK_LINES, iter_chunks, iter_lines, iter_parallel, one_line
from nmt_cli.tokenization import Tokenizer
from nmt_cli.training import train

__all__ = ["DEFAULT_AVERAGE_LAST", "DEFAULT_DROP_SHARE", "EXPORT_QUANTIZATION", "KEEP_CHOICES", "RECORD",
           "STUDENT_DECODERS", "STUDENT_PRESETS", "DistillOptions", "closest_by_chrf", "distill", "distill_check",
           "export_skip_reason", "machine_cores", "student_config", "WorstShare", "worst_share"]

#: the pipeline's record of its stages (:class:`~nmt_cli.stages.PipelineRecord`), in its directory
RECORD = "distill.json"
DEFAULT_DROP_SHARE = 0.05
DEFAULT_AVERAGE_LAST = 4
EXPORT_QUANTIZATION = "int8"
#: which n-best entry a line keeps: the closest to the reference by chrF, or the beam's best
KEEP_CHOICES = ("closest", "best")

#: student sizes (config overrides on top of the teacher's config, so that positions, norms,
#: dropout, training and decoding settings stay the teacher's): Bergamot's tiny student
#: (6 encoder / 2 decoder layers, d 256, FFN 1536) and a base one (d 512, FFN 2048)
STUDENT_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"model.arch": "transformer", "model.attention_kernel": "softmax", "model.encoder_layers": 6,
             "model.decoder_layers": 2, "model.d_model": 256, "model.ffn_dim": 1536, "model.heads": 8},
    "base": {"model.arch": "transformer", "model.attention_kernel": "softmax", "model.encoder_layers": 6,
             "model.decoder_layers": 2, "model.d_model": 512, "model.ffn_dim": 2048, "model.heads": 8},
}
#: what a preset student does not take from its teacher: it learns plain distilled text from scratch
PRESET_RESETS: dict[str, Any] = {"train.alignment_weight": 0.0, "train.objective": "auto",
                                 "model.alignment_null": False, "train.init_from": "", "train.init_keep": []}
#: the student's decoder self-attention: softmax, or the linear attention of ``linear_transformer``
#: (a constant cost per output token, as Bergamot's SSRU decoder)
STUDENT_DECODERS: dict[str, dict[str, Any]] = {
    "softmax": {},
    "linear": {"model.arch": "linear_transformer", "model.linear_sites": ["decoder_self"]},
}

# stage outputs, relative to the pipeline's directory
TRANSLATED = "translate"
FILTERED = "filter"
PREPARED = "prepared"
STUDENT_RUN = "student/run"
AVERAGED = "student/average"
EXPORTED = "export"
SHORTLISTED = "shortlist/shortlist.txt"
SHORTLIST_LINKS = "shortlist/train.align"
TEACHER = "teacher"  # --check: the teacher trained in DIR

#: --check: the synthetic corpus, the teacher trained on it, and the student's steps (twice the
#: teacher's: its one decoder layer learns this corpus more slowly)
CHECK_DATA: dict[str, Any] = {"data.source": "synthetic", "data.synthetic_train_size": 4000,
                              "data.synthetic_valid_size": 100, "data.synthetic_test_size": 500, "data.vocab_size": 300}
CHECK_TEACHER: dict[str, Any] = {
    "model.d_model": 64, "model.heads": 4, "model.ffn_dim": 256, "model.encoder_layers": 2, "model.decoder_layers": 2,
    "model.dropout": 0.0, "train.max_tokens": 2048, "train.lr": 0.006, "train.warmup_steps": 100,
    "train.max_steps": 600, "train.log_every": 100, "train.valid_every": 600, "train.valid_bleu": False,
    "train.early_stop_metric": "loss", "train.seed": 1, "decode.beam_size": 4}
CHECK_STEPS: dict[str, Any] = {"train.max_steps": 1200, "train.valid_every": 1200, "train.save_every": 100,
                               "train.log_every": 200}
#: --check's student unless one is named: the tiny preset's shape (a deeper encoder, run once per
#: sentence, and a shallower decoder, run once per output token) at the check teacher's width
CHECK_STUDENT: dict[str, Any] = {"model.d_model": 64, "model.heads": 4, "model.ffn_dim": 256,
                                 "model.encoder_layers": 3, "model.decoder_layers": 1}


@dataclass(frozen=True)
class DistillOptions:
    """What a distillation makes (recorded; a rerun must give the same): which hypothesis each
    line keeps, the share of pairs dropped, the beam (None: the teacher's), the student (a
    preset name or a config file), its decoder, the checkpoints averaged, any ``--set``
    overrides of the student's config, the lines translated (and aligned) between resume
    points (and the scores the filter reads at a time), and the shortlist's ``(k, frequent)``
    (None: no shortlist)."""

    keep: str = "closest"
    drop_share: float = DEFAULT_DROP_SHARE
    beam: int | None = None
    student: str | None = None
    student_decoder: str = "softmax"
    average_last: int = DEFAULT_AVERAGE_LAST
    overrides: Mapping[str, Any] = field(default_factory=dict)
    chunk_lines: int = CHUNK_LINES
    shortlist: tuple[int, int] | None = (DEFAULT_K, DEFAULT_FREQUENT)

    def __post_init__(self) -> None:
        if self.keep not in KEEP_CHOICES:
            raise NmtError(f"distill: keep must be one of {', '.join(KEEP_CHOICES)}, not {self.keep!r}")
        if not 0 <= self.drop_share < 1:
            raise NmtError(f"distill: the share of pairs dropped must be in [0, 1), not {self.drop_share}")
        if self.student_decoder not in STUDENT_DECODERS:
            raise NmtError(f"distill: the student decoder must be one of {', '.join(STUDENT_DECODERS)}, "
                           f"not {self.student_decoder!r}")
        if self.average_last < 1 or self.chunk_lines < 1 or (self.beam is not None and self.beam < 1):
            raise NmtError("distill: beam, average_last and chunk_lines must be at least 1")
        if self.shortlist is not None and min(self.shortlist) < 0:
            raise NmtError(f"distill: the shortlist's k and frequent count must be at least 0, not {self.shortlist}")


def machine_cores() -> int:
    """The CPU cores this process may run on: the teacher's decoding workers on the CPU."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def closest_by_chrf(candidates: Sequence[str], reference: str) -> int:
    """The index of the candidate with the highest sentence chrF against ``reference`` (the
    earlier, better ranked one on a tie)."""
    chrf = build_metric("chrf")
    scores = [chrf.sentence_score(candidate, [reference]).score for candidate in candidates]
    return max(range(len(scores)), key=lambda index: (scores[index], -index))


#: bits of the scores' sort keys each pass of :func:`worst_share` settles (4 passes for 64 bits)
SELECT_BITS = 16


@dataclass(frozen=True)
class WorstShare:
    """Which lines the filter drops: every unscored line (NaN: an empty translation), every
    line scored below ``cutoff`` and the first ``ties`` lines scored exactly ``cutoff`` (the
    best score dropped; None: no scored line is dropped)."""

    scored: int
    dropped: int
    cutoff: float | None
    ties: int

    def keep(self, blocks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """For each block of scores, in order, which of its lines are kept (a boolean mask)."""
        ties = self.ties
        for block in blocks:
            keep = ~np.isnan(block)
            if self.cutoff is not None:
                keep &= block > self.cutoff
                equal = np.flatnonzero(block == self.cutoff)
                keep[equal[ties:]] = True  # the later lines of the cutoff's score stay
                ties = max(0, ties - len(equal))
            yield keep


def _sort_keys(scores: np.ndarray) -> np.ndarray:
    """Unsigned keys that sort as the (not NaN) float64 ``scores`` do, -0.0 as 0.0."""
    bits = (scores + 0.0).view(np.uint64)
    return np.where(bits >> np.uint64(63) == 1, ~bits, bits | np.uint64(1 << 63))


def _key_score(key: int) -> float:
    bits = key & ~(1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def worst_share(blocks: Callable[[], Iterable[np.ndarray]], share: float) -> WorstShare:
    """Which lines to drop so that the lowest ``share`` of the scored lines (``floor(share *
    scored)``, the earlier line first on a tie) and every unscored line (NaN) go.

    ``blocks()`` reads the scores again, a block at a time, at each call: the cutoff is found
    without holding them, by radix selection on their sort keys, :data:`SELECT_BITS` bits a
    pass (a histogram of the next bits of the keys that share the bits settled so far): 64 /
    :data:`SELECT_BITS` = 4 passes, the first of which also counts the scored lines, so the
    filter reads the scores 5 times in all (the last to keep the lines)."""
    digits = 1 << SELECT_BITS
    prefix = below = rank = scored = 0
    for shift in range(64 - SELECT_BITS, -1, -SELECT_BITS):
        histogram = np.zeros(digits, dtype=np.int64)
        for block in blocks():
            keys = _sort_keys(block[~np.isnan(block)])
            if shift == 64 - SELECT_BITS:
                scored += len(keys)
            else:
                keys = keys[keys >> np.uint64(shift + SELECT_BITS) == np.uint64(prefix)]
            histogram += np.bincount(((keys >> np.uint64(shift)) & np.uint64(digits - 1)).astype(np.int64),
                                     minlength=digits)
        if shift == 64 - SELECT_BITS:
            rank = math.floor(share * scored + 1e-9)  # the rank (1-based) of the best score dropped
            if rank == 0:
                return WorstShare(scored, 0, None, 0)
        counts = np.cumsum(histogram)
        digit = int(np.searchsorted(counts, rank - below))  # the first digit whose keys reach the rank
        below += int(counts[digit - 1]) if digit else 0
        prefix = (prefix << SELECT_BITS) | digit
    return WorstShare(scored, rank, _key_score(prefix), rank - below)


def student_config(teacher: Config, data: PreparedData, corpus: Path, options: DistillOptions) -> Config:
    """The student's config: a preset's sizes on the teacher's config (or a config file's
    model, training and decoding settings), the data settings ``data`` was prepared with,
    reading the distilled corpus in the folder ``corpus``; its ``train.keep_last`` keeps the
    checkpoints the average stage needs, and training averages none itself."""
    student = options.student or "tiny"
    if student in STUDENT_PRESETS:
        base = teacher.with_overrides({**STUDENT_PRESETS[student], **PRESET_RESETS})
    elif Path(student).is_file():
        base = load_config(student)
    else:
        raise NmtError(f"--student {student}: neither a preset ({', '.join(STUDENT_PRESETS)}) "
                       "nor a config file")
    splits = {f"data.{name}_split": name if name in data.split_names else "" for name in ("train", "valid", "test")}
    corpus_keys = {"data.source": "files", "data.path": str(corpus), "data.hf_config": "", "data.corpora": [],
                   "data.streaming": False,
                   "data.alignment_path": "", "data.src_lang": data.src_lang, "data.tgt_lang": data.tgt_lang,
                   "data.max_train_pairs": 0, "data.max_eval_pairs": 0, **splits}
    config = dataclasses.replace(base, data=data.config.data).with_overrides({
        **corpus_keys, **STUDENT_DECODERS[options.student_decoder], "train.average_last": 0, **options.overrides})
    if config.train.keep_last < options.average_last:
        config = config.with_overrides({"train.keep_last": options.average_last})
    return config


#: the settings that decide the distilled corpus (stages 1-3): a corpus taken from another
#: distillation (``corpus_from``) must have been made with the same
CORPUS_SETTINGS = ("teachers", "data", "keep", "beam", "drop_share", "shortlist")
#: the stages whose outputs are the distilled corpus
CORPUS_STAGES = ("translate", "filter", "shortlist")


def _corpus_parts(shortlist: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The corpus settings and stages a student takes from another distillation: without a
    shortlist of its own, neither the shortlist setting nor its stage (a corpus with one will do)."""
    if shortlist:
        return CORPUS_SETTINGS, CORPUS_STAGES
    return tuple(key for key in CORPUS_SETTINGS if key != "shortlist"), CORPUS_STAGES[:-1]


def distill(teachers: Sequence[str | os.PathLike], data: str | os.PathLike, out_dir: str | os.PathLike,
            options: DistillOptions = DistillOptions(), device: str = "auto", workers: int | None = None,
            progress: bool = True, stream: TextIO | None = None,
            corpus_from: str | os.PathLike | None = None) -> dict:
    """Run (or resume) every stage into ``out_dir``; returns the record of ``distill.json``.

    ``workers``: CPU decoding processes of the translation (None: :func:`machine_cores`; one
    process on a GPU). ``progress``: data preparation's progress on stderr; ``stream``: each
    stage's progress lines (none without one). ``corpus_from``: a distillation directory
    whose corpus stages (translate, filter, shortlist) finished with the same teachers, data
    and corpus settings (:data:`CORPUS_SETTINGS`); its corpus is read from there, and only
    the student's stages run here.
    """
    if not teachers:
        raise NmtError("distill: name at least one teacher (a run or checkpoint directory)")
    teachers = [str(Path(teacher).expanduser().resolve()) for teacher in teachers]
    prepared = PreparedData(Path(data).expanduser().resolve())
    _check_tokenizers(teachers, prepared)
    root = Path(out_dir).expanduser().resolve()
    source = None if corpus_from is None else Path(corpus_from).expanduser().resolve()
    if source == root:
        raise NmtError(f"distill: --corpus-from {source} is the --out directory itself")
    corpus_root = source or root  # where the distilled corpus (filter/, shortlist/) is
    teacher_config = load_checkpoint_config(teachers[0])
    config = student_config(teacher_config, prepared, corpus_root / FILTERED, options)
    beam = options.beam or teacher_config.decode.beam_size
    settings = {"teachers": teachers, "data": str(prepared.path),
                "corpus_from": None if source is None else str(source), "keep": options.keep, "beam": beam,
                "drop_share": options.drop_share, "chunk_lines": options.chunk_lines,
                "student": options.student or "tiny", "student_decoder": options.student_decoder,
                "average_last": options.average_last, "student_config": config.to_dict(),
                "shortlist": None if options.shortlist is None else list(options.shortlist)}
    source_record = None if source is None else _corpus_source(source, settings)
    root.mkdir(parents=True, exist_ok=True)
    record = PipelineRecord(root / RECORD)
    _check_same_settings(record, settings)
    record.save_results(settings=settings)
    say = _teller(stream)
    sources = tuple(f"teacher: {teacher}" for teacher in teachers) + (f"data: {prepared.path}",)

    def run_stage(stage: Stage, work: Callable[[], tuple[float | None, dict]]) -> None:
        """Run ``stage`` unless it has finished; ``work`` returns its seconds (None: as timed here) and details."""
        if record.finished(stage):
            say(f"distill: {stage.name} finished earlier ({record.stages[stage.name].seconds:,.1f} s)")
            return
        say(f"distill: {stage.name} ...")
        started = time.perf_counter()
        seconds, details = work()
        recorded = record.finish(stage, time.perf_counter() - started if seconds is None else seconds, details)
        say(f"distill: {stage.name} done in {format_duration(recorded.seconds)}")

    if source_record is None:
        tgt = f"train.{prepared.tgt_lang}"
        translate_stage = Stage("translate", sources, (f"{TRANSLATED}/{tgt}", f"{TRANSLATED}/train.scores"))
        run_stage(translate_stage, lambda: _translate(teachers, prepared, root / TRANSLATED, beam, options, device,
                                                      workers, stream))
        _translation_chunks(root / TRANSLATED).remove()  # once recorded, the stage's files hold them
        filter_stage = Stage("filter", (f"data: {prepared.path}", *translate_stage.outputs),
                             (f"{FILTERED}/train.{prepared.src_lang}", f"{FILTERED}/{tgt}"))
        run_stage(filter_stage, lambda: _filter(prepared, root, options.drop_share, options.chunk_lines, stream))
        if options.shortlist is not None:
            shortlist_stage = Stage("shortlist", (*filter_stage.outputs, *sources[:-1]), (SHORTLISTED,))
            run_stage(shortlist_stage, lambda: _shortlist(teachers, prepared, root, options, device, stream))
    else:
        for name in _corpus_parts(options.shortlist is not None)[1]:
            seconds_there = source_record.stages[name].seconds
            run_stage(_reused_stage(source_record, name),
                      lambda: (0.0, {"reused_from": str(source), "seconds_there": seconds_there}))
    prepare_stage = Stage("prepare", (str(corpus_root / FILTERED) if source else FILTERED,
                                      f"teacher: {teachers[0]}"), (PREPARED,))
    run_stage(prepare_stage, lambda: _prepare(config, root, teachers[0], progress))
    train_stage = Stage("train", (PREPARED,), (STUDENT_RUN,))
    run_stage(train_stage, lambda: _train(config, root, device, stream))
    average_stage = Stage("average", (STUDENT_RUN,), (AVERAGED,))
    run_stage(average_stage, lambda: _average(root, options.average_last))
    skipped = export_skip_reason(config)
    shortlist = None if options.shortlist is None else corpus_root / SHORTLISTED
    listed = [] if shortlist is None else [str(shortlist) if source else SHORTLISTED]
    export_stage = Stage("export", (AVERAGED, *listed), () if skipped else (EXPORTED,))
    run_stage(export_stage, lambda: _export(root, skipped, shortlist))
    record.save_results(student=str(root / AVERAGED), export=None if skipped else str(root / EXPORTED),
                        shortlist=None if shortlist is None else str(shortlist))
    return record.to_json()


def _corpus_source(source: Path, settings: dict) -> PipelineRecord:
    """The record of the distillation in ``source`` whose corpus a new student takes: it must
    have made its corpus stages with these corpus settings (a one-line error names what differs
    or what has not finished)."""
    record = PipelineRecord(source / RECORD)
    recorded = record.results.get("settings")
    if recorded is None:
        raise NmtError(f"--corpus-from {source}: no {RECORD} with settings there (not an nmt distill directory)")
    if recorded.get("corpus_from"):
        raise NmtError(f"--corpus-from {source}: its corpus came from {recorded['corpus_from']}; name that directory")
    keys, stages = _corpus_parts(settings["shortlist"] is not None)
    for key in keys:
        if json.loads(json.dumps(recorded.get(key))) != json.loads(json.dumps(settings[key])):
            hint = "; --no-shortlist takes a corpus without one" if key == "shortlist" else ""
            raise NmtError(f"--corpus-from {source}: its corpus was distilled with {key} {recorded.get(key)!r}, "
                           f"not {settings[key]!r}{hint}")
    for name in stages:
        stage = record.stages.get(name)
        if stage is None or not record.finished(stage.stage):
            raise NmtError(f"--corpus-from {source}: its {name} stage has not finished; finish that distillation "
                           "first (rerun its nmt distill)")
    return record


def _reused_stage(source: PipelineRecord, name: str) -> Stage:
    """Stage ``name`` of the distillation ``source``, its paths made absolute (they are there, not here)."""
    stage = source.stages[name].stage
    return Stage(name, (f"distillation: {source.root}",), tuple(str(source.root / output) for output in stage.outputs))


def _teller(stream: TextIO | None) -> Callable[[str], None]:
    """Print a line on ``stream`` (nothing without one)."""
    def say(line: str) -> None:
        if stream is not None:
            print(line, file=stream, flush=True)
    return say


def _check_tokenizers(teachers: Sequence[str], data: PreparedData) -> None:
    """Every teacher must use the SentencePiece model ``data`` was prepared with: the student
    is prepared with the teacher's, and learns the pairs the teacher was trained on."""
    for teacher in teachers:
        if Tokenizer.from_directory(tokenizer_directory(teacher)).model_files() != data.tokenizer.model_files():
            raise NmtError(f"{teacher}: its SentencePiece model is not the one {data.path} was prepared with; "
                           "distill the prepared data the teacher was trained on")


def _check_same_settings(record: PipelineRecord, settings: dict) -> None:
    """A directory distilled with other settings is refused, naming the first that differs; a
    config key the recorded student config lacks (one added since) counts as its default."""
    recorded = record.results.get("settings")
    if recorded is not None and "student_config" in recorded:
        recorded = {**recorded, "student_config": Config.from_dict(recorded["student_config"]).to_dict()}
    if recorded is not None and "shortlist" not in recorded:  # recorded before the shortlist stage existed
        recorded = {**recorded, "shortlist": settings["shortlist"]}
    if recorded is not None and "corpus_from" not in recorded:  # recorded before a corpus could be taken
        recorded = {**recorded, "corpus_from": None}
    recorded, current = json.loads(json.dumps(recorded)), json.loads(json.dumps(settings))
    if recorded is not None and recorded != current:
        key, old, new = _first_difference(recorded, current)
        raise NmtError(f"{record.root}: was distilled with {key} {old!r}, not {new!r}; rerun with the same settings "
                       "to resume, or distill into another --out")


def _first_difference(old: dict, new: dict, prefix: str = "") -> tuple[str, Any, Any]:
    """The first key (dotted, through nested dicts) whose value differs, with both values."""
    for key in new:
        before, after = old.get(key), new[key]
        if before != after:
            if isinstance(before, dict) and isinstance(after, dict):
                return _first_difference(before, after, f"{prefix}{key}.")
            return f"{prefix}{key}", before, after
    return prefix.rstrip(".") or "settings", old, new


# ---- translate ------------------------------------------------------------------------------------------


def _translate(teachers: Sequence[str], data: PreparedData, folder: Path, beam: int, options: DistillOptions,
               device: str, workers: int | None, stream: TextIO | None) -> tuple[float, dict]:
    """The teacher's translation of the training source, ``options.chunk_lines`` lines at a
    time, each chunk's kept hypotheses (JSON) in :func:`_translation_chunks` (a chunk finished
    by an earlier run is kept), written as the stage's two line-exact files; the stage's cost
    is what the chunks took, whichever session translated them."""
    resolved = resolve_device(device)
    workers = (workers or machine_cores()) if resolved.type == "cpu" else 1
    src_path, ref_path = data.text_path("train", "src"), data.text_path("train", "tgt")
    total = data.manifest["splits"]["train"]["kept"]
    chunks = _translation_chunks(folder, {"teachers": [{"checkpoint": str(resolve_checkpoint(teacher)),
                                                         "weights_sha256": weights_digest(teacher)} for teacher in teachers],
                                          "beam": beam, "keep": options.keep, "device": str(resolved)})
    translator = None

    def translate(pairs: list[tuple[str, str]], handle: IO[bytes]) -> None:
        nonlocal translator
        if translator is None:  # loaded for the first chunk to translate: a finished translation loads none
            translator = load_translator(teachers, engine="torch", device=resolved, overrides={
                "decode.beam_size": beam, "decode.nbest": beam, "decode.search": "beam", "decode.sampling": "none",
                "decode.on_long_line": "skip", "decode.workers": workers})
        entries = _distilled_entries(translator.translate([source for source, _ in pairs]),
                                     [reference for _, reference in pairs], options.keep)
        handle.write(json.dumps(entries, ensure_ascii=False).encode("utf-8"))

    todo = chunks.remaining(total, options.chunk_lines)
    resumed = f" ({total - todo:,} lines translated before)" if todo < total else ""
    seconds, ranks, empty, long_lines = 0.0, {}, 0, 0
    try:
        with (atomic_open(folder / f"train.{data.tgt_lang}") as text, atomic_open(folder / "train.scores") as scores,
              Progress(f"distill translate{resumed}", total=todo, unit="sentences", enabled=stream is not None,
                       stream=stream) as counter):
            for chunk in chunks.results(_paired_lines(src_path, ref_path, total), options.chunk_lines, translate,
                                        counter):
                seconds += chunk.seconds
                for entry in json.loads(chunk.path.read_text(encoding="utf-8")):
                    text.write(entry["text"] + "\n")
                    scores.write(("" if entry["score"] is None else repr(entry["score"])) + "\n")
                    ranks[entry["rank"]] = ranks.get(entry["rank"], 0) + 1
                    empty += entry["score"] is None
                    long_lines += entry["long"]
    finally:
        if translator is not None:
            translator.close()
    kept_rank = [ranks.get(rank, 0) for rank in range(max(ranks, default=-1) + 1)]
    return seconds, {"sentences": total, "teachers": len(teachers), "beam": beam, "keep": options.keep,
                     "device": str(resolved), "workers": workers, "chunks": -(-total // options.chunk_lines),
                     "kept_rank": kept_rank, "empty": empty, "too_long": long_lines,
                     "sentences_per_second": round(total / max(seconds, 1e-9), 1)}


def _translation_chunks(folder: Path, settings: dict | None = None) -> ChunkFolder:
    """The translate stage's finished chunks, in ``folder/.chunks``, keyed by ``settings``
    (the teachers' checkpoints and their weights' digests, beam, keep and device: what decides the
    translations, so a teacher retrained in place is not mistaken for its old self; None:
    a folder opened to remove them)."""
    return ChunkFolder(folder / CHUNKS, settings, ".json")


def _paired_lines(src_path: Path, ref_path: Path, total: int) -> Iterator[tuple[str, str]]:
    """The training pairs, read lazily, then a check that they were the ``total`` the manifest
    counts; files that do not pair are a one-line error naming them."""
    count = 0
    for count, pair in enumerate(iter_parallel(src_path, ref_path), start=1):
        yield pair
    if count != total:
        raise InputError(src_path, f"has {count:,} lines but the manifest counts {total:,}; prepare the data again")


def _distilled_entries(hypotheses: Sequence[Hypothesis], references: Sequence[str], keep: str) -> list[dict]:
    """Each line's kept hypothesis: its text, its score (log-probability per token, EOS
    counted; None for an empty translation), its rank in the n-best list and whether the
    source was too long for the teacher."""
    entries = []
    for hypothesis, reference in zip(hypotheses, references):
        candidates = hypothesis.nbest or [hypothesis]
        rank = closest_by_chrf([candidate.text for candidate in candidates], reference) if keep == "closest" else 0
        chosen = candidates[rank]
        empty = not chosen.text.strip()
        entries.append({"text": "" if empty else one_line(chosen.text),
                        "score": None if empty else chosen.log_prob / (len(chosen.tokens) + 1),
                        "rank": rank, "long": bool(hypothesis.long_input)})
    return entries


# ---- filter, prepare, train, average, export --------------------------------------------------------------


def _filter(data: PreparedData, root: Path, share: float, block_lines: int,
            stream: TextIO | None) -> tuple[None, dict]:
    """``filter/``: the distilled pairs without the worst ``share`` by teacher score (nor the
    empty ones), in their order; beside them links to the validation and test text of ``data``.
    The scores are read ``block_lines`` at a time (:func:`worst_share`), the text line by line."""
    folder, translated = root / FILTERED, root / TRANSLATED
    scores_path = translated / "train.scores"
    rule = worst_share(lambda: _score_blocks(scores_path, block_lines), share)
    src_name, tgt_name = f"train.{data.src_lang}", f"train.{data.tgt_lang}"
    folder.mkdir(parents=True, exist_ok=True)
    kept = 0
    keep = (line_kept for block in rule.keep(_score_blocks(scores_path, block_lines)) for line_kept in block.tolist())
    with (atomic_open(folder / src_name) as src, atomic_open(folder / tgt_name) as tgt,
          Progress("distill filter", total=rule.scored, enabled=stream is not None, stream=stream) as counter):
        for line_kept, (source, target) in zip(keep, iter_parallel(data.text_path("train", "src"),
                                                                   translated / tgt_name)):
            if line_kept:
                src.write(source + "\n")
                tgt.write(target + "\n")
                kept += 1
            counter.update()
    pairs = counter.count
    for split in ("valid", "test"):
        if split in data.split_names:
            for side in ("src", "tgt"):
                link = folder / data.text_path(split, side).name
                if not link.exists():
                    link.symlink_to(data.text_path(split, side))
    return None, {"pairs": pairs, "empty": pairs - rule.scored, "dropped": rule.dropped,
                  "kept": kept, "drop_share": share, "threshold": rule.cutoff}


def _score_blocks(path: Path, block_lines: int) -> Iterator[np.ndarray]:
    """The translate stage's scores, one per line (an empty line, an empty translation: NaN),
    ``block_lines`` at a time."""
    def values() -> Iterator[float]:
        for number, line in enumerate(iter_lines(path), 1):
            try:
                yield float(line) if line else math.nan
            except ValueError:
                raise InputError(path, f"not a score: {line[:40]!r}", number) from None
    for block in iter_chunks(values(), block_lines):
        yield np.array(block, dtype=np.float64)


def _shortlist(teachers: Sequence[str], data: PreparedData, root: Path, options: DistillOptions, device: str,
               stream: TextIO | None) -> tuple[float, dict]:
    """The kept pairs aligned by the teacher(s), chunk by chunk (resumable), and their shortlist;
    the cost is what the chunks took, whichever session aligned them, and the counting."""
    src, tgt = (root / FILTERED / f"train.{lang}" for lang in (data.src_lang, data.tgt_lang))
    aligned = align_in_chunks(teachers, src, tgt, root / SHORTLIST_LINKS, device=str(resolve_device(device)),
                              chunk_lines=options.chunk_lines, stream=stream)
    began = time.perf_counter()
    k, frequent = options.shortlist
    built = shortlist_from_links(src, tgt, root / SHORTLIST_LINKS, data.tokenizer, k, frequent, stream,
                                 {"aligner": aligned["aligner"]})
    write_shortlist(root / SHORTLISTED, built)
    link_chunks(root / SHORTLIST_LINKS).remove()  # the shortlist holds what they were for
    return aligned["align_seconds"] + time.perf_counter() - began, {
        "k": k, "frequent": frequent, "pairs": built.built_from["pairs"], "piece_links": built.built_from["links"],
        "source_pieces": len(built.translations), "unmatched_pairs": built.built_from["unmatched_pairs"],
        "fingerprint": built.fingerprint}


def _prepare(config: Config, root: Path, teacher: str, progress: bool) -> tuple[float, dict]:
    """The distilled pairs prepared with the teacher's SentencePiece model; the cost is what
    the manifest records (a rerun that reuses the directory keeps it)."""
    manifest = prepare(config, root / PREPARED, progress=progress, tokenizer_from=tokenizer_directory(teacher))
    return manifest["elapsed_seconds"], {
        "pairs": {split: stats["kept"] for split, stats in manifest["splits"].items()},
        "dropped_by_cleaning": manifest["splits"]["train"]["dropped"], "tokenizer": manifest["tokenizer"]["from"]}


def _train(config: Config, root: Path, device: str, stream: TextIO | None) -> tuple[float, dict]:
    """Train (or resume) the student; a run that has made its steps is kept as it is. Its cost
    is the run's training time as its checkpoint records it."""
    run = root / STUDENT_RUN
    stop_reason = "max_steps"
    if not run_finished(run, config.train.max_steps):
        summary = train(config, root / PREPARED, run, device=device, stream=stream)
        if summary.stop_reason == "interrupted":  # Ctrl-C / SIGTERM stops the pipeline, not just this stage
            raise KeyboardInterrupt(f"distill: the student's training interrupted at step {summary.step}")
        stop_reason = summary.stop_reason
    state = load_checkpoint_state(run)
    return state["elapsed_seconds"], {"step": state["step"], "stop_reason": stop_reason,
                                      "arch": config.model.arch, "d_model": config.model.d_model,
                                      "layers": [config.model.encoder_layers, config.model.decoder_layers]}


def _average(root: Path, last: int) -> tuple[None, dict]:
    paths = checkpoints_to_average([root / STUDENT_RUN], last=last)
    write_average(paths, root / AVERAGED)
    return None, {"checkpoints": [path.name for path in paths]}


def export_skip_reason(config: Config) -> str | None:
    """Why the student cannot become a CTranslate2 model here (None: it can)."""
    if importlib.util.find_spec("ctranslate2") is None:
        return "ctranslate2 not installed"
    model = config.model
    if model.arch != "transformer" or model.attention_kernel != "softmax" or model.alignment_null:
        return f"CTranslate2 runs softmax Transformers alone, not this {model.arch} student"
    return None


def _export(root: Path, skipped: str | None, shortlist: Path | None) -> tuple[None, dict]:
    if skipped:
        return None, {"skipped": skipped}
    export_ctranslate2(root / AVERAGED, root / EXPORTED, EXPORT_QUANTIZATION, shortlist=shortlist)
    return None, {"quantization": EXPORT_QUANTIZATION, "vocabulary_map": shortlist is not None}


# ---- --check: the whole pipeline on the synthetic corpus ----------------------------------------------------


def distill_check(out_dir: str | os.PathLike, options: DistillOptions = DistillOptions(), device: str = "auto",
                  workers: int | None = None, progress: bool = True, stream: TextIO | None = None) -> dict:
    """Train a small teacher on the synthetic corpus in ``out_dir/teacher`` (a stage of its
    own), distill it (``options``; :data:`CHECK_STEPS`, and :data:`CHECK_STUDENT`'s sizes when
    it names no student, under its overrides), and score the teacher, the student and its
    export on the test split; returns the record, whose ``check`` holds those scores."""
    root = Path(out_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    record = PipelineRecord(root / RECORD)
    prepared, run = root / TEACHER / "prepared", root / TEACHER / "run"
    stage = Stage("teacher", ("data: synthetic",), (f"{TEACHER}/prepared", f"{TEACHER}/run"))
    if record.finished(stage):
        _teller(stream)(f"distill: teacher finished earlier ({record.stages['teacher'].seconds:,.1f} s)")
    else:
        config = Config().with_overrides({**CHECK_DATA, **CHECK_TEACHER})
        prepare(config, prepared, progress=progress)
        if not run_finished(run, config.train.max_steps):
            summary = train(config, prepared, run, device=device, stream=stream)
            if summary.stop_reason == "interrupted":
                raise KeyboardInterrupt(f"distill --check: the teacher's training interrupted at step {summary.step}")
        record.finish(stage, training_seconds(prepared, run), {"step": load_checkpoint_state(run)["step"]})
    sizes = CHECK_STUDENT if options.student is None else {}
    options = dataclasses.replace(options, overrides={**CHECK_STEPS, **sizes, **options.overrides})
    result = distill([run], prepared, root, options, device, workers, progress, stream)
    models = [("teacher", run, False), ("student", Path(result["student"]), False)]
    if result["shortlist"]:
        models.append(("student shortlist", Path(result["student"]), result["shortlist"]))
    if result["export"]:
        models.append((f"student {EXPORT_QUANTIZATION} CTranslate2", Path(result["export"]), None))
    scores = {name: _test_score(path, prepared, device, workers, shortlist) for name, path, shortlist in models}
    PipelineRecord(root / RECORD).save_results(check=scores)
    return PipelineRecord(root / RECORD).to_json()


def _test_score(model: Path, prepared: Path, device: str, workers: int | None,
                shortlist: str | bool | None = None) -> dict:
    """BLEU on the test split and sentences translated per second, with the model's own
    decoding settings (the CPU decoding workers of the translation stage) and ``shortlist``
    (:func:`~nmt_cli.decoding.load_translator`'s: an export uses its own vocabulary map)."""
    translator = load_translator(model, device=device, overrides={"decode.workers": workers or machine_cores()},
                                 shortlist=shortlist)
    try:
        started = time.perf_counter()
        evaluation = evaluate_split(translator, prepared, "test", metrics=("bleu",))
        seconds = time.perf_counter() - started
    finally:
        close = getattr(translator, "close", None)
        if close is not None:
            close()
    return {"bleu": round(evaluation.scores[0].score, 2),
            "sentences_per_second": round(len(evaluation.hypotheses) / max(seconds, 1e-9), 1)}
