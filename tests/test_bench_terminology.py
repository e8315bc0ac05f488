"""bench/terminology.py --quick on the tiny trained run: it runs, and constrained search puts the terms in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]



def run_quick(shared_data: Path, tmp_path: Path, script: str, *options: str) -> tuple[str, dict, list[dict]]:
    """``bench/SCRIPT.py --quick`` on the terminology dev set (skipped when it is missing): its
    stdout, its JSON report and the report's rows as dicts by column."""
    if not (shared_data / "terminology-deen" / "dev.terms.proper.jsonl").is_file():
        pytest.skip(f"{shared_data / 'terminology-deen'} is missing")
    report_path = tmp_path / f"{script}.json"
    command = [sys.executable, str(REPO / "bench" / f"{script}.py"), "--quick", *options, "--work", str(tmp_path),
               "--json", str(report_path)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    return done.stdout, report, [dict(zip(report["columns"], row)) for row in report["rows"]]

@pytest.mark.slow
def test_quick_terminology_bench_reports_every_row_and_constraints_place_the_terms(
        tiny_trained_run: Path, shared_data: Path, tmp_path: Path) -> None:
    stdout, report, rows = run_quick(shared_data, tmp_path, "terminology", "--model", str(tiny_trained_run),
                                     "--beams", "2,3", "--threads", "1")
    assert "| terms given | beam |" in stdout
    assert [(row["terms given"], row["beam"]) for row in rows] == [
        (mode, beam) for beam in ("2", "3") for mode in ("none", "proper", "random")]
    assert report["notes"][0].startswith("Measured at commit ")
    for row in rows:
        if row["terms given"] == "none":
            assert row["time vs no terms"] == "-"
        else:  # the quick lines' terms are all spellable: the search must place each one
            assert row["time vs no terms"].endswith("x")
            assert float(row[f"{row['terms given']}: success"].rstrip("%")) >= 99.0, row


@pytest.mark.slow
def test_quick_constrained_stop_bench_reports_both_halves_and_rules_and_places_the_terms(
        tiny_trained_run: Path, shared_data: Path, tmp_path: Path) -> None:
    _, report, rows = run_quick(shared_data, tmp_path, "constrained_stop", "--model", str(tiny_trained_run),
                                "--beams", "2", "--repeats", "1")
    halves = sorted({row["lines"] for row in rows})
    assert len(halves) == 2 and halves[0].startswith("dev 1-") and halves[1].startswith("test ")
    assert sorted((row["lines"], row["terms given"], row["stop"]) for row in rows) == sorted(
        [(half, "none", "-") for half in halves]
        + [(half, mode, stop) for half in halves for mode in ("proper", "random") for stop in ("exact", "now")])
    for row in rows:
        assert 0 <= float(row["at limit"].rstrip("%")) <= 100 and float(row["out tok/s"].replace(",", "")) > 0
        if row["terms given"] != "none":  # the quick lines' terms are all spellable: both rules place each one
            assert float(row["term success"].rstrip("%")) >= 99.0, row
            assert row["time vs no terms"].endswith("x")
        if row["stop"] == "now":
            same, total = map(int, row["outputs as exact"].split("/"))
            assert 0 <= same <= total
