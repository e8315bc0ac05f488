"""Distilled students against their teachers: BLEU, chrF and output tokens/s on one core, in one run.

For each teacher (:data:`TEACHERS`: the multi30k-transformer recipe's model, scored on Multi30k
test2016; the general de-en recipe's model, scored on Tatoeba test), under ``--work``:

1. **teacher**: the recipe end to end (``recipes/run_recipe.py``: prepare, train, average,
   translate, evaluate), once; its averaged checkpoint is the teacher;
2. **distill**: ``nmt distill`` of that teacher into the ``tiny`` student, with every default
   (beam and decoding settings the teacher's, the chrF-closest of the n-best list, 5% dropped,
   Marian's 50 50 shortlist, the last 4 checkpoints averaged, an int8 CTranslate2 export with
   the shortlist as its vocabulary map); the student trains with the teacher's training
   settings;
3. **teacher export**: the teacher as an int8 CTranslate2 model, for its fastest engine's row;
   and for the teachers of ``--linear-students`` (default: the general teacher; --quick:
   multi30k), a second student of the same distilled corpus (``nmt distill --corpus-from``)
   whose decoder self-attention is the seeds' linear attention, measured against the
   softmax decoder (torch rows only: CTranslate2 runs softmax Transformers);
4. **rows**: every model and engine translates the test split with the model's own decoding
   settings (``nmt translate``'s: the length limit ``a * |x| + b``, the length penalty, the
   batch budget; the student's are the teacher's, so every row has the same rule) and the beam
   of its row, on one core (1 thread, 1 worker); the first 64 sentences once untimed (warm-up),
   then the whole split timed; the median of ``--repeats`` interleaved runs. BLEU, chrF and the
   share of outputs at the length limit come from the timed outputs. The dev split (the
   recipe's validation text) is translated once per row, untimed, on every core.
5. **the student's best setting**: the fastest student row whose dev BLEU is within 1.0 of
   the teacher's at beam 5 on dev; its test figures are then reported, so the choice of
   setting never looked at the test split (its speed, which the choice also reads, is a
   property of the setting and measured on test).

Every stage is resumable: a finished recipe run, distillation (``nmt distill``'s own stages),
export and scored translation under ``--work`` is kept; the timings are made again every run.
``--stages-only`` runs steps 1-3 and stops before the rows: what the stages write does not
depend on how busy the machine is where their training has a step budget (the general
recipe's; the multi30k recipe's is a time budget), what the rows time does, so a shared
machine can run the first part and an idle one the rest. The 1-minute load average at the
start and end of each run of a stage is kept (``stage_loads.json``) and the notes give it
beside the stages' times, which a shared machine lengthens.
``--quick``: the multi30k teacher only, through ``run_recipe.py --check`` (300 pairs, 3 steps)
and a student of a few steps, at most 64 test sentences, the student greedy only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from common import (REPO, THREADS, Report, bench_arguments, disk_mb, fmt, median, nmt_command, project_version,
                    repeats_of, run_measured, tail)
from peers import ours
from peers.arch import DecodeSpec
from peers.ours import Engine
from peers.results import PeerRunFailed, TranslateResult
from translate_speed import Quality, ctranslate2_version, kept_quality, quality

from nmt_cli.checkpoint import load_checkpoint_config
from nmt_cli.config import DecodeConfig
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding.search import max_output_length
from nmt_cli.fileio import atomic_write_json, atomic_write_text
from nmt_cli.stages import PipelineRecord


@dataclass(frozen=True)
class Teacher:
    """A teacher of this table: the recipe that trains it and what its test split is."""

    recipe: str
    test: str

    def minutes_budget(self) -> float:
        """The recipe's training time budget in minutes (0: none, a step budget)."""
        recipe = yaml.safe_load((REPO / "recipes" / f"{self.recipe}.yaml").read_text(encoding="utf-8"))
        return recipe.get("train", {}).get("max_minutes", 0) or 0


TEACHERS = {"multi30k": Teacher("multi30k-transformer", "Multi30k test2016"),
            "general": Teacher("general-deen-transformer", "Tatoeba test")}
