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

    ``terms`` names the objective's extra sums (``Objective.terms``), summed beside the
    loss and the NLL. Its :meth:`state` goes into checkpoints so a resumed run prints the
    same averages as an uninterrupted one (the saved sums are global; only rank 0 takes
    them back).
    """

    def __init__(self, context: DistributedContext, terms: tuple[str, ...] = (),
                 saved: dict[str, Any] | None = None):
        self.context, self.terms = context, terms
        saved = saved or {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0, "seconds": 0.0}
        share = 1.0 if context.is_main else 0.0
        saved_terms = saved.get("terms", {})
        sums = [saved["loss_sum"], saved["nll_sum"], *(saved_terms.get(name, 0.0) for name in terms)]
        self.sums = torch.tensor([value * share for value in sums],
                                 dtype=torch.float64, device=context.device)  # (2 + terms,): loss, NLL, terms
        self.tokens = int(saved["tokens"])
        self.updates = int(saved.get("updates", 0))  # checkpoints before it was saved: 0
        self.skipped = int(saved.get("skipped", 0))
        self.start = time.perf_counter() - saved["seconds"]

    def add_batch(self, loss_sum: torch.Tensor, nll_sum: torch.Tensor, logged: dict[str, torch.Tensor]) -> None:
        """The batch's summed loss and NLL, and its sum of each of ``terms`` (``LossTerms.logged``)."""
        extra = [logged[name].detach().to(nll_sum.dtype) for name in self.terms]
        self.sums += torch.stack((loss_sum.detach(), nll_sum.detach(), *extra))

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

    def take(self) -> dict[str, Any]:
        """Totals over all processes (loss and NLL sums, ``terms``: each term's sum, tokens,
        seconds, updates, skipped updates), then reset."""
        totals = self.state()
        now = time.perf_counter()
        totals["seconds"] = max(now - self.start, 1e-9)
        self.sums.zero_()
        self.tokens = self.updates = self.skipped = 0
        self.start = now
        return totals

    def state(self) -> dict[str, Any]:
        """The unfinished interval, for a checkpoint (a collective: every rank calls it)."""
        loss_sum, nll_sum, *terms = self.context.sum_tensor(self.sums).tolist()
        return {"loss_sum": loss_sum, "nll_sum": nll_sum, "terms": dict(zip(self.terms, terms)),
                "tokens": self.tokens, "seconds": time.perf_counter() - self.start, "updates": self.updates,
                "skipped": self.skipped}
