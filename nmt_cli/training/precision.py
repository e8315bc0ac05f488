"""Numeric precision of the forward pass: bf16/fp16 autocast (for CUDA), fp32 by default on CPU."""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

__all__ = ["Precision"]


class Precision:
    """Autocast context and gradient scaler for ``train.precision`` on ``device``.

    ``auto`` is bf16 on CUDA (fp16 where the GPU lacks bf16) and fp32 on CPU. fp16 needs a
    ``GradScaler`` (small gradients underflow otherwise); bf16 has fp32's exponent range.
    torch runs both on CPU too: bf16 is fast on CPUs with bf16 instructions, fp16 is
    slow on most CPUs but lets the loss-scaling path run (and be tested) without a GPU.
    """

    def __init__(self, name: str, device: torch.device, init_scale: float = 2.0**16):
        if name == "auto":
            if device.type == "cuda":
                name = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
            else:
                name = "fp32"
        self.name = name
        self.device_type = device.type
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)
        self.scaler = torch.amp.GradScaler(device.type, init_scale=init_scale) if name == "fp16" else None

    def autocast(self) -> ContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)
