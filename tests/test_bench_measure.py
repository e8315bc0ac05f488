"""``bench/common.py``'s ``run_measured``: the peak RSS it reports is the command's own.

On Linux a child's ``ru_maxrss`` starts from the high-water RSS of the process that
spawned it, so a bench script that had grown would have put a floor under every figure
it measured afterwards (it did: after counting Transformer-base FLOPs in-process, every
later training run reported the same 1,707 MB).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from common import run_measured  # noqa: E402  (bench/ is not a package)

GROWN_MB = 600


def allocate(megabytes: int) -> str:
    """Python that keeps ``megabytes`` of touched memory resident until it exits."""
    return f"block = bytearray({megabytes} << 20)\nfor i in range(0, len(block), 4096): block[i] = 1\n"


def test_the_peak_rss_is_the_commands_own_after_this_process_has_grown(tmp_path: Path) -> None:
    grown = bytearray(GROWN_MB << 20)
    for index in range(0, len(grown), 4096):
        grown[index] = 1  # resident now: this process's high-water mark is above GROWN_MB
    small = run_measured([sys.executable, "-c", "pass"], tmp_path / "small.log")
    large = run_measured([sys.executable, "-c", allocate(200)], tmp_path / "large.log")
    assert small.returncode == 0 and large.returncode == 0
    assert 1 < small.peak_rss_mb < 100  # an idle interpreter, not this process's GROWN_MB
    assert 200 < large.peak_rss_mb < 300  # its 200 MB block plus the interpreter
    assert not list(tmp_path.glob("*.maxrss"))  # the launcher's report is cleaned up


def test_the_commands_exit_status_and_output_come_through(tmp_path: Path) -> None:
    log, output = tmp_path / "run.log", tmp_path / "out.txt"
    script = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
    measured = run_measured([sys.executable, "-c", script], log, stdout=output)
    assert measured.returncode == 3
    assert output.read_text() == "to stdout\n" and log.read_text() == "to stderr\n"
    assert measured.seconds > 0
