"""What a person sees of one training session, made from the loop's numbers.

The line that says what runs, a record and a line per logging interval (the loss, the
objective's own terms by name, learning rate, throughput), a line per validation and the
last line, all through a :class:`~nmt_cli.training.progress.RunLog`; and the session's
throughput, validation and checkpoint time excluded.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.precision import Precision
from nmt_cli.progress import format_duration
from nmt_cli.training.distributed import DistributedContext
from nmt_cli.training.progress import RunLog, format_metric, progress_line
from nmt_cli.training.state import TrainingState

__all__ = ["SessionReport"]

#: the validation figures a validation line shows, in order (those present)
VALIDATION_METRICS = ("loss", "ppl", "bleu", "aer")


class SessionReport:
    """Lines and records of a session; ``terms`` are the objective's (``Objective.terms``),
    each logged as its sum per target token, like the loss."""

    def __init__(self, log: RunLog, config: Config, terms: tuple[str, ...]):
        self.log, self.config, self.terms = log, config, terms
        self.tokens, self.seconds = 0, 0.0  # logged intervals of this session

    @property
    def tokens_per_second(self) -> float:
        """Target tokens per second of this session's logged intervals (all processes)."""
        return self.tokens / self.seconds if self.seconds else 0.0

    def started(self, data: PreparedData, pairs: int, batches: tuple[int, bool], parameters: int,
                context: DistributedContext, precision: Precision, state: TrainingState,
                resumed_from: Path | None) -> None:
        """The first line: model, data, batches (per epoch, and whether that count is exact),
        device, precision, and where the run starts."""
        cfg = self.config.train
        corpora = data.manifest["splits"]["train"].get("corpora") or []
        mixed = "".join(f"{', ' if k else ' (mixed: '}{c['name']} {c['pairs']:,} x{c['weight']:g}"
                        for k, c in enumerate(corpora)) + (")" if corpora else "")
        where = f"resuming from {resumed_from.name}" if resumed_from else "fresh start"
        start = state.init_from
        if start is not None and not resumed_from:
            kept = " and ".join(start["kept"]) or "nothing else"
            where = f"fine-tuning from {start['checkpoint']} (step {start['step']}; kept {kept})"
        self.log.line(
            f"{self.config.model.arch}: {parameters:,} parameters | {pairs:,} training pairs{mixed} in "
            f"{'' if batches[1] else 'about '}{batches[0]:,} batches of <= {cfg.max_tokens} tokens | "
            f"device {context.device} x {context.world_size} | "
            f"{precision.name} | {where}"
        )
        if precision.note:
            self.log.line(f"note: {precision.note}")
        if precision.name == "fp16" and context.device.type == "cpu":
            self.log.line("note: fp16 on a CPU only tests loss scaling; it trains many times slower than fp32 "
                          "(bf16 or fp32 to train)")

    def interval(self, totals: dict[str, Any], step: int, epoch: int, lr: float, elapsed: float,
                 scaler: torch.amp.GradScaler | None) -> None:
        """Record and print a logging interval (:meth:`IntervalMeter.take`'s totals)."""
        tokens = max(totals["tokens"], 1)
        record = {
            "kind": "train",
            "step": step,
            "epoch": epoch,
            "loss": totals["loss_sum"] / tokens,
            "ppl": math.exp(min(totals["nll_sum"] / tokens, 100.0)),
            **{name: totals["terms"][name] / tokens for name in self.terms},
            "lr": lr,
            "tokens_per_s": totals["tokens"] / totals["seconds"],
            "tokens_per_update": totals["tokens"] / max(totals["updates"], 1),
            "elapsed": elapsed,
        }
        if scaler is not None:
            record["skipped_updates"] = totals["skipped"]
            record["loss_scale"] = scaler.get_scale()
        self.log.record(record)
        eta = self._eta(step, elapsed, totals["seconds"] / max(totals["updates"], 1))
        self.log.line(progress_line(record, self.config.train.max_steps, eta, self.terms))
        self.tokens += totals["tokens"]
        self.seconds += totals["seconds"]

    def _eta(self, step: int, elapsed: float, seconds_per_update: float) -> float | None:
        """Seconds until ``max_steps`` or ``max_minutes`` ends the run, whichever comes first."""
        cfg, remaining = self.config.train, []
        if cfg.max_steps > 0:
            remaining.append((cfg.max_steps - step) * seconds_per_update)
        if cfg.max_minutes > 0:
            remaining.append(cfg.max_minutes * 60 - elapsed)
        return max(min(remaining), 0.0) if remaining else None

    def validation(self, result: dict[str, Any], state: TrainingState, improved: bool) -> None:
        """Record and print a validation (:func:`~nmt_cli.training.validation.validate_on_main`)."""
        self.log.record({"kind": "valid", **result})
        shown = " | ".join(format_metric(name, result[name]) for name in VALIDATION_METRICS
                           if result.get(name) is not None)
        self.log.line(f"valid step {result['step']} | {shown} | {best_text(state.best)}"
                      + ("" if improved else f" ({state.bad_validations} without improvement)"))

    def finished(self, stop: str, step: int, epoch: int, elapsed: float, best: dict[str, Any] | None) -> None:
        """The last line: why and where the run stopped, its throughput and the best validation."""
        shown_best = f" | {best_text(best)}" if best else ""
        self.log.line(f"stopped ({stop}) at step {step}, epoch {epoch} | {self.tokens_per_second:,.0f} target tok/s | "
                      f"elapsed {format_duration(elapsed)}{shown_best}")


def best_text(best: dict[str, Any]) -> str:
    """``best bleu 27.31 at step 4000``."""
    return f"best {format_metric(best['metric'], best['value'])} at step {best['step']}"
