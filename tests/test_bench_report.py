"""``bench/run_all.py``: a run of a few scripts carries the other sections over as they are
(older ones marked with the machine of their page, never twice), every section starts with the
header naming its commit, machine and regenerating command, and the options a long section
needs are passed on to the scripts that take them. No benchmark runs here."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from run_all import CARRIED, earlier_sections  # noqa: E402  (bench/ is not a package)

from tests.test_docs import BENCHMARKS, _slug  # noqa: E402  (the docs' own check of GitHub's anchors)

EARLIER = """# Benchmarks

## Machine

|  |  |
|---|---|
| cpu | Old CPU |

## Training speed

| a | b |
|---|---|
| 1 | 2 |

_`bench/train_speed.py`, 10 s, commit abc_

## Translation speed

| c |
|---|
| 3 |

_`bench/translate_speed.py`, 5 s_
"""


def test_sections_carry_their_machine_once(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(EARLIER, encoding="utf-8")
    sections = earlier_sections(path)
    assert sorted(sections) == ["train_speed", "translate_speed"]
    assert sections["train_speed"].startswith("## Training speed\n") and "| 1 | 2 |" in sections["train_speed"]
    assert sections["train_speed"].rstrip().endswith(f"{CARRIED}, whose Machine table named: Old CPU._")
    carried_once = "\n".join(["# Benchmarks", "", "## Machine", "", "| cpu | New CPU |", "",
                              sections["train_speed"]])
    path.write_text(carried_once, encoding="utf-8")
    again = earlier_sections(path)["train_speed"]
    assert again.count(CARRIED) == 1 and "Old CPU" in again and "New CPU" not in again
    assert earlier_sections(tmp_path / "missing.md") == {}


def test_a_run_of_reused_reports_installs_no_peer(tmp_path: Path, monkeypatch) -> None:
    """Re-rendering from earlier full-mode reports must not build the peers (fairseq compiles for minutes)."""
    import json

    import run_all

    report = {"script": "prepare_scale", "title": "nmt prepare at scale", "columns": ["pairs"], "rows": [["1"]],
              "notes": [], "quick": False, "measured_at": {"commit": "abc", "machine": "Old CPU", "utc": "then"}}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "prepare_scale.json").write_text(json.dumps(report))
    installed = []
    monkeypatch.setattr(run_all, "install", installed.append)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--scripts", "prepare_scale", "--reuse", "--work", str(tmp_path),
                                      "--out", str(tmp_path / "BENCHMARKS.md")])
    run_all.main()
    assert installed == []
    page = (tmp_path / "BENCHMARKS.md").read_text()
    assert "`bench/prepare_scale.py`, report of an earlier run, measured then:" in page
    assert "- commit: abc (clean tree)\n- machine: Old CPU; GPU: not recorded" in page


def test_each_variant_of_a_script_keeps_its_own_section(tmp_path: Path, monkeypatch) -> None:
    """A run at non-default settings (align_quality --steps 10000) adds its section beside the
    default one and replaces only an earlier section of the same variant."""
    import json

    import run_all
    from run_all import section_key

    earlier = EARLIER + """
## Word alignment

| d |
|---|
| 2k |

_`bench/align_quality.py`, 20 s; commit abc_

## Word alignment, 10,000 training steps

| d |
|---|
| old 10k |