BEAMS, QUICK_BEAMS = (1, 2, 3, 4, 5), (1,)
#: the linear-decoder student's beams: greedy and the teacher's, enough to set it beside the softmax
#: student at both ends of the range without doubling the timed rows
LINEAR_BEAMS = (1, 5)
TEACHER_BEAM = 5
#: the student's BLEU budget below its teacher at beam 5 (issue 54's target)
BLEU_BUDGET = 1.0
#: speed targets of the student's best setting: against the teacher in CTranslate2 int8 and in torch float32
TARGETS = {"teacher CTranslate2 int8": 5.0, "teacher torch float32": 10.0}
QUICK_TEST_SENTENCES = 64
#: the load averages of the stages' runs, in each teacher's folder (:func:`record_load`)
LOADS_FILE = "stage_loads.json"
#: what --quick changes in the student: a few steps, and no length-ratio cleaning, since the
#: quick teacher (3 steps) writes runs of one piece, every one of which that cleaning drops
QUICK_STUDENT = ("data.max_length_ratio=0", "train.max_steps=4", "train.max_minutes=0", "train.valid_every=4",
                 "train.save_every=2", "train.keep_last=4", "train.warmup_steps=2", "train.log_every=1")
COLUMNS = ["teacher", "model", "engine", "shortlist", "beam", "out tok/s", "sent/s", "at limit", "BLEU", "chrF",
           "dev BLEU", "size MB", "vs teacher torch fp32", "vs teacher CT2 int8"]


@dataclass(frozen=True)
class Row:
    """One model decoded one way: its label, model path, engine (shortlist included) and beam."""

    model: str
    path: Path
    engine: Engine
    beam: int

    @property
    def engine_label(self) -> str:
        return ("torch" if self.engine.name == "torch" else "CTranslate2") + f" {self.engine.quantize or 'float32'}"

    @property
    def shortlist_label(self) -> str:
        if self.engine.name == "ctranslate2":
            return "no" if self.engine.shortlist == "none" else "vocabulary map (batch scope)"
        return "no" if self.engine.shortlist is None else "yes"

    @property
    def name(self) -> str:
        return f"{self.model}, {self.engine_label}, shortlist {self.shortlist_label}, beam {self.beam}"

    @property
    def folder(self) -> str:
        return f"{re.sub(r'[^A-Za-z0-9]+', '-', self.model)}.beam{self.beam}.{self.engine.tag()}"


def run_logged(command: list, log: Path, stage: str) -> None:
    """Run ``command`` from the repository root, its output in ``log``, and keep the load average
    at its start and end as a run of ``stage`` (:func:`record_load`); a failure ends the bench
    with the log's tail."""
    started = os.getloadavg()[0]
    measured = run_measured(command, log, cwd=REPO)
    record_load(log.parent / LOADS_FILE, stage, started, os.getloadavg()[0])
    if measured.returncode != 0:
        sys.exit(f"{' '.join(map(str, command[2:5]))} failed (exit {measured.returncode}; {log}):\n{tail(log)}")


def record_load(path: Path, stage: str, start: float, end: float) -> None:
    """Append one run of ``stage`` to ``path``'s {stage: [[load at start, load at end], ...]}."""
    loads = json.loads(path.read_text()) if path.is_file() else {}
    loads.setdefault(stage, []).append([round(start, 2), round(end, 2)])
    atomic_write_json(path, loads)


def stage_loads_note(name: str, root: Path) -> str | None:
    """The load averages the stages under ``root`` ran at, or None when none was kept."""
    path = root / LOADS_FILE
    if not path.is_file():
        return None
    loads = json.loads(path.read_text())
    parts = [f"{stage} {min(min(run) for run in runs):.2f}-{max(max(run) for run in runs):.2f} "
             f"({len(runs)} run{'s' if len(runs) > 1 else ''})" for stage, runs in loads.items()]
    return (f"{name}: 1-minute load average at the start and end of the stages' runs: {', '.join(parts)}; the "
            f"stages use every core, so a load above {THREADS} means they shared the machine and took longer "
            "than they would alone (their outputs do not depend on it where training has a step budget)")


