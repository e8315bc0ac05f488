"""``bench/common.py``'s ``run_measured``: the peak RSS it reports is the command's own, and
the progress lines it stamps carry this process's clock; ``peers.results``: training speed
by that clock.

On Linux a child's ``ru_maxrss`` starts from the high-water RSS of the process that
spawned it, so a bench script that had grown would have put a floor under every figure
it measured afterwards (it did: after counting Transformer-base FLOPs in-process, every
later training run reported the same 1,707 MB).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from common import UNBUFFERED, run_measured, thread_env  # noqa: E402  (bench/ is not a package)
from peers.results import PeerRunFailed, Progress, TrainResult, check, progress_lines, stop_after  # noqa: E402

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


def test_stamped_lines_arrive_with_the_time_they_were_printed(tmp_path: Path) -> None:
    """A child that prints a line, waits 0.6 s, prints another: the stamps are 0.6 s apart
    (the clock is this process's, so a toolkit's own timing never enters the figure)."""
    script = "import time\nprint('step 1', flush=False)\ntime.sleep(0.6)\nprint('step 2')\n"
    stamps: list[tuple[float, str]] = []
    measured = run_measured([sys.executable, "-c", script], tmp_path / "run.log", env=thread_env(1, UNBUFFERED),
                            stamps=stamps)
    assert measured.returncode == 0
    assert [line for _, line in stamps] == ["step 1", "step 2"]
    assert 0.55 <= stamps[1][0] - stamps[0][0] < 5.0  # unbuffered: the first line did not wait for the second
    assert (tmp_path / "run.log").read_text() == "step 1\nstep 2\n"


def test_training_speed_counts_the_updates_after_the_first_progress_line_over_the_time_since_it() -> None:
    stamps = [(3.0, "step 10 tok 100"), (3.5, "noise"), (4.0, "step 20 tok 120"), (6.0, "step 30 tok 80")]

    def parse(line: str) -> tuple[int, float] | None:
        words = line.split()
        return (int(words[1]), float(words[3])) if words[0] == "step" else None

    progress = progress_lines(stamps, parse)
    assert progress == [Progress(10, 3.0, 1000.0), Progress(20, 4.0, 1200.0), Progress(30, 6.0, 800.0)]
    result = TrainResult("toolkit", progress, None, measured=None, model=Path("."))
    assert result.timed_updates == 20
    assert result.tokens_per_second == (1200 + 800) / (6.0 - 3.0)  # start-up and the first interval untimed
    assert result.tokens_per_step == 3000 / 30


def test_a_timed_run_is_stopped_with_its_whole_process_group_at_the_first_progress_line_after_the_limit(
        tmp_path: Path) -> None:
    """A command whose child prints a progress line every 0.1 s forever: stopped at the first one
    stamped after 0.5 s, it ends (child included, or this would never return) with SIGTERM's status,
    which ``check`` accepts only for a stopped run."""
    child = "import time\nfor step in range(1, 10**6):\n    print(f'step {step}', flush=True)\n    time.sleep(0.1)\n"
    parent = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}])\n"
    stamps: list[tuple[float, str]] = []
    is_progress = lambda line: line if line.startswith("step") else None  # noqa: E731
    measured = run_measured([sys.executable, "-c", parent], tmp_path / "run.log", env=thread_env(1, UNBUFFERED),
                            stamps=stamps, stop_when=stop_after(0.5, is_progress))
    assert measured.returncode == -signal.SIGTERM
    stopping = next(index for index, (seconds, _) in enumerate(stamps) if seconds > 0.5)
    assert stamps[stopping - 1][0] <= 0.5 and len(stamps) <= stopping + 2  # at most a line in flight after it
    assert check("toolkit", measured, stopped=True) is measured
    with pytest.raises(PeerRunFailed):
        check("toolkit", measured)
