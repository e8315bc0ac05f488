"""Numeric precision of the forward pass: bf16/fp16 autocast on CUDA, fp32 on CPU."""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from nmt_cli.errors import ConfigError

__all__ = ["Precision"]


class Precision:
    """Autocast context and gradient scaler for ``train.precision`` on ``device``.

    ``auto`` is bf16 on CUDA (fp16 where the GPU lacks bf16) and fp32 on CPU. fp16 needs a
    ``GradScaler`` (small gradients underflow otherwise); bf16 has fp32's exponent range.
    """

    def __init__(self, name: str, device: torch.device):
        if name == "auto":
            if device.type == "cuda":
                name = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
            else:
                name = "fp32"
        if name == "fp16" and device.type != "cuda":
            raise ConfigError("train.precision=fp16 needs a CUDA device; use fp32 or bf16 on CPU")
        self.name = name
        self.device_type = device.type
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None

    def autocast(self) -> ContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)
