"""Run every bench script and write ``BENCHMARKS.md`` (generated, never edited by hand).

Installs the peers first (idempotent; a failed install is recorded and its rows say so),
then runs each script with ``--json`` and renders the reports. Every section starts with
the same header block (:func:`common.section_header`): the commit and whether the tree was
clean, the machine (CPU model, vector extensions, cores, GPU), the command that made the
report and the ``run_all.py`` command that regenerates the section. A script that fails
gets a section with its log tail instead of its table. ``make bench`` runs this with no options.

Sections are made in parts: with ``--scripts`` naming a few (one section each), the sections
of the others are carried over from the existing file as they are, each with its own header,
so one script's new run never drops the rest; so is the page's one hand-written section, "Sections
moved in by hand", where runs made elsewhere (a detached worktree, another machine) and moved into
the page are recorded. Options a section needs beyond the shared
ones (:data:`PASS_THROUGH`: ``--steps``, ``--seeds``, ``--corpora`` ... of align_quality) are
passed on to the scripts that take them. A script's report run at other settings than its
default (its ``variant``, such as ``align_quality --steps 10000``) has a section of its own
beside the default one: a new run replaces only the section of its own variant. The page opens
with its contents, made from the sections' headers (each script's sections, newest first, with
the day, machine and commit of each); ``--contents`` makes it again after a section is moved in
by hand, and runs nothing.

A long section is resumable: stop it and run the same command again. align_quality with
``--reuse-models`` keeps every finished model and eflomal run under ``--work`` and resumes an
unfinished training; translate_speed (and serve_load, which uses its model) trains its models once
per ``--work`` and decodes again; train_speed times fresh training runs and starts over;
time_to_quality keeps each finished timed training run and each evaluated checkpoint under
``--work`` (an unfinished training run starts over: its clock cannot resume).
``--reuse`` takes a script's report from ``<work>/results/<script>.json`` instead of
running it (finish an interrupted page without redoing the sections already made).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from common import (BENCH_DIR, REPO, Report, bench_arguments, markdown_table, measured_at, project_version,
                    run_measured, tail)
from peers.install import PEERS, availability, install, install_record

from nmt_cli.fileio import atomic_write_text

#: how a section carried over from an earlier file begins its note (it keeps the first note it got)
CARRIED = "_Carried over from an earlier BENCHMARKS.md"
#: the heading of the page's one hand-written section: how runs made elsewhere were moved in; carried as it is
HAND_NOTES = "## Sections moved in by hand"
SCRIPTS = ("train_speed", "time_to_quality", "train_profile", "train_levers", "attention_kernels", "bf16_quality",
           "translate_speed", "engine_ratio", "decode_profile",
           "decode_length", "prepare_scale", "align_quality", "align_dev_sweep", "serve_load", "terminology",
           "constrained_stop",
           "shortlist_speed", "distill_quality", "soft_npz_memory")


@dataclass(frozen=True)
class PassThrough:
    """An option of some scripts that ``run_all.py`` takes and passes on to them as it is."""

    option: str
    scripts: tuple[str, ...]
    help: str
    flag: bool = False  # takes no value


#: the options a section may need beyond --quick, --repeats and --work, one line each
PASS_THROUGH = (
    PassThrough("--steps", ("align_quality", "align_dev_sweep", "bf16_quality"),
                "training steps of every model (align_quality: a variant, a section of its own)"),
    PassThrough("--seeds", ("align_quality", "align_dev_sweep", "time_to_quality", "bf16_quality"),
                "align_quality: guided models per direction (N > 1 adds the ensemble rows); time_to_quality: "
                "training runs per toolkit; bf16_quality: training runs per precision"),
    PassThrough("--budgets", ("time_to_quality",), "comma list of training budgets in minutes"),
    PassThrough("--budget-minutes", ("prepare_scale",),
                "skip a corpus size whose prepare would not end within this many minutes of the start"),
    PassThrough("--corpora", ("align_quality", "align_dev_sweep"), "comma list of the corpora to align"),
    PassThrough("--systems", ("align_quality",), "comma list of the nmt-cli aligners to run"),
    PassThrough("--choices", ("align_dev_sweep",), "comma list of the alignment defaults to choose again on dev"),
    PassThrough("--device", ("align_quality", "align_dev_sweep"),
                "where nmt-cli trains, aligns and translates (cpu, cuda)"),
    PassThrough("--reuse-models", ("align_quality", "align_dev_sweep"), "keep and resume the models under --work",
                flag=True),
    PassThrough("--models", ("train_speed", "train_profile", "train_levers", "time_to_quality"),
                "comma list of the model shapes to train"),
    PassThrough("--teachers", ("distill_quality",), "comma list of the teachers to distill (multi30k, general)"),
    PassThrough("--peers", ("train_speed", "translate_speed", "time_to_quality"),
                "all, none, or a comma list of peer toolkits"),
)
#: options every script takes and run_all passes on
SHARED = ("--quick", "--repeats")


def passed_through(args: argparse.Namespace, script: str) -> list[str]:
    """The pass-through options given to run_all that ``script`` takes, as its command line."""
    options = []
    for entry in PASS_THROUGH:
        value = getattr(args, entry.option[2:].replace("-", "_"))
        if script in entry.scripts and value not in (None, False):
            options += [entry.option] if entry.flag else [entry.option, str(value)]
    return options


def regenerate_command(script: str, command: str) -> str:
    """The run_all command that makes ``script``'s section again, from the command that made its
    report (``python bench/NAME.py OPTIONS``); a script run with an option run_all does not pass on
    is run as it was, then rendered with ``--reuse``."""
    words = shlex.split(command)[2:] if command else []
    known = {*SHARED, *(entry.option for entry in PASS_THROUGH if script in entry.scripts)}
    if all(word in known for word in words if word.startswith("--")):
        return shlex.join(["python", "bench/run_all.py", "--scripts", script, *words])
    return (f"{command} --json bench/.work/results/{script}.json && "
            f"python bench/run_all.py --scripts {script} --reuse")


def run_script(name: str, args, results: Path) -> tuple[dict | None, str]:
    """Run ``bench/<name>.py`` with the shared options; (its JSON report or None, log tail)."""
    json_path = results / f"{name}.json"
    json_path.unlink(missing_ok=True)
    command = [sys.executable, BENCH_DIR / f"{name}.py", "--json", json_path, "--work", args.work]
    if args.quick:
        command.append("--quick")
    if args.repeats is not None:
        command += ["--repeats", args.repeats]
    command += passed_through(args, name)
    measured = run_measured(command, results / f"{name}.log", cwd=REPO)
    if measured.returncode != 0 or not json_path.is_file():
        return None, f"exit status {measured.returncode} after {measured.seconds:.0f} s:\n{tail(measured.log, 25)}"
    return json.loads(json_path.read_text()), f"{measured.seconds:.0f} s"


#: the line of a section that names its script: the first of its header, `` `bench/NAME.py` (VARIANT), ...:``
#: (:func:`common.section_header`), or in pages written before it, the last: ``_`bench/NAME.py` (VARIANT), ..._``
MARKER = re.compile(r"^_?`bench/(\w+)\.py`(?: \(([^)]*)\))?[,:]")
#: a header's machine item: a section that has one needs no mark of the page's Machine table
MACHINE_ITEM = re.compile(r"^- machine: (.*)$", re.MULTILINE)


def section_marker(block: str) -> re.Match | None:
    """The :data:`MARKER` line of a section's markdown (whose script and variant it is), or None."""
    return next((found for line in block.splitlines() if (found := MARKER.match(line))), None)


