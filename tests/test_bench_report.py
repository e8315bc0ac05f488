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