def train_teacher(name: str, teacher: Teacher, root: Path, quick: bool) -> dict:
    """The recipe run once under ``root``; {model, data, minutes, bleu} of its averaged teacher."""
    marker = root / "teacher.json"
    if marker.is_file():
        return json.loads(marker.read_text())
    command = [sys.executable, REPO / "recipes" / "run_recipe.py", teacher.recipe, "--out", root / "recipe",
               *(["--check"] if quick else [])]
    run_logged(command, root / "recipe.log", "teacher")
    out = root / "recipe" / teacher.recipe
    summary = json.loads((out / "summary.json").read_text())
    model = out / "averaged" if (out / "averaged").is_dir() else out / "run"
    record = {"model": str(model), "data": str(out / "data"), "minutes": summary["prepare_train_minutes"],
              "steps": summary["steps"], "parameters": summary["params"], "recipe_bleu": summary["bleu"]}
    atomic_write_json(marker, record)
    return record


def distill_student(teacher: dict, out: Path, quick: bool, stage: str = "distill", options: tuple = ()) -> dict:
    """``nmt distill`` of ``teacher`` into ``out`` with ``options`` (resumes by itself), its load kept
    as a run of ``stage`` and its output in ``<out>.log``; its record (distill.json)."""
    sets = [arg for item in (QUICK_STUDENT if quick else ()) for arg in ("--set", item)]
    command = nmt_command("distill", "--teacher", teacher["model"], "--data", teacher["data"], "--out", out,
                          *options, *(["--chunk-lines", 100] if quick else []), *sets)
    run_logged(command, out.parent / f"{out.name}.log", stage)
    return PipelineRecord(out / "distill.json").to_json()


def export_teacher(teacher: dict, out: Path) -> Path | None:
    """The teacher as an int8 CTranslate2 model (once); None without CTranslate2."""
    if not ctranslate2_version().startswith("ctranslate2 "):
        return None
    if not (out / "model.bin").is_file():
        shutil.rmtree(out, ignore_errors=True)
        run_logged(nmt_command("export", "--checkpoint", teacher["model"], "--out", out, "--quantization", "int8"),
                   out.parent / "export.log", "teacher export")
    return out


#: the model label of the student with a linear-attention decoder
LINEAR_STUDENT = "student, linear decoder"


def rows_of(teacher: dict, student: dict, teacher_export: Path | None, beams: tuple[int, ...],
            linear: dict | None = None) -> list[Row]:
    """The table's rows for one teacher: the teacher at beam 5 in torch float32 and CTranslate2
    int8; the student (``student``: its distill.json) at every beam in torch float32, torch int8
    and CTranslate2 int8, the int8 rows with and without the shortlist; the linear-decoder
    student (``linear``: its distill.json) at those of :data:`LINEAR_BEAMS` in torch float32 and
    torch int8."""
    rows = _teacher_rows(teacher, teacher_export) + _student_rows("student", student, beams)
    linear_beams = tuple(beam for beam in beams if beam in LINEAR_BEAMS)
    return rows + (_student_rows(LINEAR_STUDENT, linear, linear_beams) if linear else [])


def _teacher_rows(teacher: dict, teacher_export: Path | None) -> list[Row]:
    rows = [Row("teacher", Path(teacher["model"]), Engine(shipped_defaults=True), TEACHER_BEAM)]
    if teacher_export is not None:
        exported = Engine("ctranslate2", "int8", shipped_defaults=True, shortlist="none")  # it has no map
        rows.append(Row("teacher", teacher_export, exported, TEACHER_BEAM))
    return rows


