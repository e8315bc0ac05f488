"""float32 inference on the CPU with oneDNN's prepacked matrix products.

torch multiplies float32 matrices with MKL, and MKL takes its AVX2 code path on AMD CPUs
whatever they support: on an AVX-512 EPYC it reaches less than half the rate of oneDNN's
products on the same shapes. For inference the weights never change, so each Linear
layer's weight can be reordered once into oneDNN's blocked layout and every product then
runs through ``torch.ops.mkldnn._linear_pointwise`` (the kernel ``torch.compile`` uses for
frozen CPU Linear layers). The arithmetic is the same ``y = x W^T + b`` in float32; only the
order of the sums differs, so outputs agree with the unpacked model to rounding.

The price is memory: oneDNN compiles a kernel for every number of rows it is given and
keeps them in its primitive cache (1,024 entries), so a process that has decoded batches of
many sizes holds more than it would with MKL, bounded by that cache (peak RSS in
BENCHMARKS.md). Rounding rows up to a few sizes bounded it further but cost speed.

:func:`pack_linear_layers` replaces every ``nn.Linear`` of a model in place. Training never
sees a packed model: only :class:`~nmt_cli.decoding.Translator` packs, after loading. On
CPUs where oneDNN trains faster than MKL (:func:`onednn_trains_faster`: not Intel's), the
training loss packs the output layer's weight itself, once per batch, for its blocks'
products with it (:func:`pack_weight`, :func:`packed_linear`; ``training/loss.py``), and
training's large layers reorder their weights once per update (``training/packed_layers.py``).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from nmt_cli.host import cpuinfo_field
from nmt_cli.models.attention.multihead import MultiHeadAttention

__all__ = ["PackedLinear", "can_pack", "cpu_vendor", "onednn_trains_faster", "pack_linear_layers", "pack_weight",
           "packed_linear"]

#: rows the reordered layout is tuned for; decoding steps have tens to hundreds (the layout
#: works for any number of rows, and the rate hardly depends on this hint)
ROWS_HINT = 64


def can_pack(device: torch.device) -> bool:
    """Whether this torch build offers the oneDNN kernels, and the model runs on the CPU."""
    return (device.type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor as ``/proc/cpuinfo`` names it (``GenuineIntel``, ``AuthenticAMD``); ``""``
    where it does not (another OS, another architecture)."""
    return cpuinfo_field("vendor_id") or ""


def onednn_trains_faster(device: torch.device) -> bool:
    """Whether float32 training should multiply through oneDNN rather than torch's own products.

    torch's float32 products are MKL's, which takes its fast code paths only on Intel CPUs: there
    training measured faster on MKL's products, which need no reorder of a weight that changes
    every step, and on an AMD EPYC on oneDNN's (``bench/train_levers.py`` offers the other library
    as a lever on each). Where the vendor is not known, oneDNN, as before the two were told apart.
    Inference packs wherever :func:`can_pack`: its weights are reordered once.
    """
    return can_pack(device) and cpu_vendor() != "GenuineIntel"


def pack_weight(weight: Tensor, rows_hint: int = ROWS_HINT) -> Tensor:
    """A float32 ``weight`` (out, in) reordered into oneDNN's blocked layout, for :func:`packed_linear`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows_hint)


def packed_linear(x: Tensor, packed_weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x W^T + b`` (..., out) with ``W`` reordered by :func:`pack_weight`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed_weight, bias, "none", [], "")


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` reordered once for oneDNN (inference only, float32 CPU)."""

    def __init__(self, linear: nn.Linear, keep_float: bool = False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float().contiguous()
        if keep_float:  # the output layer: a lexical shortlist gathers its rows (models/output_rows.py)
            self.float_weight = weight
        self.register_buffer("packed_weight", pack_weight(weight), persistent=False)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return packed_linear(x, self.packed_weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linear_layers(model: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place) with a :class:`PackedLinear`; returns it.

    The output layer keeps its float weight as well (no copy when it is tied to the target
    embeddings), whose rows a lexical shortlist gathers. Attention layers first split their fused
    input projection (``split_in_proj``), because cross-attention applies the query rows and the
    key/value rows of that matrix apart.
    """
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and module.q_proj is None:
            module.split_in_proj()
    output = model.output_layer() if hasattr(model, "output_layer") else None
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child, keep_float=child is output))
    return model
