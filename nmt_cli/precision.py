"""Numeric precision of the forward pass: bf16/fp16 autocast (for CUDA), fp32 by default on CPU.

Training (``train.precision``) and translation (always ``auto``) both ask here.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

__all__ = ["Precision", "has_native_bf16"]


def has_native_bf16(device: torch.device) -> bool:
    """Whether a CUDA device computes in bf16 (Ampere and later, and ROCm); older GPUs such as
    the T4 or V100 only emulate it, slower than fp16."""
    return torch.version.hip is not None or torch.cuda.get_device_capability(device)[0] >= 8


class Precision:
    """Autocast context and gradient scaler for ``train.precision`` on ``device``.

    ``auto`` is bf16 on CUDA (fp16 where the GPU lacks native bf16) and fp32 on CPU. fp16 needs a
    ``GradScaler`` (small gradients underflow otherwise); bf16 has fp32's exponent range.
    torch runs both on CPU too: bf16 is fast on CPUs with bf16 instructions, fp16 is
    slow on most CPUs but lets the loss-scaling path run (and be tested) without a GPU.
    """

    def __init__(self, name: str, device: torch.device, init_scale: float = 2.0**16):
        if name == "auto":
            if device.type == "cuda":
                name = "bf16" if has_native_bf16(device) else "fp16"
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