def _student_rows(model: str, student: dict, beams: tuple[int, ...]) -> list[Row]:
    """A student's rows (``student``: its distill.json): each of ``beams`` in torch float32 and int8,
    and in CTranslate2 int8 where it was exported; the int8 rows with and without its shortlist."""
    average, shortlist, export = (student.get(key) for key in ("student", "shortlist", "export"))
    torch_lists = [None, shortlist] if shortlist else [None]
    export_lists = ["none", None] if shortlist else ["none"]  # None: the export's own vocabulary map
    rows = []
    for beam in beams:
        rows.append(Row(model, Path(average), Engine(shipped_defaults=True), beam))
        rows += [Row(model, Path(average), Engine(quantize="int8", shipped_defaults=True, shortlist=listed), beam)
                 for listed in torch_lists]
        if export:
            rows += [Row(model, Path(export), Engine("ctranslate2", "int8", shipped_defaults=True,
                                                     shortlist=listed), beam) for listed in export_lists]
    return rows


@dataclass
class RowFigures:
    """A row's figures: its timed test runs, their quality, and its dev BLEU."""

    row: Row
    runs: list[TranslateResult]
    test: Quality | None = None
    dev_bleu: float | None = None
    failed: str = ""

    @property
    def tokens_per_second(self) -> float:
        return median([run.tokens_per_second for run in self.runs])

    @property
    def sentences_per_second(self) -> float:
        return median([run.sentences_per_second for run in self.runs])


@dataclass(frozen=True)
class Split:
    """A split's source text file, references and each sentence's output limit in pieces."""

    source: Path
    references: list[str]
    limits: list[int]


def split_of(data: PreparedData, split: str, decode: DecodeConfig, out: Path, sentences: int | None) -> Split:
    """``split``'s text (its first ``sentences`` lines, written under ``out``, when given) and
    the length limit of each sentence under the teacher's decoding settings, as the translator
    sets it: ``floor(a * |x| + b)`` over the source pieces."""
    source, target = data.text_path(split, "src"), data.text_path(split, "tgt")
    lines = source.read_text(encoding="utf-8").splitlines()
    references = target.read_text(encoding="utf-8").splitlines()
    if sentences is not None:
        lines, references = lines[:sentences], references[:sentences]
        source = out / f"{split}.first{sentences}.{data.src_lang}"
        if not source.is_file():
            atomic_write_text(source, "".join(line + "\n" for line in lines))
    limits = [max_output_length(len(data.tokenizer.encode_src(line)), decode.max_len_a, decode.max_len_b)
              for line in lines]
    return Split(source, references, limits)


def measure(rows: list[Row], test: Split, dev: Split, data: PreparedData, alpha: float, repeats: int,
            out: Path) -> list[RowFigures]:
    """Each row's dev BLEU (untimed, kept), then ``repeats`` interleaved timed runs on the test split
    on one core, scored from the first."""
    measured = [RowFigures(row, []) for row in rows]
    for entry in measured:
        decode = DecodeSpec(beam=entry.row.beam, alpha=alpha)
        folder = out / "dev" / entry.row.folder
        try:
            entry.dev_bleu = kept_quality(folder, lambda: quality(
                ours.translate(entry.row.path, dev.source, decode, folder, THREADS, entry.row.name,
                               entry.row.engine).hypotheses, dev.references, data.tokenizer, dev.limits)).bleu
        except PeerRunFailed as error:
            entry.failed = str(error).splitlines()[0]
    for repeat in range(repeats):
        for entry in (entry for entry in measured if not entry.failed):
            decode = DecodeSpec(beam=entry.row.beam, alpha=alpha)
            try:
                entry.runs.append(ours.translate(entry.row.path, test.source, decode,
                                                 out / f"test{repeat}" / entry.row.folder, 1, entry.row.name,
                                                 entry.row.engine))
            except PeerRunFailed as error:
                entry.failed = str(error).splitlines()[0]
    for entry in (entry for entry in measured if not entry.failed):
        entry.test = quality(entry.runs[0].hypotheses, test.references, data.tokenizer, test.limits)
    return measured


