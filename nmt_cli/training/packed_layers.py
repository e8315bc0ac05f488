"""float32 CPU training: the large Linear layers multiply through oneDNN on weights reordered once per update.

torch's float32 products go through MKL, which takes a slower code path on CPUs other than
Intel's; there oneDNN's product on a weight reordered into its blocked layout is faster at a
Transformer-base layer's shapes, and on an Intel CPU MKL's, so there nothing is packed
(:func:`~nmt_cli.models.packed.onednn_trains_faster`). A training weight changes at every
optimizer step, so each is reordered on its first product after a step, kept for the rest
of the update (every batch of ``train.update_freq``, forward and backward) and dropped by
:meth:`PackedWeights.clear` after the step. Per layer (``y = x W^T + b``):

- forward ``y``: oneDNN on ``W`` reordered;
- input gradient ``dx = dy W``: oneDNN on ``W^T`` reordered;
- weight gradient ``dW = dy^T x`` and ``db = sum dy``: torch (MKL), where oneDNN was not faster.

Only layers of at least :data:`MIN_WEIGHT_ELEMENTS` weights take these products: at the tiny
Transformer's (d 128, at most 65,536 weights a layer) the reorders and the per-call cost
make the update slower, at base's (d 512, 262,144 and more) faster (``bench/train_levers.py``).
Under autocast (bf16), without gradients (validation) or for other dtypes the layer runs
``F.linear`` as before; the arithmetic is the same ``x W^T + b`` in float32, the sums in
another order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_cli.models.linear import set_products
from nmt_cli.models.packed import onednn_trains_faster, pack_weight, packed_linear

__all__ = ["MIN_WEIGHT_ELEMENTS", "PackedWeights", "pack_training_layers"]

#: the smallest ``in x out`` of a layer that takes oneDNN's products in training
MIN_WEIGHT_ELEMENTS = 2**18
#: rows a reordered layout is tuned for: a batch of about 2,000 tokens
ROWS_HINT = 2048


class PackedWeights:
    """Each weight (or slice of one) reordered for oneDNN on its first product since :meth:`clear`.

    Keyed by the weight's address, shape and strides (a slice of a fused projection is a
    weight of its own) and by whether it is the transpose; the weight itself is held, so that
    no other tensor takes its address while its reorder is kept.
    """

    def __init__(self, layers: list[nn.Linear]) -> None:
        self._reordered: dict[tuple, tuple[Tensor, Tensor]] = {}
        self.layers = layers  # the layers whose products use these reorders

    def reordered(self, weight: Tensor, transposed: bool) -> Tensor:
        key = (weight.data_ptr(), tuple(weight.shape), weight.stride(), transposed)
        entry = self._reordered.get(key)
        if entry is None:
            plain = weight.detach()
            entry = self._reordered[key] = (weight, pack_weight(plain.t() if transposed else plain, ROWS_HINT))
        return entry[1]

    def clear(self) -> None:
        """Forget every reorder: call after the optimizer changed the weights."""
        self._reordered.clear()

    def release(self) -> None:
        """Give the layers back ``F.linear`` and forget every reorder, when training ends: whatever
        changes the weights afterwards would not clear them."""
        for layer in self.layers:
            set_products(layer, None)
        self.layers = []
        self.clear()

    def __len__(self) -> int:
        return len(self._reordered)


class _PackedLinear(torch.autograd.Function):
    """``y = x W^T + b`` with the forward and input-gradient products on reordered weights."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, store: PackedWeights) -> Tensor:
        rows = x.reshape(-1, x.size(-1)).contiguous()
        ctx.save_for_backward(rows, weight)
        ctx.store, ctx.input_shape, ctx.has_bias = store, x.shape, bias is not None
        out = packed_linear(rows, store.reordered(weight, transposed=False), bias)
        return out.view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad: Tensor):
        rows, weight = ctx.saved_tensors
        grad_rows = grad.reshape(-1, grad.size(-1)).contiguous()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = packed_linear(grad_rows, ctx.store.reordered(weight, transposed=True)).view(ctx.input_shape)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_rows.t() @ rows
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_rows.sum(0)
        return grad_x, grad_weight, grad_bias, None


def _products(store: PackedWeights):
    def products(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if (torch.is_grad_enabled() and weight.requires_grad and x.dtype == weight.dtype == torch.float32
                and not torch.is_autocast_enabled(x.device.type)):
            return _PackedLinear.apply(x, weight, bias, store)
        return F.linear(x, weight, bias)
    return products


def pack_training_layers(model: nn.Module, device: torch.device, compiled: bool,
                         min_weights: int = MIN_WEIGHT_ELEMENTS) -> PackedWeights | None:
    """Give every float32 ``nn.Linear`` of ``model`` with at least ``min_weights`` weights
    oneDNN's products (:func:`~nmt_cli.models.linear.set_products`); return their store, whose
    :meth:`~PackedWeights.clear` the trainer calls after each optimizer step (and
    :meth:`~PackedWeights.release` when the run ends), or None where no layer
    takes them (another device, no oneDNN, an Intel CPU, a compiled model, no layer that large). The
    output layer is left alone: the loss multiplies by its weight in its own blocks (``training/loss.py``)."""
    if not onednn_trains_faster(device) or compiled:
        return None
    output_layer = model.output_layer() if hasattr(model, "output_layer") else None  # the loss's own products
    layers = [module for module in model.modules() if type(module) is nn.Linear and module is not output_layer
              and module.weight.dtype == torch.float32 and module.weight.numel() >= min_weights]
    if not layers:
        return None
    store = PackedWeights(layers)
    products = _products(store)
    for layer in layers:
        set_products(layer, products)
    return store
