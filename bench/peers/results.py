"""What a runner hands back: training and translation figures, or why there are none."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common import Measured, tail


class PeerRunFailed(RuntimeError):
    """A toolkit's command failed; the message ends with the tail of its log."""

    def __init__(self, toolkit: str, measured: Measured):
        super().__init__(f"{toolkit} exited with {measured.returncode}; log {measured.log}:\n{tail(measured.log)}")


@dataclass(frozen=True)
class Progress:
    """A toolkit's progress line as this bench saw it: ``update`` updates done at ``seconds``
    (this process's clock, from the command's start), ``tokens`` target tokens trained on
    since the previous line (the toolkit's own count of the batches' target tokens)."""

    update: int
    seconds: float
    tokens: float


@dataclass
class TrainResult:
    """Training speed by this bench's clock: the target tokens of every update after the
    first progress line, over the time between that line and the last (the first interval,
    start-up included, is the warm-up)."""

    toolkit: str
    progress: list[Progress]
    parameters: int | None
    measured: Measured
    model: Path

    @property
    def timed_updates(self) -> int:
        return self.progress[-1].update - self.progress[0].update if len(self.progress) > 1 else 0

    @property
    def tokens_per_second(self) -> float:
        if self.timed_updates == 0:
            raise ValueError(f"{self.toolkit}: fewer than two progress lines; nothing was timed after the warm-up")
        timed = self.progress[1:]
        return sum(p.tokens for p in timed) / (timed[-1].seconds - self.progress[0].seconds)

    @property
    def tokens_per_step(self) -> float | None:
        """Mean target tokens per update over the whole run."""
        return sum(p.tokens for p in self.progress) / self.progress[-1].update if self.progress else None


def progress_lines(stamps: list[tuple[float, str]],
                   parse: Callable[[str], tuple[int, float] | None]) -> list[Progress]:
    """:class:`Progress` from stamped lines; ``parse(line)`` gives ``(updates done, mean target
    tokens per update over the interval the line closes)`` for a progress line, else None."""
    progress, previous = [], 0
    for seconds, line in stamps:
        parsed = parse(line)
        if parsed:
            update, tokens_per_update = parsed
            progress.append(Progress(update, seconds, tokens_per_update * (update - previous)))
            previous = update
    return progress


@dataclass
class TranslateResult:
    """Decoding speed: time as the toolkit reports it (model load excluded), outputs counted by us."""

    toolkit: str
    sentences: int
    output_tokens: int
    seconds: float
    hypotheses: Path
    measured: Measured

    @property
    def sentences_per_second(self) -> float:
        return self.sentences / self.seconds

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds


def read_pieces(path: Path) -> list[list[str]]:
    """Each sentence's pieces in a piece-tokenised hypothesis file (a line of space-separated pieces a sentence)."""
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()]


def count_output(path: Path) -> tuple[int, int]:
    """(sentences, pieces) of a piece-tokenised hypothesis file."""
    pieces = read_pieces(path)
    return len(pieces), sum(len(sentence) for sentence in pieces)


def check(toolkit: str, measured: Measured, stopped: bool = False) -> Measured:
    """Raise :class:`PeerRunFailed` when the command did not exit cleanly; ``stopped``: the bench
    ended it with SIGTERM (:class:`peers.arch.TimedRun`), so that ending counts as clean."""
    if measured.returncode != 0 and not (stopped and measured.returncode == -signal.SIGTERM):
        raise PeerRunFailed(toolkit, measured)
    return measured


def stop_after(seconds: float, is_progress: Callable[[str], object]) -> Callable[[float, str], bool]:
    """``run_measured``'s ``stop_when`` for a :class:`peers.arch.TimedRun`: true at the first
    progress line (``is_progress`` gives something other than None) stamped after ``seconds``."""
    return lambda stamp, line: stamp > seconds and is_progress(line) is not None
