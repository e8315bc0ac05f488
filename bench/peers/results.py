"""What a runner hands back: training and translation figures, or why there are none."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common import Measured, median_after_warmup, tail


class PeerRunFailed(RuntimeError):
    """A toolkit's command failed; the message ends with the tail of its log."""

    def __init__(self, toolkit: str, measured: Measured):
        super().__init__(f"{toolkit} exited with {measured.returncode}; log {measured.log}:\n{tail(measured.log)}")


@dataclass
class TrainResult:
    """Training speed from the toolkit's own log, first interval dropped as warm-up."""

    toolkit: str
    interval_tokens_per_second: list[float]
    tokens_per_step: float | None
    parameters: int | None
    measured: Measured
    model: Path

    @property
    def tokens_per_second(self) -> float:
        return median_after_warmup(self.interval_tokens_per_second)


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


def count_output(path: Path) -> tuple[int, int]:
    """(sentences, pieces) of a piece-tokenised hypothesis file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return len(lines), sum(len(line.split()) for line in lines)


def check(toolkit: str, measured: Measured) -> Measured:
    """Raise :class:`PeerRunFailed` when the command did not exit cleanly."""
    if measured.returncode != 0:
        raise PeerRunFailed(toolkit, measured)
    return measured
