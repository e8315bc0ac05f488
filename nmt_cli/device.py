"""Which torch device a command runs on: one rule for training, translation and alignment."""

from __future__ import annotations

import itertools

import torch

from nmt_cli.errors import NmtError

__all__ = ["is_auto", "model_device", "resolve_device"]


def resolve_device(name: str | torch.device | None = "auto", local_rank: int = 0) -> torch.device:
    """``auto``/None -> ``cuda:<local_rank>`` when CUDA is available, else CPU; ``cuda`` -> ``cuda:<local_rank>``.

    Under ``torchrun`` each process passes its ``LOCAL_RANK`` so every process gets its own GPU.
    Unknown names and CUDA requested on a machine without it fail with one line.
    """
    if is_auto(name):
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise NmtError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise NmtError(f"unsupported device {name!r}; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise NmtError(f"device {str(name)!r} requested but CUDA is not available on this machine")
        if device.index is None:
            device = torch.device("cuda", local_rank)
        if device.index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            raise NmtError(f"{device} requested, but this machine has {count} GPU{'s' * (count != 1)}"
                           + (": start at most that many processes per node (torchrun --nproc_per_node)"
                              if local_rank >= count else ""))
    return device


def is_auto(name: str | torch.device | None) -> bool:
    """Whether ``name`` leaves the choice to us (``auto``, empty or None), so a request that runs
    on one device only (int8 kernels on the CPU, say) may pick it."""
    return name in (None, "", "auto")


def model_device(model: torch.nn.Module) -> torch.device:
    """The device a model's weights are on, where its inputs must go (the CPU for a model without any)."""
    weight = next(itertools.chain(model.parameters(), model.buffers()), None)
    return torch.device("cpu") if weight is None else weight.device
