"""What a person sees during training: a periodic line, a JSONL metrics log, TensorBoard.

``train.log`` and ``metrics.jsonl`` are append-only logs. Each line is written with a
single ``write`` on a descriptor opened with ``O_APPEND``, so a kill leaves whole lines
(at worst the last one torn, which :func:`read_metrics` ignores); a resumed run first
rewrites ``metrics.jsonl`` atomically without the records after its checkpoint.
Only the main process logs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from nmt_cli.fileio import atomic_write_text, write_failure
from nmt_cli.progress import format_duration

__all__ = ["RunLog", "read_metrics", "format_metric", "progress_line"]

METRICS = "metrics.jsonl"
TRAIN_LOG = "train.log"


#: decimals each metric is shown with, in the progress line and the validation line alike;
#: an objective's own terms (``Objective.terms``) are shown like the loss
METRIC_DECIMALS = {"loss": 4, "ppl": 2, "bleu": 2, "aer": 4}
TERM_DECIMALS = 4


def format_metric(name: str, value: float) -> str:
    """``("bleu", 0.0038)`` -> ``bleu 0.00``: one rounding per metric, in every line that shows it."""
    return f"{name} {value:.{METRIC_DECIMALS.get(name, TERM_DECIMALS)}f}"


def progress_line(record: dict[str, Any], max_steps: int, eta: float | None, terms: tuple[str, ...] = ()) -> str:
    """The periodic line, e.g.
    ``step 120/400 | epoch 3 | loss 3.4120 | ppl 30.33 | lr 4.100e-04 | 12,345 tok/s | elapsed 0:05:12 | eta 0:38:02``;
    the objective's ``terms`` (guided alignment's ``align_loss``) follow ``ppl``.
    """
    total = f"/{max_steps}" if max_steps else ""
    scaling = ""
    if "loss_scale" in record:  # fp16
        skipped = record["skipped_updates"]
        scaling = f" | loss scale {record['loss_scale']:g}" + (f", {skipped} overflow(s) skipped" if skipped else "")
    losses = " | ".join(format_metric(name, record[name]) for name in ("loss", "ppl", *terms))
    return (
        f"step {record['step']}{total} | epoch {record['epoch']} | {losses} | lr {record['lr']:.3e} | "
        f"{record['tokens_per_s']:,.0f} tok/s{scaling} | "
        f"elapsed {format_duration(record['elapsed'])} | eta {format_duration(eta)}"
    )


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of ``<run>/metrics.jsonl`` in order (a torn last line is skipped)."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class _AppendOnlyFile:
    """One ``os.write`` per line on an ``O_APPEND`` descriptor."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # less the umask

    def write_line(self, text: str) -> None:
        try:
            os.write(self.fd, (text.rstrip("\n") + "\n").encode("utf-8"))
        except OSError as exc:  # a full disk: one line naming the log
            raise write_failure(self.path, exc) from None

    def close(self) -> None:
        os.close(self.fd)


class RunLog:
    """Progress lines to stderr and ``train.log``; records to ``metrics.jsonl`` and TensorBoard.

    A disabled log (processes other than rank 0) does nothing.
    """

    def __init__(self, run_dir: str | os.PathLike, enabled: bool = True, stream: TextIO | None = None,
                 resume_step: int | None = None):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._log = self._metrics = None
        self._tensorboard = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            kept = [r for r in read_metrics(run_dir) if r.get("step", 0) <= resume_step]
            atomic_write_text(run_dir / METRICS, "".join(json.dumps(r) + "\n" for r in kept))
        self._log = _AppendOnlyFile(run_dir / TRAIN_LOG)
        self._metrics = _AppendOnlyFile(run_dir / METRICS)
        self._tensorboard = _tensorboard_writer(run_dir / "tensorboard", resume_step)

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        print(text, file=self.stream, flush=True)
        self._log.write_line(text)

    def record(self, record: dict[str, Any]) -> None:
        """Append one JSON record (``kind``, ``step`` and numbers) to the metrics log."""
        if not self.enabled:
            return
        self._metrics.write_line(json.dumps(record))
        if self._tensorboard is not None:
            for key, value in record.items():
                if key not in ("kind", "step") and isinstance(value, (int, float)):
                    self._tensorboard.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def close(self) -> None:
        for handle in (self._log, self._metrics):
            if handle is not None:
                handle.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        self._log = self._metrics = self._tensorboard = None


def _tensorboard_writer(log_dir: Path, resume_step: int | None) -> Any:
    """A ``SummaryWriter`` when TensorBoard is installed (``pip install nmt-cli[tensorboard]``), else ``None``.

    A resumed run purges the events after its checkpoint (``purge_step``), as it drops those
    records from ``metrics.jsonl``: the steps it repeats are shown once, with their new values.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(log_dir), purge_step=None if resume_step is None else resume_step + 1)
