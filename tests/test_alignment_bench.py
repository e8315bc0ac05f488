"""`bench/align_quality.py --quick`: our side always runs; eflomal's rows when it is installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from peers.install import availability  # noqa: E402


@pytest.mark.slow
def test_quick_bench_prints_a_row_per_system(tmp_path):
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "align_quality.py"), "--quick", "--work", str(tmp_path),
         "--json", str(report_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(report_path.read_text(encoding="utf-8"))
    rows = {(row[0], row[1], row[2]): dict(zip(report["columns"], row)) for row in report["rows"]}
    ours = rows[("synthetic", "nmt-cli", "last layer, no shift (default)")]
    assert 0.0 <= float(ours["AER"]) <= 1.0 and float(ours["time s"]) > 0
    # symmetrised with the reverse model, read as picked by `nmt align sweep` on the dev gold
    both = next(row for (corpus, system, setting), row in rows.items()
                if system == "nmt-cli" and setting.startswith("both directions, grow-diag-final (picked on dev"))
    assert 0.0 <= float(both["AER"]) <= 1.0 and float(both["time s"]) > float(ours["time s"])
    assert (tmp_path / "align_quality" / "quick" / "synthetic" / "nmt-reverse" / "run").is_dir()
    assert (tmp_path / "align_quality" / "quick" / "synthetic" / "nmt" / "align-0" / "heatmaps").is_dir()
    usable, label = availability("eflomal")
    if usable:
        for reading in ("forward", "grow-diag-final"):
            assert 0.0 <= float(rows[("synthetic", label, reading)]["AER"]) <= 1.0
        assert ours["AER ratio vs eflomal (same reading)"].endswith("x")
        assert both["AER ratio vs eflomal (same reading)"].endswith("x")
    else:
        assert ("synthetic", "eflomal", label) in rows
    assert "| synthetic | nmt-cli |" in done.stdout
