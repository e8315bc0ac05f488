"""Numeric precision of the forward pass: bf16/fp16 autocast (for CUDA), fp32 by default on CPU.

Training (``train.precision``) and translation (always ``auto``) both ask here.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

__all__ = ["Precision", "cpu_has_native_bf16", "has_native_bf16"]


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes in bf16 (AVX-512 BF16 or AMX); elsewhere torch emulates bf16
    products through float32, slower than float32 itself."""
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check is not None and check() for check in checks)


def has_native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bf16: a CPU with AVX-512 BF16 or AMX (:func:`cpu_has_native_bf16`), a
    CUDA device of Ampere or later, or ROCm; older GPUs such as the T4 or V100 only emulate it, slower than fp16."""
    if device.type == "cpu":
        return cpu_has_native_bf16()
    return torch.version.hip is not None or torch.cuda.get_device_capability(device)[0] >= 8


class Precision:
    """Autocast context and gradient scaler for ``train.precision`` on ``device``.

    ``auto`` is bf16 on CUDA (fp16 where the GPU lacks native bf16) and fp32 on CPU (whether
    bf16 reaches float32's quality in the same updates on a CPU has not been measured, so it
    is not a default there). ``bf16`` autocasts only where the device computes in bf16: on a
    CPU without AVX-512 BF16 or AMX it runs fp32 and :attr:`note` says why. fp16 needs a
    ``GradScaler`` (small gradients underflow otherwise); bf16 has fp32's exponent range.
    fp16 runs on a CPU too, slowly, so that the loss-scaling path runs (and is tested) without a GPU.
    """

    def __init__(self, name: str, device: torch.device, init_scale: float = 2.0**16):
        self.note: str | None = None
        if name == "auto":
            if device.type == "cuda":
                name = "bf16" if has_native_bf16(device) else "fp16"
            else:
                name = "fp32"
        elif name == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
            name = "fp32"
            self.note = ("bf16 asked, but this CPU has no bf16 units (AVX-512 BF16 or AMX): emulated bf16 is "
                         "slower than float32, so training runs in fp32")
        self.name = name
        self.device_type = device.type
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)
        self.scaler = torch.amp.GradScaler(device.type, init_scale=init_scale) if name == "fp16" else None

    def autocast(self) -> ContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)