def best_student(measured: list[RowFigures]) -> RowFigures | None:
    """The fastest row of the (softmax) student (output tokens/s on test) whose dev BLEU is within
    :data:`BLEU_BUDGET` of the teacher's in torch float32 at beam 5 on dev; None when none is."""
    teacher = base_row(measured, "torch")
    if teacher is None or teacher.dev_bleu is None:
        return None
    within = [entry for entry in measured if entry.row.model == "student" and not entry.failed
              and entry.dev_bleu is not None and entry.dev_bleu >= teacher.dev_bleu - BLEU_BUDGET]
    return max(within, key=lambda entry: entry.tokens_per_second, default=None)


def base_row(measured: list[RowFigures], engine: str) -> RowFigures | None:
    """The teacher's row in ``engine`` (torch: float32; ctranslate2: int8), when it ran."""
    return next((entry for entry in measured if entry.row.model == "teacher" and entry.row.engine.name == engine
                 and not entry.failed), None)


def ratio(entry: RowFigures, base: RowFigures | None) -> str:
    """Output tokens/s against ``base``'s, with the sentence rate's ratio in brackets."""
    if base is None or entry is base or not entry.runs or not base.runs:
        return "-"
    return (f"{entry.tokens_per_second / base.tokens_per_second:.2f}x "
            f"({entry.sentences_per_second / base.sentences_per_second:.2f}x sent)")


def add_rows(report: Report, name: str, measured: list[RowFigures]) -> None:
    torch_base, ct2_base = base_row(measured, "torch"), base_row(measured, "ctranslate2")
    for entry in measured:
        row = entry.row
        head = [name, row.model, row.engine_label, row.shortlist_label, str(row.beam)]
        if entry.failed:
            report.add_row(*head, f"failed: {entry.failed}", *["-"] * (len(COLUMNS) - 6))
            continue
        report.add_row(*head, fmt(entry.tokens_per_second), fmt(entry.sentences_per_second, 1),
                       f"{entry.test.at_limit:.1%}", fmt(entry.test.bleu, 1), fmt(entry.test.chrf, 1),
                       fmt(entry.dev_bleu, 1), fmt(disk_mb(row.path), 1), ratio(entry, torch_base),
                       ratio(entry, ct2_base))


def linear_notes(name: str, linear: dict, measured: list[RowFigures]) -> list[str]:
    """The linear-decoder student against the softmax one: its own stages, and per beam its BLEU
    and torch output tokens/s (float32 and int8, no shortlist) beside the softmax student's."""
    stages = ", ".join(f"{stage} {record['seconds'] / 60:,.1f} min" + (" (reused)" if "reused_from" in record else "")
                       for stage, record in linear.get("stages", {}).items())
    settings = linear.get("settings", {})
    model = settings.get("student_config", {}).get("model", {})
    sites = ", ".join(model.get("linear_sites") or [])
    notes = [f"{name}: {LINEAR_STUDENT} = the {settings.get('student')} preset with model.arch {model.get('arch')} "
             f"and linear attention at model.linear_sites [{sites}], trained on the softmax "
             f"student's distilled corpus (nmt distill --corpus-from; the corpus stages reused, 0 min here); its "
             f"stages: {stages}"]
    figures = {(entry.row.model, entry.row.engine_label, entry.row.beam): entry for entry in measured
               if not entry.failed and entry.row.engine.shortlist is None and entry.row.engine.name == "torch"}
    pairs = []
    for (model, engine, beam), entry in figures.items():
        softmax = figures.get(("student", engine, beam))
        if model == LINEAR_STUDENT and softmax is not None:
            pairs.append(f"{engine} beam {beam}: BLEU {entry.test.bleu:.1f} against {softmax.test.bleu:.1f}, "
                         f"{entry.tokens_per_second / softmax.tokens_per_second:.2f}x the output tokens/s")
    if pairs:
        notes.append(f"{name}: {LINEAR_STUDENT} against the softmax student, on test: {'; '.join(pairs)}")
    return notes


