"""``bench/run_all.py``: a run of a few scripts carries the other sections over, marked with
the machine that measured them, and never stacks a second mark on a section."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from run_all import CARRIED, earlier_sections  # noqa: E402  (bench/ is not a package)

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
    assert "report of an earlier run; commit abc, Old CPU, then" in (tmp_path / "BENCHMARKS.md").read_text()


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
    assert "_`bench/align_quality.py` (10,000 training steps), report of an earlier run; commit def" in text
    assert text.count("## Training speed") == 1 and text.count("## Word alignment\n") == 1
    again = earlier_sections(out)  # and the page reads back the same sections
    assert "| new 10k |" in again["align_quality (10,000 training steps)"] and "| 2k |" in again["align_quality"]


def test_a_ratio_shows_the_spread_of_the_runs_made_side_by_side():
    from common import fmt_ratio_spread

    assert fmt_ratio_spread([8.0, 9.0, 10.0], [10.0, 10.0, 10.0]) == "0.90x (0.80-1.00x)"
    # run k of one system is compared with run k of the other, not median with median
    assert fmt_ratio_spread([4.0, 8.0], [5.0, 10.0]) == "0.80x (0.80-0.80x)"
    assert fmt_ratio_spread([5.0], [10.0]) == "0.50x"  # one run: no spread to show
    assert fmt_ratio_spread([5.0], []) == "-" and fmt_ratio_spread([], [1.0]) == "-"
