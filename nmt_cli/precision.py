"""Numeric precision of the forward pass: bf16/fp16 autocast where the device computes in it, else fp32.

Training (``train.precision``, for its model family) and translation (``auto``, no family: fp32 on a
CPU) both ask here.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

__all__ = ["CPU_BF16_FAMILIES", "Precision", "cpu_has_native_bf16", "has_native_bf16"]

#: model families (``model.arch``) that ``auto`` trains in bf16 on a CPU with bf16 units: those
#: ``bench/bf16_quality.py`` measured reaching float32's validation BLEU in the same updates
CPU_BF16_FAMILIES = frozenset({"transformer"})


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

    ``auto`` is bf16 on CUDA (fp16 where the GPU lacks native bf16); on a CPU it is bf16 for a
    ``family`` of :data:`CPU_BF16_FAMILIES` where the CPU has bf16 units (AVX-512 BF16 or AMX),
    fp32 otherwise. ``bf16`` autocasts only where the device computes in bf16: on a CPU without
    AVX-512 BF16 or AMX it runs fp32 and :attr:`note` says why. fp16 needs a
    ``GradScaler`` (small gradients underflow otherwise); bf16 has fp32's exponent range.
    fp16 runs on a CPU too, slowly, so that the loss-scaling path runs (and is tested) without a GPU.
    """

    def __init__(self, name: str, device: torch.device, init_scale: float = 2.0**16, family: str | None = None):
        self.note: str | None = None
        if name == "auto":
            if device.type == "cuda":
                name = "bf16" if has_native_bf16(device) else "fp16"
            else:
                name = "bf16" if family in CPU_BF16_FAMILIES and cpu_has_native_bf16() else "fp32"
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