_`bench/align_quality.py` (10,000 training steps), 30 s; commit abc_
"""
    out = tmp_path / "BENCHMARKS.md"
    out.write_text(earlier, encoding="utf-8")
    assert sorted(earlier_sections(out)) == ["align_quality", "align_quality (10,000 training steps)", "train_speed",
                                              "translate_speed"]
    assert section_key("align_quality", "10,000 training steps") == "align_quality (10,000 training steps)"
    report = {"script": "align_quality", "title": "Word alignment", "variant": "10,000 training steps",
              "columns": ["d"], "rows": [["new 10k"]], "notes": [], "quick": False,
              "measured_at": {"commit": "def", "machine": "New CPU", "utc": "now"}}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "align_quality.json").write_text(json.dumps(report))
    monkeypatch.setattr(run_all, "install", lambda peer: None)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--scripts", "align_quality", "--reuse", "--work", str(tmp_path),
                                      "--out", str(out)])
    run_all.main()
    text = out.read_text(encoding="utf-8")
    assert "| 2k |" in text and "| new 10k |" in text and "old 10k" not in text
    assert text.index("## Word alignment\n") < text.index("## Word alignment, 10,000 training steps\n")
    assert "`bench/align_quality.py` (10,000 training steps), report of an earlier run, measured now:" in text
    assert text.count("## Training speed") == 1 and text.count("## Word alignment\n") == 1
    again = earlier_sections(out)  # and the page reads back the same sections
    assert "| new 10k |" in again["align_quality (10,000 training steps)"] and "| 2k |" in again["align_quality"]


def test_a_ratio_shows_the_spread_of_the_runs_made_side_by_side():
    from common import fmt_ratio_spread

    # three runs: all of them, which hold the median ratio with 1 - 2 / 2^3 = 75%
    assert fmt_ratio_spread([8.0, 9.0, 10.0], [10.0, 10.0, 10.0]) == "0.90x (0.80-1.00x, 75%)"
    # run k of one system is compared with run k of the other, not median with median
    assert fmt_ratio_spread([4.0, 8.0], [5.0, 10.0]) == "0.80x (0.80-0.80x, 50%)"
    # nine runs: the 2nd and 8th ratios hold the median with 1 - 2 (1 + 9) / 2^9 = 96%
    ours = [10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert fmt_ratio_spread(ours, [1.0] * 9) == "5.00x (2.00-8.00x, 96%)"
    assert fmt_ratio_spread([5.0], [10.0]) == "0.50x"  # one run: no spread to show
    assert fmt_ratio_spread([5.0], []) == "-" and fmt_ratio_spread([], [1.0]) == "-"


def test_the_median_interval_is_the_narrowest_that_holds_the_confidence():
    from common import median_interval

    # 1 - 2 P(Binomial(n, 1/2) < k) for the k-th lowest and highest of n values
    assert median_interval([3.0, 1.0, 2.0, 5.0, 4.0]) == (1.0, 5.0, 1 - 2 / 32)  # below 95%: the whole range
    assert median_interval(range(6)) == (0, 5, 1 - 2 / 64)
    assert median_interval(range(9)) == (1, 7, 1 - 2 * (1 + 9) / 512)
    assert median_interval(range(17)) == (4, 12, 1 - 2 * sum(math.comb(17, i) for i in range(5)) / 2**17)
    low, high, held = median_interval(range(17), confidence=0.99)
    assert (low, high) == (2, 14) and held >= 0.99  # (3, 13) would hold it with 98.7%


def a_report(script: str = "align_quality", command: str = "", **made) -> dict:
    return {"script": script, "title": "Word alignment", "variant": "", "columns": ["d"], "rows": [["1"]],
            "notes": ["how"], "quick": False,
            "measured_at": {"commit": "abc1234", "clean": True, "utc": "2026-11-27 09:48 UTC",
                            "machine": "AMD EPYC (AVX2, AVX-512), 2 cores", "gpu": "none", "command": command, **made}}


def test_the_options_a_long_section_needs_are_passed_on_to_the_scripts_that_take_them(tmp_path, monkeypatch):
    import json

    import pytest
    import run_all
    from common import Measured

    commands = []

    def fake_run_measured(command, log, cwd=None, **kwargs):
        commands.append([str(part) for part in command])
        json_path = Path(commands[-1][commands[-1].index("--json") + 1])
        script = Path(commands[-1][1]).stem
        json_path.write_text(json.dumps(a_report(script, f"python bench/{script}.py")))
        return Measured(0, 1.0, 10.0, log)

    monkeypatch.setattr(run_all, "run_measured", fake_run_measured)
    monkeypatch.setattr(run_all, "install", lambda peer: None)
    out = tmp_path / "BENCHMARKS.md"
    run_all.main(["--scripts", "align_quality,train_speed", "--work", str(tmp_path), "--out", str(out),
                  "--steps", "10000", "--seeds", "2", "--corpora", "multi30k+tatoeba", "--reuse-models",
                  "--device", "cuda", "--models", "rnn", "--repeats", "15"])
    by_script = {Path(command[1]).stem: command[2:] for command in commands}
    align = by_script["align_quality"]
    assert align[align.index("--steps") + 1] == "10000" and align[align.index("--seeds") + 1] == "2"
    assert align[align.index("--corpora") + 1] == "multi30k+tatoeba" and "--reuse-models" in align
    assert align[align.index("--device") + 1] == "cuda" and align[align.index("--repeats") + 1] == "15"
    assert "--models" not in align  # train_speed's, not align_quality's
    train = by_script["train_speed"]
    assert train[train.index("--models") + 1] == "rnn" and "--steps" not in train and "--reuse-models" not in train
    with pytest.raises(SystemExit):  # an option for none of the scripts named is an error, not ignored
        run_all.main(["--scripts", "train_speed", "--work", str(tmp_path), "--out", str(out), "--steps", "5"])


def test_the_regenerating_command_is_a_run_all_command_when_run_all_passes_every_option():
    from run_all import regenerate_command

    made_by = "python bench/align_quality.py --steps 10000 --seeds 2 --reuse-models --repeats 15"
    assert regenerate_command("align_quality", made_by) == \
        "python bench/run_all.py --scripts align_quality --steps 10000 --seeds 2 --reuse-models --repeats 15"
    assert regenerate_command("train_speed", "python bench/train_speed.py") == \
        "python bench/run_all.py --scripts train_speed"
    assert regenerate_command("prepare_scale", "python bench/prepare_scale.py --budget-minutes 240") == \
        "python bench/run_all.py --scripts prepare_scale --budget-minutes 240"
    # an option run_all does not pass on: the script as it was run, then rendered from its report
    assert regenerate_command("translate_speed", "python bench/translate_speed.py --beams 5") == \
        ("python bench/translate_speed.py --beams 5 --json bench/.work/results/translate_speed.json && "
         "python bench/run_all.py --scripts translate_speed --reuse")


def test_every_section_starts_with_its_commit_machine_and_commands(tmp_path, monkeypatch):
    import json

    import run_all

    (tmp_path / "results").mkdir()
    made_by = "python bench/align_quality.py --steps 10000 --reuse-models"
    report = a_report(command=made_by, clean=False, gpu="NVIDIA H100 80GB HBM3 x 1")
    report["variant"] = "10,000 training steps"
    (tmp_path / "results" / "align_quality.json").write_text(json.dumps(report))
    monkeypatch.setattr(run_all, "install", lambda peer: None)
    out = tmp_path / "BENCHMARKS.md"
    run_all.main(["--scripts", "align_quality", "--reuse", "--work", str(tmp_path), "--out", str(out)])
    page = out.read_text(encoding="utf-8")
    section = page[page.index("## Word alignment, 10,000 training steps"):]
    assert section.splitlines()[2:9] == [
        "`bench/align_quality.py` (10,000 training steps), report of an earlier run, measured 2026-11-27 09:48 UTC:",
        "",
        "- commit: abc1234 with uncommitted changes (`git describe --dirty`): the tree was not that commit",
        "- machine: AMD EPYC (AVX2, AVX-512), 2 cores; GPU: NVIDIA H100 80GB HBM3 x 1",
        f"- made by: `{made_by}`",
        "- regenerate: `python bench/run_all.py --scripts align_quality --steps 10000 --reuse-models`",
        ""]
    # the page's own header claims only what holds for every section: no Machine table of one run
    assert "## Machine" not in page and "Sections were measured at different commits, on different machines" in page
    again = run_all.earlier_sections(out)  # read back as it is, with no carried-over mark added
    assert list(again) == ["align_quality (10,000 training steps)"]
    assert run_all.CARRIED not in again["align_quality (10,000 training steps)"]


def test_a_report_names_the_commit_its_code_was_loaded_from_and_a_move_of_head_makes_it_unclean(monkeypatch):
    import common

    monkeypatch.setattr(common, "LOADED_FROM", ("abc1234", True))
    monkeypatch.setattr(common, "git_commit", lambda **_: ("abc1234", True))
    assert common.measured_at([])["commit"] == "abc1234" and common.measured_at([])["clean"] is True
    monkeypatch.setattr(common, "git_commit", lambda **_: ("def5678", True))  # a merge landed while it ran
    made = common.measured_at([])
    assert made["commit"] == "abc1234-dirty" and made["clean"] is False


def test_files_a_script_writes_under_bench_results_do_not_make_its_tree_unclean(tmp_path, monkeypatch):
    import subprocess

    import common

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "links.align").write_text("0-0\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    monkeypatch.setattr(common, "REPO", tmp_path)
    assert common.git_commit()[1] is True
    (tmp_path / "bench" / "results" / "links.align").write_text("1-1\n")  # a bench run's own output
    assert common.git_commit()[1] is False and common.git_commit(ignore_results=True)[1] is True
    (tmp_path / "code.py").write_text("x = 2\n")  # a change to the code measured
    assert common.git_commit(ignore_results=True)[1] is False


def test_a_report_records_the_tree_the_machine_and_its_command_without_where_files_go(monkeypatch):
    import common

    monkeypatch.setattr(common, "LOADED_FROM", ("abc1234", False))
    made = common.measured_at([str(common.BENCH_DIR / "align_quality.py"), "--json", "/tmp/x.json", "--work=/tmp/w",
                               "--steps", "10000"])
    assert made["commit"] == "abc1234-dirty" and made["clean"] is False
    assert made["command"] == "python bench/align_quality.py --steps 10000"
    assert made["cores"] and made["cpu"] and made["vector_extensions"] and made["gpu"]
    assert made["machine"] == f"{made['cpu']} ({made['vector_extensions']}), {made['cores']} cores"
    assert common.commit_text({"commit": "abc-dirty"}).startswith("abc with uncommitted changes")
    assert common.commit_text({"commit": "abc"}) == "abc (clean tree)" and common.commit_text({}) == "not recorded"


def test_a_section_kept_beside_one_of_the_same_variant_and_the_hand_notes_survive_a_new_run(tmp_path, monkeypatch):
    """Two sections of one script and variant, told apart by their headings (the second measured on
    another machine and moved in by hand), and the page's hand-written notes: a new run of that
    script replaces the first section only, and everything else is carried over as it was."""
    import json

    import run_all

    kept = ("## Word alignment, AMD EPYC with AVX2\n\n"
            "`bench/align_quality.py`, 9 s, measured 2026-11-20 10:00 UTC:\n\n- machine: AMD EPYC (AVX2), 2 cores\n\n"
            "| d |\n|---|\n| other machine |\n")
    notes = f"{run_all.HAND_NOTES}\n\nThe second alignment section ran on another machine and was moved in by hand.\n"
    page = ("# Benchmarks\n\nWritten by hand.\n\n" + notes + "\n"
            "## Word alignment\n\n`bench/align_quality.py`, 8 s, measured 2026-11-20 09:00 UTC:\n\n"
            "- machine: Intel Xeon, 2 cores\n\n| d |\n|---|\n| first machine |\n\n" + kept)
    out = tmp_path / "BENCHMARKS.md"
    out.write_text(page, encoding="utf-8")
    sections = run_all.earlier_sections(out)
    assert list(sections) == ["align_quality", run_all.kept_key("align_quality", "Word alignment, AMD EPYC with AVX2")]
    assert run_all.earlier_hand_notes(out) == notes

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "align_quality.json").write_text(json.dumps(a_report()))
    monkeypatch.setattr(run_all, "install", lambda peer: None)
    run_all.main(["--scripts", "align_quality", "--reuse", "--work", str(tmp_path), "--out", str(out)])
    text = out.read_text(encoding="utf-8")
    assert "first machine" not in text and "| 1 |" in text  # the new run replaced its own section
    assert kept.rstrip() in text and notes.rstrip() in text  # and dropped nothing else
    assert text.index("## Versions") < text.index(run_all.HAND_NOTES) < text.index("## Word alignment\n")
    assert "[Sections moved in by hand](#sections-moved-in-by-hand)" in text
    run_all.main(["--scripts", "align_quality", "--reuse", "--work", str(tmp_path), "--out", str(out)])
    again = out.read_text(encoding="utf-8")
    assert again.count(run_all.HAND_NOTES) == 1 and again.count(kept.rstrip()) == 1


def test_the_machine_is_named_by_its_cpu_and_widest_extension():
    from run_all import machine_name

    assert machine_name("- machine: Intel(R) Xeon(R) Processor (AVX2, FMA, AVX-512, AVX-512 BF16, AMX, AMX-BF16), "
                        "2 cores; GPU: none") == "Intel Xeon with AMX"
    assert machine_name("- machine: AMD EPYC (AVX2, FMA, AVX-512, AVX-512 BF16), 2 cores") == \
        "AMD EPYC with AVX-512 BF16"
    assert machine_name("- machine: Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz (AVX2, FMA), 12 cores") == \
        "Intel Core i7-8700 with AVX2"
    assert machine_name("- machine: AMD EPYC, 2 cores; load average 1.0") == "AMD EPYC"
    assert machine_name("- machine: not recorded by the report") == "machine not recorded"
    assert machine_name("- commit: abc") == "machine not recorded"


def test_the_contents_lists_every_section_newest_first_and_leads_to_it(tmp_path: Path, monkeypatch) -> None:
    """Sections moved in by hand carry a heading of their own; the contents names each by what its
    heading adds, orders a script's sections by when they were measured, and `--contents` makes it
    again in place without touching a section."""
    import run_all

    def section(heading: str, marker: str, day: str, machine: str, commit: str) -> str:
        return (f"## {heading}\n\n{marker}, 10 s, measured {day} UTC:\n\n- commit: {commit} (clean tree)\n"
                f"- machine: {machine}, 2 cores; GPU: none\n\n| a |\n|---|\n| 1 |\n\n- how\n")

    xeon, epyc = "Intel(R) Xeon(R) Processor (AVX2, AVX-512, AMX)", "AMD EPYC (AVX2, FMA)"
    page = "\n".join(["# Benchmarks", "", "Intro.", "", "## Versions", "", "| toolkit |", "|---|", "",
                      section("Training speed (tok/s)", "`bench/train_speed.py`", "2026-11-28 06:27", epyc, "63ac36b"),
                      section("Training speed (tok/s), models tiny, fifteen runs",
                              "`bench/train_speed.py` (models tiny, fifteen runs)", "2026-12-05 10:35", xeon,
                              "02253d6"),
                      section("Training speed (tok/s), models base", "`bench/train_speed.py` (models base)",
                              "2026-12-04 09:00", xeon, "1abd199"),
                      section("Word alignment (AER), 10,000 steps", "`bench/align_quality.py` (10,000 steps)",
                              "2026-11-27 01:00", epyc, "5e24c9f"),
                      "## Not in this run", "", "- `bench/serve_load.py`", ""])
    made = run_all.with_contents(page)
    assert made.index("## Contents") < made.index("## Versions")
    listed = made[made.index("## Contents"):made.index("## Versions")]
    lines = [line for line in listed.splitlines() if line.startswith(("- ", "  - "))]
    assert lines[0] == "- Training speed (tok/s) (`bench/train_speed.py`)"
    assert [line.split("]")[0] for line in lines[1:4]] == \
        ["  - [models tiny, fifteen runs", "  - [models base", "  - [default settings"]
    assert lines[1].endswith("): 2026-12-05, Intel Xeon with AMX, 02253d6")
    assert lines[3].endswith("): 2026-11-28, AMD EPYC with AVX2, 63ac36b")
    assert lines[4] == "- Word alignment (AER) (`bench/align_quality.py`)"
    assert "Not in this run" not in listed
    headings = {_slug(heading) for heading in re.findall(r"^## (.*)$", made, re.M)}
    targets = re.findall(r"\]\(#([^)]+)\)", listed)
    assert len(targets) == 4 and set(targets) <= headings
    assert made.replace(listed, "") == page  # every other byte as it was
    assert run_all.with_contents(made) == made  # made again, the same

    out = tmp_path / "BENCHMARKS.md"
    out.write_text(page, encoding="utf-8")
    def install(peer: str) -> None:
        raise AssertionError(f"--contents installs nothing, not {peer}")

    monkeypatch.setattr(run_all, "install", install)
    run_all.main(["--contents", "--out", str(out)])
    assert out.read_text(encoding="utf-8") == made


def test_the_committed_benchmarks_page_has_its_contents_up_to_date():
    """A section moved in by hand needs `python bench/run_all.py --contents` after it; this says so
    (that its links lead to headings, tests/test_docs.py checks with every page's)."""
    from run_all import with_contents

    page = BENCHMARKS.read_text(encoding="utf-8")
    assert with_contents(page) == page, "BENCHMARKS.md: run `python bench/run_all.py --contents`"