def section_key(script: str, variant: str = "") -> str:
    """One section per script and variant (:attr:`common.Report.variant`): ``align_quality``,
    ``align_quality (10,000 training steps)``."""
    return f"{script} ({variant})" if variant else script


def script_of(key: str) -> str:
    return key.split(" ", 1)[0]


def earlier_sections(path: Path) -> dict[str, str]:
    """The sections of an earlier ``BENCHMARKS.md`` by :func:`section_key`, as they are; one
    without a header naming its machine (written before sections had one) is marked with the
    CPU the file's Machine table named. Of sections with the same key (a run's section kept beside
    a later one of the same script and variant, told apart by its heading: another machine), the
    first has the key, which a new run of that variant replaces; each later one is keyed by its
    heading as well (:func:`kept_key`), so that it is carried over and never dropped."""
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    cpu = next((line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| cpu |")), "unknown")
    sections = {}
    for block in text.split("\n## ")[1:]:
        marker = section_marker(block)
        if marker is not None:
            marked = CARRIED in block or MACHINE_ITEM.search(block)
            note = "" if marked else f"\n\n{CARRIED}, whose Machine table named: {cpu}._"
            key = section_key(marker.group(1), marker.group(2) or "")
            if key in sections:
                key = kept_key(key, block.splitlines()[0])
            sections[key] = "## " + block.rstrip() + note + "\n"
    return sections


def earlier_hand_notes(path: Path) -> str | None:
    """The :data:`HAND_NOTES` section of an earlier ``BENCHMARKS.md``, as it is, or None."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    start = text.find(f"\n{HAND_NOTES}\n")
    if start < 0:
        return None
    end = text.find("\n## ", start + 1)
    return text[start + 1:end if end >= 0 else len(text)].rstrip() + "\n"


def kept_key(key: str, heading: str) -> str:
    """The key of a section whose :func:`section_key` an earlier section of the page has: that key
    and its heading, which no new run makes (``attention_kernels [Training attention kernels by key
    length (2 CPU threads), AMD EPYC with AVX2]``)."""
    return f"{key} [{heading}]"


#: the heading of the generated list of every section, grouped by script, newest first
CONTENTS = "## Contents"
#: the widest extension a header's machine item names, which tells this page's CPUs apart
WIDEST_EXTENSION = ("AMX", "AVX-512 BF16", "AVX-512", "AVX2")


def anchor(heading: str) -> str:
    """The ``#fragment`` GitHub gives a markdown heading (its text lowercased, punctuation dropped,
    spaces as hyphens), so that the contents' links lead to their sections."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def machine_name(header: str) -> str:
    """A section's machine in a few words, from its header's machine item: the CPU model without
    its trademarks and the widest extension it has (``Intel Xeon with AMX``, ``AMD EPYC with AVX2``)."""
    item = MACHINE_ITEM.search(header)
    if item is None or item.group(1).startswith("not recorded"):
        return "machine not recorded"
    cpu, _, rest = item.group(1).partition(" (")
    cpu = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b|@.*|,.*", "", cpu)
    cpu = " ".join(cpu.split())
    extensions = rest.split("), ")[0].split(", ") if rest else []
    widest = next((name for name in WIDEST_EXTENSION if name in extensions), None)
    return f"{cpu} with {widest}" if widest else cpu


def contents(sections: list[str]) -> str:
    """:data:`CONTENTS`: each script's sections (their markdown, in page order), newest first, each a
    link named by what its heading adds to the script's title, with the day it was measured, its
    machine and its commit, so that a reader finds the latest run of a comparison, and its runs on
    other CPUs, without reading the page."""
    titles: dict[str, str] = {}
    items: dict[str, list[tuple[str, str]]] = {}
    for text in sections:
        heading, _, body = text.partition("\n")
        marker = section_marker(body)
        if marker is None:
            continue
        script, variant = marker.group(1), marker.group(2) or ""
        heading = heading.removeprefix("## ")
        title = titles.setdefault(script, heading.removesuffix(f", {variant}") if variant else heading)
        name = heading.removeprefix(f"{title}, ") if heading != title else "default settings"
        header = body.split("\n|", 1)[0]
        stamp = re.search(r"(\d{4}-\d\d-\d\d)(?: \d\d:\d\d)?", header)
        commit = re.search(r"^- commit: ([0-9a-f]{7,40})", header, re.MULTILINE)
        facts = [stamp.group(1) if stamp else "date not recorded", machine_name(header)]
        facts += [commit.group(1)] if commit else []
        items.setdefault(script, []).append(
            (stamp.group(0) if stamp else "", f"[{name}](#{anchor(heading)}): {', '.join(facts)}"))
    lines = [CONTENTS, "", "Every section, by the script that made it, the newest first, with the day it was "
             "measured, its machine (the CPU and its widest vector extension) and its commit.", ""]
    for script, found in items.items():
        lines.append(f"- {titles[script]} (`bench/{script}.py`)")
        lines += [f"  - {item}" for _, item in sorted(found, key=lambda pair: pair[0], reverse=True)]
    return "\n".join(lines) + "\n"


def with_contents(page: str) -> str:
    """``page`` with its :data:`CONTENTS` made again from its sections: in place of the old one, or
    before the versions (sections moved in by hand run ``run_all.py --contents`` after them)."""
    head, *blocks = page.split("\n## ")
    blocks = [block for block in blocks if not block.startswith(CONTENTS.removeprefix("## ") + "\n")]
    made = contents(["## " + block for block in blocks]).removeprefix("## ")
    at = next((number for number, block in enumerate(blocks) if block.startswith("Versions\n")), 0)
    return "\n## ".join([head, *blocks[:at], made, *blocks[at:]])


def render(reports: dict[str, tuple[dict | None, str]], quick: bool, options: list[str],
           carried: dict[str, str], hand_notes: str | None = None) -> str:
    """The whole ``BENCHMARKS.md``; ``options`` are the command-line options it was made with;
    ``carried`` are earlier sections (:func:`earlier_sections`); those this run did not make again stay,
    and so does the earlier page's :data:`HAND_NOTES` (``hand_notes``), after the versions."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python bench/run_all.py", *options])
    made_now = [name for name in SCRIPTS if name in reports]
    lines = ["# Benchmarks", "",
             f"Written by `bench/run_all.py`; its last run, `{command}`{'' if options else ' (`make bench`)'} on "
             f"{stamp}, made the sections of {', '.join(made_now) or 'no script'} and carried the others over "
             "unchanged. Sections were measured at different commits, on different machines: each starts with "
             "its own commit (and whether the tree was clean), machine, the command that made it and the "
             "command that regenerates it. Each table's notes say how its figures were made; a ratio compares "
             "rows of its own table." + (" Runs made elsewhere and moved in by hand are recorded under "
                                         "[Sections moved in by hand](#sections-moved-in-by-hand)." if hand_notes
                                         else ""),
             ""]
    if quick:
        lines += ["**Quick mode: tiny data and a few steps; these figures only show that the scripts run.**", ""]
    versions = [["nmt-cli", project_version()]]
    for peer in PEERS:
        record = install_record(peer)
        if record is not None:
            versions.append([PEERS[peer].label, ", ".join(f"{k} {v}" for k, v in record["versions"].items())
                             + f" (installed in {record['seconds']} s)"])
        else:
            versions.append([PEERS[peer].label, availability(peer)[1]])
    lines += ["## Versions", "",
              f"The peer toolkits as installed for the last run ({stamp}, {measured_at()['machine']}); "
              "a section made earlier names its peers' versions in its rows.", "",
              markdown_table(["toolkit", "versions"], versions), ""]
    if hand_notes:
        lines += [hand_notes]
    for name in SCRIPTS:  # one order whichever sections this run made: a partial run does not reshuffle the page
        sections = {}  # section_key -> markdown, the script's default section first
        if name in reports:
            report, outcome = reports[name]
            if report is None:  # stands in for the default section
                sections[name] = "\n".join([f"## {name}", "", f"`bench/{name}.py` failed ({outcome.splitlines()[0]}):",
                                            "", "```", *outcome.splitlines()[1:], "```", ""])
            else:
                variant = report.get("variant", "")
                made = report.get("measured_at", {})
                rendered = Report(report["script"], report["title"], report["columns"], rows=report["rows"],
                                  notes=report["notes"], variant=variant).to_markdown(
                    made, outcome, regenerate_command(name, made.get("command", "")))
                sections[section_key(name, variant)] = rendered
        for key, text in carried.items():  # the sections of this script that this run did not make again
            if script_of(key) == name:
                sections.setdefault(key, text)
        lines += [sections[key] for key in sorted(sections, key=lambda key: key != name)]
    left_out = [name for name in SCRIPTS if name not in reports and name not in map(script_of, carried)]
    if left_out:
        lines += ["## Not in this run", "",
                  *(f"- `bench/{name}.py`: `python bench/run_all.py --scripts {name}`" for name in left_out), ""]
    return with_contents("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--scripts", default=",".join(SCRIPTS), help=f"comma list of {', '.join(SCRIPTS)}")
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md", help="the markdown file to write")
    parser.add_argument("--reuse", action="store_true",
                        help="take a script's report from an earlier run's <work>/results/<script>.json "
                             "when there is one (finish an interrupted run without redoing the rest)")
    for entry in PASS_THROUGH:
        if entry.flag:
            parser.add_argument(entry.option, action="store_true", help=f"{', '.join(entry.scripts)}: {entry.help}")
        else:
            parser.add_argument(entry.option, default=None, help=f"{', '.join(entry.scripts)}: {entry.help}")
    parser.add_argument("--contents", action="store_true",
                        help="only make the page's contents again from its sections (after moving one in by hand)")
    args = parser.parse_args(argv)
    if args.contents:
        if not args.out.is_file():
            parser.error(f"--contents: {args.out} is not a file")
        atomic_write_text(args.out, with_contents(args.out.read_text(encoding="utf-8")))
        print(f"wrote the contents of {args.out}")
        return
    names = args.scripts.split(",")
    unknown = [name for name in names if name not in SCRIPTS]
    if unknown:
        parser.error(f"--scripts: unknown script {unknown[0]!r} (choose from {', '.join(SCRIPTS)})")
    for entry in PASS_THROUGH:
        if getattr(args, entry.option[2:].replace("-", "_")) not in (None, False) and \
                not set(entry.scripts) & set(names):
            parser.error(f"{entry.option} is for {', '.join(entry.scripts)}, which --scripts does not name")
    results = args.work / "results"
    results.mkdir(parents=True, exist_ok=True)
    reused = {}
    for name in names:
        earlier = results / f"{name}.json"
        report = json.loads(earlier.read_text()) if args.reuse and earlier.is_file() else None
        if report is not None and report["quick"] == args.quick:
            reused[name] = report
    if not args.quick and len(reused) < len(names):  # only a script that runs needs the peers
        for peer in PEERS:
            install(peer)
    reports = {}
    for name in names:
        if name in reused:
            print(f"reusing {results / f'{name}.json'}", flush=True)
            reports[name] = reused[name], "report of an earlier run"
            continue
        print(f"running bench/{name}.py ...", flush=True)
        reports[name] = run_script(name, args, results)
        print(f"  {reports[name][1].splitlines()[0]}", flush=True)
    carried = {} if args.quick else earlier_sections(args.out)
    hand_notes = None if args.quick else earlier_hand_notes(args.out)
    atomic_write_text(args.out, render(reports, args.quick, sys.argv[1:] if argv is None else argv, carried,
                                       hand_notes))
    if args.json is not None:
        atomic_write_text(args.json, json.dumps({name: report for name, (report, _) in reports.items()}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
