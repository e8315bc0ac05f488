"""int8 inference for every model family: dynamic quantization of Linear and LSTM/GRU layers.

Weights are stored as int8 (Linear: one scale per output row; LSTM/GRU: per matrix); activations are quantized on the fly,
per batch, and each product accumulates in int32 (fbgemm/oneDNN kernels on x86 CPUs).
Embeddings, LayerNorms and attention stay float32. The API is
``torch.ao.quantization.quantize_dynamic``: torch marks ``torch.ao.quantization`` as
deprecated in favour of torchao, but torchao's int8 path quantizes Linear layers only (no
LSTM/GRU) and targets GPUs, while the eager dynamic kernels ship with torch and run on
every x86 CPU, so they serve all three families with no extra dependency.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from nmt_cli.errors import NmtError
from nmt_cli.models.attention.multihead import MultiHeadAttention
from nmt_cli.models.base import Seq2SeqModel

#: what ``--quantize`` accepts for the torch engine
TORCH_QUANTIZATIONS = ("int8",)


def quantize_model(model: Seq2SeqModel, scheme: str, device: torch.device) -> Seq2SeqModel:
    """``model`` with its Linear and LSTM/GRU layers dynamically quantized to int8 (CPU only)."""
    if scheme not in TORCH_QUANTIZATIONS:
        raise NmtError(f"unknown --quantize {scheme!r} for the torch engine; choose from {', '.join(TORCH_QUANTIZATIONS)}")
    if device.type != "cpu":
        raise NmtError("--quantize int8 runs on the CPU only (torch's dynamic int8 kernels); use --device cpu")
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.split_in_proj()
    with warnings.catch_warnings():  # torch.ao.quantization warns that it is deprecated (see above)
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor")
        spec = {nn.Linear: per_channel_dynamic_qconfig, nn.LSTM: default_dynamic_qconfig,
                nn.GRU: default_dynamic_qconfig}
        return quantize_dynamic(model.eval(), spec, dtype=torch.qint8, inplace=False)


__all__ = ["TORCH_QUANTIZATIONS", "quantize_model"]
