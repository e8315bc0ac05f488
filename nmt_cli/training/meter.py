"""Loss, tokens and time since the last progress line, without a device sync per step."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

import torch

from nmt_cli.training.distributed import DistributedContext

__all__ = ["IntervalMeter"]


class IntervalMeter:
    """Accumulates one logging interval; loss sums stay on the device until :meth:`take`.

    Its :meth:`state` goes into checkpoints so a resumed run prints the same averages as
    an uninterrupted one (the saved sums are global; only rank 0 takes them back).
    """

    def __init__(self, context: DistributedContext, saved: dict[str, Any] | None = None):
        self.context = context
        saved = saved or {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0, "seconds": 0.0}
        share = 1.0 if context.is_main else 0.0
        sums = [saved["loss_sum"], saved["nll_sum"], saved.get("alignment_sum", 0.0)]
        self.sums = torch.tensor([value * share for value in sums],
                                 dtype=torch.float64, device=context.device)  # (3,): loss, NLL, alignment
        self.tokens = int(saved["tokens"])
        self.updates = int(saved.get("updates", 0))  # checkpoints before it was saved: 0
        self.skipped = int(saved.get("skipped", 0))
        self.start = time.perf_counter() - saved["seconds"]

    def add_batch(self, loss_sum: torch.Tensor, nll_sum: torch.Tensor,
                  alignment_sum: torch.Tensor | None = None) -> None:
        """The batch's summed loss and NLL (and alignment cross-entropy, under guided alignment)."""
        alignment = torch.zeros_like(nll_sum) if alignment_sum is None else alignment_sum.to(nll_sum.dtype)
        self.sums += torch.stack((loss_sum.detach(), nll_sum.detach(), alignment.detach()))

    def add_update(self, tokens: int, applied: bool = True) -> None:
        """``tokens``: target tokens of the update over all processes; ``applied``: False when
        fp16 loss scaling found overflowed gradients and skipped the optimizer step."""
        self.tokens += tokens
        self.updates += 1
        self.skipped += not applied

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Keep validation and checkpoint time out of the throughput."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.start += time.perf_counter() - begin

    def take(self) -> dict[str, float]:
        """Totals over all processes (loss, NLL and alignment sums, tokens, seconds, updates,
        skipped updates), then reset."""
        loss_sum, nll_sum, alignment_sum = self.context.sum_tensor(self.sums).tolist()
        now = time.perf_counter()
        totals = {"loss_sum": loss_sum, "nll_sum": nll_sum, "alignment_sum": alignment_sum, "tokens": self.tokens,
                  "seconds": max(now - self.start, 1e-9), "updates": self.updates, "skipped": self.skipped}
        self.sums.zero_()
        self.tokens = self.updates = self.skipped = 0
        self.start = now
        return totals

    def state(self) -> dict[str, float]:
        """The unfinished interval, for a checkpoint (a collective: every rank calls it)."""
        loss_sum, nll_sum, alignment_sum = self.context.sum_tensor(self.sums).tolist()
        return {"loss_sum": loss_sum, "nll_sum": nll_sum, "alignment_sum": alignment_sum, "tokens": self.tokens,
                "seconds": time.perf_counter() - self.start, "updates": self.updates, "skipped": self.skipped}
