"""What every bench script shares: options, timing, peak RSS, medians, reports and tables.

Conventions for every script in ``bench/`` (``run_all.py`` relies on them):

* ``--quick``: a tiny data slice and a few steps, only the peers that are installed; used
  by ``tests/test_bench_quick.py`` so no script can rot. The full run is not part of CI.
* ``--repeats N``: speed figures are the median of N runs (default 3; 1 with ``--quick``);
  each table's notes say how its figures were made (some are single runs or fastest-of).
* ``--json FILE``: besides printing a markdown table on stdout, write the report as JSON::

      {"script": "train_speed", "title": "...", "quick": false,
       "columns": ["model", "toolkit", ...], "rows": [["transformer", "nmt-cli", ...], ...],
       "notes": ["one sentence per note", ...], "versions": {"torch": "2.13.0+cpu", ...}}

  Cells are strings (already formatted) so the table reads the same everywhere.
  ``run_all.py`` renders every script's JSON into ``BENCHMARKS.md``. Build it with :class:`Report`.
* Every report records where it was measured (:func:`measured_at`: commit and whether the
  tree was clean, CPU model, cores, vector extensions, GPU, time, the script's command), and
  every section, printed or in ``BENCHMARKS.md``, starts with the same header block saying
  so (:func:`section_header`).
* A peer that cannot be installed keeps its row, with the reason in place of the figures.
* Two CPU threads for every toolkit (:data:`THREADS`), set through the environment of
  every subprocess (:func:`thread_env`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import shlex
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence
from unittest.mock import patch

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
WORK_DIR = BENCH_DIR / ".work"  # git-ignored scratch space for prepared data, runs and outputs
#: the real data every bench reads (its README says what is there); NMT_SHARED_DATA names another copy
SHARED_DATA = Path(os.environ.get("NMT_SHARED_DATA", REPO.parent / "shared" / "data"))
MULTI30K = SHARED_DATA / "multi30k"
THREADS = 2

sys.path.insert(0, str(REPO))  # bench scripts run as files; make the project importable

from nmt_cli.fileio import atomic_write_bytes, atomic_write_json  # noqa: E402  (after the path fix above)
from nmt_cli.host import cpuinfo_field  # noqa: E402


def absolute_path(value: str) -> Path:
    """A path option made absolute: the scripts run their tools from other folders."""
    return Path(value).expanduser().resolve()


def bench_arguments(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every bench script takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="tiny data slice, a few steps, installed peers only (for tests)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs per figure; the median is reported (default 3, 1 with --quick)")
    parser.add_argument("--json", type=absolute_path, default=None, metavar="FILE",
                        help="also write the report as JSON (read by run_all.py)")
    parser.add_argument("--work", type=absolute_path, default=WORK_DIR,
                        help=f"scratch folder (default {WORK_DIR.relative_to(REPO)})")
    return parser


def repeats_of(args: argparse.Namespace) -> int:
    """How many runs each figure is the median of."""
    return args.repeats if args.repeats is not None else (1 if args.quick else 3)


#: environment for a command whose output lines are stamped as they come (:func:`run_measured`)
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}


def thread_env(threads: int = THREADS, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment that holds a subprocess's torch/OpenMP/MKL pools to ``threads`` threads."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env.update(extra or {})
    return env


@dataclass
class Measured:
    """How a subprocess ended: exit status, wall-clock seconds and its peak resident memory."""

    returncode: int
    seconds: float
    peak_rss_mb: float
    log: Path


#: Spawns the measured command and reports its peak memory: the larger of its ``ru_maxrss``
#: and the highest sum of VmRSS over its process tree, sampled every 50 ms while the tree has
#: more than one process (forked decoding workers: ``ru_maxrss`` is one process's, never a
#: sum). Shared copy-on-write pages count once per process in that sum, so for forked
#: workers it is an upper bound. Linux gives a child the high-water RSS of the process it
#: was spawned from (carried across vfork and exec), so a command started straight from a
#: bench script that has grown (torch, FLOP counting, an in-process ``nmt prepare``) would
#: report at least that script's peak; this small interpreter in between keeps that floor
#: at its own ~10 MB.
RSS_LAUNCHER = """
import os, subprocess, sys, threading
def tree(pid):
    try:
        children = [int(c) for t in os.listdir(f"/proc/{pid}/task")
                    for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
    except OSError:
        return []
    return [pid] + [p for child in children for p in tree(child)]
def rss_kib(pid):
    try:
        return next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0
process = subprocess.Popen(sys.argv[2:])
peak, done = [0], threading.Event()
def sample():
    while not done.wait(0.05):
        pids = tree(process.pid)
        if len(pids) > 1:
            peak[0] = max(peak[0], sum(rss_kib(pid) for pid in pids))
threading.Thread(target=sample, daemon=True).start()
_, status, usage = os.wait4(process.pid, 0)
done.set()
with open(sys.argv[1], "w") as report:
    report.write(str(max(usage.ru_maxrss, peak[0])))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_measured(command: Sequence[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None, stdin: Path | None = None,
                 stdout: Path | None = None, stamps: list[tuple[float, str]] | None = None,
                 stop_when: Callable[[float, str], bool] | None = None) -> Measured:
    """Run ``command`` with output to ``log`` (stdout to ``stdout`` when given).

    The peak RSS is that command's own (:data:`RSS_LAUNCHER`): ``wait4``'s resource usage,
    or the sum over its processes where it forked workers, and nothing else running on the
    machine. With ``stamps``, stdout and stderr pass through this process line by line and
    each line is appended as ``(seconds since the start, line)`` by this process's clock, so
    every toolkit's progress is timed the same way (run the command unbuffered:
    :data:`UNBUFFERED`). With ``stop_when`` as well, the command runs in a process group of its
    own and the first stamped line for which ``stop_when(seconds, line)`` is true sends SIGTERM
    to that group (its remaining output is still read); the exit status is then the command's
    answer to SIGTERM, and the peak RSS 0 (the launcher is stopped with it).
    """
    if stamps is not None and stdout is not None:
        raise ValueError("stamped lines are stdout and stderr together: no separate stdout file")
    if stop_when is not None and stamps is None:
        raise ValueError("stop_when reads stamped lines: pass stamps as well")
    log.parent.mkdir(parents=True, exist_ok=True)
    rss_report = log.with_name(log.name + ".maxrss")
    started = time.perf_counter()
    launcher = [sys.executable, "-I", "-S", "-c", RSS_LAUNCHER, rss_report]
    arguments = [str(part) for part in [*launcher, *command]]
    with log.open("w") as log_handle:
        out_handle = stdout.open("w") if stdout else log_handle
        in_handle = stdin.open() if stdin else subprocess.DEVNULL
        try:
            if stamps is None:
                returncode = subprocess.call(arguments, env=env, cwd=cwd, stdin=in_handle, stdout=out_handle,
                                             stderr=log_handle)
            else:
                with subprocess.Popen(arguments, env=env, cwd=cwd, stdin=in_handle, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, errors="replace",
                                      start_new_session=stop_when is not None) as process:
                    stopped = False
                    for line in process.stdout:
                        stamps.append((time.perf_counter() - started, line.rstrip("\n")))
                        log_handle.write(line)
                        if stop_when is not None and not stopped and stop_when(*stamps[-1]):
                            with contextlib.suppress(ProcessLookupError):  # the group may have just ended
                                os.killpg(process.pid, signal.SIGTERM)
                            stopped = True
                    returncode = process.wait()
        finally:
            if stdout:
                out_handle.close()
            if stdin:
                in_handle.close()
    seconds = time.perf_counter() - started
    peak_kib = int(rss_report.read_text()) if rss_report.is_file() else 0  # absent: the command did not start
    rss_report.unlink(missing_ok=True)
    return Measured(returncode, seconds, peak_kib / 1024, log)


@contextlib.contextmanager
def wrapped_functions(functions: Sequence[tuple[object, str, str]], wrap: Callable) -> Iterator[None]:
    """Each ``(owner, name, part)`` function replaced by ``wrap(part, function)`` for as long as the
    context lasts (a profile's parts), and put back afterwards, even on an error."""
    with contextlib.ExitStack() as stack:
        for owner, name, part in functions:
            stack.enter_context(patch.object(owner, name, wrap(part, getattr(owner, name))))
        yield


def fresh_dir(path: Path) -> Path:
    """An empty folder at ``path``: toolkits resume from checkpoints they find (fairseq's
    ``checkpoint_last.pt``, our run directories), so a timed run must never see a previous one."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def nmt_command(*args: object) -> list[str]:
    """``nmt ARGS`` with this interpreter (the project as the bench sees it)."""
    return [sys.executable, "-m", "nmt_cli", *map(str, args)]


def disk_mb(path: Path) -> float:
    """MiB of the files under ``path`` (a prepared corpus, a model directory)."""
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file()) / 2**20


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log, to quote when a run fails."""
    if not path.is_file():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def save_png(figure, path: Path) -> None:
    """Lay out a matplotlib ``figure``, write it to ``path`` as a 100-dpi PNG (atomically) and close it."""
    import io

    import matplotlib.pyplot as plt

    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100)
    plt.close(figure)
    atomic_write_bytes(path, image.getvalue())


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def fmt(value: float | None, digits: int = 0) -> str:
    """A figure with thousands separators; '-' when absent."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def fmt_ratio(ours: float | None, theirs: float | None) -> str:
    """``ours / theirs`` as e.g. ``1.52x``; '-' when either side is missing."""
    if not ours or not theirs:
        return "-"
    return f"{ours / theirs:.2f}x"


#: the confidence a ratio's interval is given at where the runs allow it (:func:`median_interval`)
INTERVAL_CONFIDENCE = 0.95


def median_interval(values: Sequence[float], confidence: float = INTERVAL_CONFIDENCE) -> tuple[float, float, float]:
    """``(low, high, held)``: the narrowest interval of order statistics ``[x_(k), x_(n+1-k)]`` of
    ``values`` that holds the median of the distribution they were drawn from with probability
    ``held >= confidence``, whatever that distribution. Each value lies below the median with
    probability 1/2, so the interval misses it when fewer than ``k`` values lie below it or fewer
    than ``k`` above: ``held = 1 - 2 P(Binomial(n, 1/2) < k)``. Too few values for ``confidence``
    (fewer than 6 for 95%) give the whole range at the confidence it has (``1 - 2^(1-n)``)."""
    ordered, n = sorted(values), len(values)

    def held(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, below) for below in range(k)) / 2**n

    k = 1
    while k < (n + 1) // 2 and held(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[n - k], held(k)


def fmt_ratio_spread(ours: Sequence[float], theirs: Sequence[float]) -> str:
    """The ratio of the medians and, when there are several runs, the interval that holds the median
    ratio of runs made side by side (run ``k`` of each; :func:`median_interval`) with its confidence:
    ``0.83x (0.79-0.86x, 96%)``; '-' when a side is missing."""
    text = fmt_ratio(median(ours) if ours else None, median(theirs) if theirs else None)
    pairs = [a / b for a, b in zip(ours, theirs) if a and b]
    if text == "-" or len(pairs) < 2:
        return text
    low, high, held = median_interval(pairs)
    return f"{text} ({low:.2f}-{high:.2f}x, {held:.0%})"


def load_averages() -> str:
    """The machine's 1-, 5- and 15-minute load averages now, as ``0.7/0.8/1.3``."""
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def shared_load_note(before: str) -> str:
    """A report's note on the load before (:func:`load_averages` then) and after its timings."""
    return (f"Load average (1/5/15 minutes) before: {before}, after: {load_averages()}; the machine is shared, so "
            "figures under a load above its cores are not benchmark figures.")


#: what :func:`fmt_ratio_spread`'s brackets hold, for a report's notes
RATIO_SPREAD_NOTE = ("the ratio of the medians; in brackets an interval of the ratios of runs made side by side "
                     "(run k of each) that holds their median with the confidence given, whatever their "
                     "distribution (order statistics; with fewer than 6 runs, all of them)")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table; numeric-looking columns are right-aligned."""
    def numeric(index: int) -> bool:
        cells = [row[index] for row in rows if row[index] not in ("-", "")]
        return bool(cells) and all(c.replace(",", "").replace(".", "").rstrip("x%").lstrip("-").isdigit()
                                   for c in cells)

    align = ["---:" if numeric(i) else "---" for i in range(len(columns))]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Report:
    """One bench script's result: a titled table plus notes, printed and saved as JSON."""

    script: str
    title: str
    columns: list[str]
    quick: bool = False
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    #: what sets this run apart from the script's default one (``10,000 training steps``):
    #: BENCHMARKS.md keeps a section per variant of a script
    variant: str = ""

    @property
    def heading(self) -> str:
        return f"{self.title}, {self.variant}" if self.variant else self.title

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([str(cell) for cell in cells])

    def to_markdown(self, made: dict | None = None, outcome: str = "", regenerate: str = "") -> str:
        """The section: heading, :func:`section_header` (``made``: a :func:`measured_at` record,
        this process's when None), table and notes."""
        made = measured_at() if made is None else made
        parts = [f"## {self.heading}", "", *section_header(self.script, self.variant, made, outcome, regenerate),
                 "", markdown_table(self.columns, self.rows)]
        if self.notes:
            parts += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(parts) + "\n"

    def to_json(self, made: dict | None = None) -> dict:
        return {"script": self.script, "title": self.title, "variant": self.variant, "quick": self.quick,
                "columns": self.columns, "rows": self.rows, "notes": self.notes,
                "versions": self.versions, "measured_at": measured_at() if made is None else made}

    def emit(self, json_path: Path | None) -> None:
        """Print the markdown table; write the JSON report when asked."""
        made = measured_at()
        print(self.to_markdown(made), flush=True)
        if json_path is not None:
            atomic_write_json(json_path, self.to_json(made))


#: where bench scripts write the files they commit (the blind links, pictures): their own output
#: while they run, not a change to the code they measure
RESULTS = "bench/results"


def git_commit(ignore_results: bool = False) -> tuple[str, bool | None]:
    """HEAD's short hash (``git describe --always``) and whether the tracked files were clean
    (``git describe --dirty``), with ``ignore_results`` not counting changes under
    :data:`RESULTS`; None for the second when this is not a git checkout."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always"],
                                capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  *([f":(exclude){RESULTS}"] if ignore_results else [])],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)", None
    return commit, not changed


#: the commit and state of the tree when this script's code was loaded: the code a report measures
LOADED_FROM = git_commit()


def gpu_description() -> str:
    """The GPUs torch sees, e.g. ``NVIDIA H100 80GB HBM3 x 1``, or ``none``."""
    try:
        import torch
    except ImportError:
        return "not recorded (torch is not installed)"
    if not torch.cuda.is_available():
        return "none"
    names = Counter(torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count()))
    return ", ".join(f"{name} x {count}" for name, count in names.items())


#: options of a bench script that say where its files go, not what it measures
PLACE_OPTIONS = ("--json", "--work")


def script_command(argv: Sequence[str] | None = None) -> str:
    """This script's command line as a user would type it: ``python bench/NAME.py OPTIONS``,
    less :data:`PLACE_OPTIONS` and their values."""
    argv = list(sys.argv if argv is None else argv)
    kept, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in PLACE_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in PLACE_OPTIONS)):
            kept.append(arg)
    script = Path(argv[0]).resolve() if argv else BENCH_DIR / "unknown.py"
    name = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    return shlex.join(["python", str(name), *kept])


def measured_at(argv: Sequence[str] | None = None) -> dict[str, str | bool | None]:
    """When, at which commit (and whether the tree was clean), on which machine and by which
    command a report was made, so every section says where it came from."""
    commit, clean = LOADED_FROM
    # HEAD moved or code changed while it ran (code imported later may be newer); the files the
    # script wrote itself under bench/results are no such change
    if clean and git_commit(ignore_results=True) != LOADED_FROM:
        clean = False
    cpu, extensions, cores = cpu_model(), vector_extensions(), str(os.cpu_count())
    # "commit" stays what `git describe --dirty` says (scripts quote it in their notes); "clean" says it outright
    return {"commit": commit if clean is not False else f"{commit}-dirty", "clean": clean, "utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{cpu} ({extensions}), {cores} cores", "cpu": cpu, "vector_extensions": extensions,
            "cores": cores, "gpu": gpu_description(), "command": script_command(argv)}


def commit_text(made: dict) -> str:
    """``abc1234 (clean tree)``, ``abc1234 with uncommitted changes (git describe --dirty)``; older
    reports recorded ``abc1234-dirty`` in the commit itself, and only a clean tree without it."""
    commit = str(made.get("commit") or "")
    if not commit:
        return "not recorded"
    if commit.startswith("unknown"):
        return commit
    dirty = made.get("clean") is False or commit.endswith("-dirty")
    commit = commit.removesuffix("-dirty")
    return (f"{commit} with uncommitted changes (`git describe --dirty`): the tree was not that commit"
            if dirty else f"{commit} (clean tree)")


def machine_text(made: dict) -> str:
    """CPU model (vector extensions), cores; GPU."""
    return f"{made.get('machine') or 'not recorded'}; GPU: {made.get('gpu') or 'not recorded'}"


def section_header(script: str, variant: str, made: dict, outcome: str = "", regenerate: str = "") -> list[str]:
    """The block every section starts with: the script (and variant), when, and as items the
    commit, the machine, the command that made the report and the one that regenerates the section.

    Its first line starts `` `bench/NAME.py` `` (`` (VARIANT)``), which ``run_all.py`` reads
    back to know whose section it is."""
    mark = f" ({variant})" if variant else ""
    when = f"measured {made['utc']}" if made.get("utc") else "time not recorded"
    lines = [f"`bench/{script}.py`{mark}, {', '.join(filter(None, [outcome, when]))}:", "",
             f"- commit: {commit_text(made)}", f"- machine: {machine_text(made)}"]
    if made.get("command"):
        lines.append(f"- made by: `{made['command']}`")
    if regenerate:
        lines.append(f"- regenerate: `{regenerate}`")
    return lines


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    model = cpuinfo_field("model name")
    return model if model is not None else platform.processor() or "unknown CPU"


#: /proc/cpuinfo flags that decide which kernels CTranslate2, oneDNN and fbgemm pick
VECTOR_FLAGS = (("avx2", "AVX2"), ("fma", "FMA"), ("avx512f", "AVX-512"), ("avx512_vnni", "AVX-512 VNNI"),
                ("avx_vnni", "AVX-VNNI"), ("avx512_bf16", "AVX-512 BF16"), ("amx_tile", "AMX"),
                ("amx_bf16", "AMX-BF16"), ("amx_int8", "AMX-INT8"))


def vector_extensions() -> str:
    """The vector and matrix extensions this CPU reports, e.g. ``AVX2, FMA`` (or ``none of ...``)."""
    flags = set((cpuinfo_field("flags") or "").split())
    found = [name for flag, name in VECTOR_FLAGS if flag in flags]
    return ", ".join(found) if found else "none of AVX2/AVX-512/AMX"


def machine_description() -> dict[str, str]:
    """CPU model and vector extensions, cores, memory, OS, Python and torch: the header of ``BENCHMARKS.md``."""
    memory = "unknown"
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        total_kb = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
        memory = f"{total_kb / 1024 ** 2:.1f} GiB"
    import torch

    return {"cpu": cpu_model(), "vector extensions": vector_extensions(), "cores": str(os.cpu_count()),
            "memory": memory, "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "torch": torch.__version__,
            "threads per toolkit": str(THREADS)}


def project_version() -> str:
    from nmt_cli import __version__

    return __version__
