"""Running one step of the alignment bench (an ``nmt`` command, eflomal) with the run's threads."""

from __future__ import annotations

from pathlib import Path

from alignment_bench.settings import Settings
from common import REPO, Measured, run_measured, tail, thread_env


def run_step(command: list, log: Path, settings: Settings, stdout: Path | None = None) -> Measured:
    """Run a step with the bench's threads; stop the bench with the log's tail when it fails."""
    measured = run_measured(command, log, env=thread_env(settings.threads), cwd=REPO, stdout=stdout)
    if measured.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command[2:5]))} failed (exit {measured.returncode}):\n{tail(log)}")
    return measured