def teacher_notes(name: str, teacher: Teacher, trained: dict, student: dict, measured: list[RowFigures]) -> list[str]:
    """What a reader needs beside one teacher's rows: its training, the stages' times, and the targets."""
    stages = student.get("stages", {})
    times = ", ".join(f"{stage} {record['seconds'] / 60:,.1f} min" for stage, record in stages.items())
    notes = [f"{name}: teacher = recipes/{teacher.recipe}.yaml's averaged model ({fmt(trained['parameters'])} "
             f"parameters, {fmt(trained['steps'])} steps, prepare and training {trained['minutes']} min; the recipe's "
             f"own test BLEU {trained['recipe_bleu']}); test split {teacher.test}; nmt distill's stages: {times}"]
    torch_base = base_row(measured, "torch")
    student_beam = next((entry for entry in measured if entry.row.model == "student" and not entry.failed
                         and entry.row.engine == Engine(shipped_defaults=True) and entry.row.beam == TEACHER_BEAM),
                        None)
    if torch_base is not None and student_beam is not None:
        gap = torch_base.test.bleu - student_beam.test.bleu
        notes.append(f"{name}: the tiny student (torch float32, beam {TEACHER_BEAM}) {gap:+.1f} BLEU below its "
                     f"teacher at beam {TEACHER_BEAM} on test ({student_beam.test.bleu:.1f} against "
                     f"{torch_base.test.bleu:.1f}); target at most {BLEU_BUDGET}: "
                     f"{'met' if gap <= BLEU_BUDGET else 'not met'}")
    best = best_student(measured)
    if best is None:
        notes.append(f"{name}: no student setting came within {BLEU_BUDGET} BLEU of the teacher on dev, so the speed "
                     f"targets have no row to be read from")
        return notes
    speeds = []
    for label, target in TARGETS.items():
        base = base_row(measured, "ctranslate2" if "CTranslate2" in label else "torch")
        if base is None:
            speeds.append(f"{label}: not measured")
            continue
        times_faster = best.tokens_per_second / base.tokens_per_second
        verdict = "met" if times_faster >= target else "not met"
        speeds.append(f"{times_faster:.2f}x {label} (target {target:g}x: {verdict})")
    notes.append(f"{name}: the student's fastest setting within {BLEU_BUDGET} BLEU of the teacher on dev is "
                 f"{best.row.engine_label}, shortlist {best.row.shortlist_label}, beam {best.row.beam} (dev "
                 f"{best.dev_bleu:.1f} against the teacher's {torch_base.dev_bleu:.1f}; test {best.test.bleu:.1f}): "
                 f"{'; '.join(speeds)}")
    return notes


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--teachers", default=None,
                        help=f"comma list of {', '.join(TEACHERS)} (default: all; --quick: multi30k)")
    parser.add_argument("--linear-students", default=None,
                        help="comma list of the teachers that also get a student with a linear-attention decoder "
                             "(of the same distilled corpus), or none (default: general; --quick: multi30k)")
    parser.add_argument("--stages-only", action="store_true",
                        help="run the teachers' recipes, nmt distill (the linear-decoder students too) and the "
                             "teachers' exports, then stop before the timed rows (no report): for a machine that is "
                             "busy with other work")
    args = parser.parse_args()
    names = args.teachers.split(",") if args.teachers else (["multi30k"] if args.quick else list(TEACHERS))
    unknown = [name for name in names if name not in TEACHERS]
    if unknown:
        parser.error(f"--teachers: unknown teacher {unknown[0]!r} (choose from {', '.join(TEACHERS)})")
    if args.linear_students is None:  # the default's teacher, when this run has it
        linear_names = [name for name in (["multi30k"] if args.quick else ["general"]) if name in names]
    else:
        linear_names = [] if args.linear_students == "none" else args.linear_students.split(",")
        unknown = [name for name in linear_names if name not in names]
        if unknown:
            parser.error(f"--linear-students: {unknown[0]!r} is not a teacher of this run ({', '.join(names)}); "
                         "name those, or none")
    repeats, beams = repeats_of(args), QUICK_BEAMS if args.quick else BEAMS
    work = args.work / ("distill_quality-quick" if args.quick else "distill_quality")
    report = Report("distill_quality", "Distilled students against their teachers (BLEU; output tokens/s on one core)",
                    COLUMNS, quick=args.quick)
    if args.teachers:
        report.variant = "teachers " + ", ".join(names)
    report.versions = {"nmt-cli": project_version(), "CTranslate2": ctranslate2_version()}
    loads = [os.getloadavg()[0]]
    for name in names:
        teacher, root = TEACHERS[name], work / name
        if args.stages_only and teacher.minutes_budget() and not args.quick:
            print(f"{name}: recipes/{teacher.recipe}.yaml trains for {teacher.minutes_budget()} minutes, not a "
                  "number of steps: on a busy machine its teacher and student train fewer steps", file=sys.stderr)
        trained = train_teacher(name, teacher, root, args.quick)
        student = distill_student(trained, root / "distill", args.quick)
        teacher_export = export_teacher(trained, root / "teacher-ct2")
        linear = (distill_student(trained, root / "distill-linear", args.quick, "distill linear",
                                  ("--corpus-from", root / "distill", "--student-decoder", "linear"))
                  if name in linear_names else None)
        if args.stages_only:
            print(f"{name}: stages done under {root}; the timed rows are left for a run without --stages-only")
            continue
        data = PreparedData(trained["data"])
        sentences = QUICK_TEST_SENTENCES if args.quick else None
        decode = load_checkpoint_config(trained["model"]).decode  # the student's too
        test, dev = (split_of(data, split, decode, root, sentences) for split in ("test", "valid"))
        rows = rows_of(trained, student, teacher_export, beams, linear)
        measured = measure(rows, test, dev, data, decode.alpha, repeats, root / "translations")
        add_rows(report, name, measured)
        report.notes += teacher_notes(name, teacher, trained, student, measured)
        report.notes += linear_notes(name, linear, measured) if linear else []
        report.notes += [note for note in [stage_loads_note(name, root)] if note]
        loads.append(os.getloadavg()[0])
    if args.stages_only:
        return
    report.notes += [
        "student: nmt distill's defaults: the tiny preset (6 encoder / 2 decoder layers, d 256, FFN 1536, 8 heads), "
        "the teacher's beam and decoding settings, the chrF-closest hypothesis of the n-best list, the worst 5% "
        "by teacher score dropped, the teacher's training settings, its last 4 checkpoints averaged; shortlist yes: "
        "Marian's 50 50 from the distilled pairs aligned by the teacher (torch: each sentence's own candidates); "
        "CTranslate2: the int8 export with the shortlist as its vocabulary map, which decodes a batch over the "
        "union of its sentences' candidates (decode.shortlist_scope batch, the default)",
        "decoding: every row with the model's own settings (nmt translate's: length limit a * |x| + b, length "
        "penalty, batch budget; the student's are its teacher's), the row's beam; at limit: outputs as long as "
        "that limit (the CTranslate2 engine rescores each such output with score_batch, work the torch engine "
        "does not do, inside its time: the column says how much of it there is)",
        f"speed: 1 thread, 1 worker, the test split after {ours.WARMUP_SENTENCES} untimed sentences; median of "
        f"{repeats} interleaved run(s); out tok/s counts output pieces; ratios by output tokens/s, by sentences/s "
        "in brackets; quality from the timed outputs; dev BLEU: the same setting on the validation split (on "
        f"{THREADS} threads, untimed)",
        f"the student's setting is chosen by dev BLEU (within {BLEU_BUDGET} of the teacher's at beam "
        f"{TEACHER_BEAM}) and test speed; what was not held out: the recipes' settings and the student preset were "
        "fixed before this run (by the recipes' validation BLEU and Bergamot's published shapes), and nothing here "
        "was tuned on the test split",
        "size MB: MiB of the model directory's files (weights, config, SentencePiece models); torch int8 rows quantize "
        "the float32 checkpoint when loaded, so they have its size",
        f"load average (1 minute) at the start and after each teacher's rows: {', '.join(f'{x:.2f}' for x in loads)} "
        "(the timed runs use one of the machine's cores)",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
