"""Process group setup for ``torchrun`` and the few collectives the trainer needs.

``torchrun`` sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``; with ``WORLD_SIZE > 1`` we join the group (NCCL on CUDA, gloo on CPU).
A single process needs no group and every helper here is then a no-op.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from nmt_cli.device import resolve_device

__all__ = ["DistributedContext", "init_distributed", "sum_gradients_hook", "wrap_model"]


@dataclass
class DistributedContext:
    """Rank, world size and device of this process; collectives degrade to no-ops alone."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def sum_ints(self, values: list[int]) -> list[int]:
        """Element-wise sum over ranks of a few integers (one small all-reduce)."""
        if not self.active:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return [int(v) for v in tensor.tolist()]

    def sum_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum of a tensor over ranks (returns a new tensor)."""
        if not self.active:
            return tensor
        total = tensor.detach().clone()
        dist.all_reduce(total)
        return total

    def broadcast_floats(self, values: list[float]) -> list[float]:
        """Rank 0's ``values`` on every rank (same length everywhere)."""
        if not self.active:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.broadcast(tensor, src=0)
        return tensor.tolist()

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (JSON-like data), in rank order."""
        if not self.active:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self) -> None:
        if self.active and dist.is_initialized():
            dist.destroy_process_group()


def sum_gradients_hook(process_group, bucket):  # DDP checks real annotations; ours would be strings
    """DDP communication hook: sum the ranks' gradients (DDP's own hook averages them).

    Each rank's loss is already its share of the update's ``sum / tokens``, so the sum is
    the gradient of the whole update, as one process accumulating all the batches would
    get. Scaling every rank's loss up by the world size instead would make its fp16
    gradients that many times larger and overflow at a lower loss scale.
    """
    work = dist.all_reduce(bucket.buffer(), group=process_group, async_op=True)
    return work.get_future().then(lambda done: done.value()[0])


def _import_before_the_group() -> None:
    """Import ``torch.distributed.nn.functional`` while no process group exists.

    Its functions take ``group=group.WORLD`` as a default argument, bound when the module is
    first imported. DDP's constructor imports it; imported after ``init_process_group`` it
    pins the world group for the life of the interpreter, so ``destroy_process_group``
    frees nothing and the gloo threads (``gloo_tcp_loop``, ``pt_gloo_runloop``) are still
    running while the process exits, torn down in whatever order interpreter shutdown
    reaches them: the cause of rare aborts at the end of a torchrun job.
    """
    import torch.distributed.nn.functional  # noqa: F401


def init_distributed(device_name: str | None = None) -> DistributedContext:
    """Join the ``torchrun`` process group when ``WORLD_SIZE > 1``; pick this rank's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        _import_before_the_group()
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistributedContext(rank=rank, world_size=world_size, device=device)


def wrap_model(model: torch.nn.Module, context: DistributedContext,
               compile: bool) -> tuple[torch.nn.Module, DistributedDataParallel | None]:
    """What the loop calls: ``model`` in DDP (gradients summed by :func:`sum_gradients_hook`)
    when several processes train, compiled with ``compile``; and the DDP wrapper, or None."""
    module, ddp = model, None
    if context.active:
        device = context.device
        device_ids = [device.index] if device.type == "cuda" else None
        # the only buffers, sinusoidal position tables, are the same function everywhere and grow
        # on the rank that meets a longer sentence: never sync them in forward (torch >= 2.13 names
        # this forward_sync_buffers and deprecates broadcast_buffers)
        options = inspect.signature(DistributedDataParallel).parameters
        no_sync = "forward_sync_buffers" if "forward_sync_buffers" in options else "broadcast_buffers"
        module = ddp = DistributedDataParallel(module, device_ids=device_ids, **{no_sync: False})
        module.register_comm_hook(None, sum_gradients_hook)
    if compile:
        module = torch.compile(module)
    return module, ddp
