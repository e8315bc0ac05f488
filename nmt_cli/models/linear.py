"""Where a model's ``nn.Linear`` layer takes its product ``x W^T + b``: ``F.linear``, unless given another.

Training on a CPU gives its large layers products of its own (``training/packed_layers.py``).
The layer stays an ``nn.Linear`` with the same parameters, so checkpoints, quantization and
packing for inference, which look for that exact type, see no difference; only the instance's
``forward`` changes. Code that multiplies by a slice of a layer's weight (cross-attention's
query rows, or its key and value rows) asks :func:`products_of` for the layer's product.
"""

from __future__ import annotations

from types import MethodType
from typing import Callable

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LinearProducts", "products_of", "set_products"]

#: ``products(x, weight, bias) -> x weight^T + bias``, as ``F.linear``
LinearProducts = Callable[[Tensor, Tensor, "Tensor | None"], Tensor]

_PRODUCTS = "_nmt_products"


def products_of(layer: nn.Linear) -> LinearProducts:
    """The function that computes ``layer``'s products: ``F.linear`` unless :func:`set_products` gave another."""
    return layer.__dict__.get(_PRODUCTS, F.linear)


def _forward(layer: nn.Linear, x: Tensor) -> Tensor:
    return layer.__dict__[_PRODUCTS](x, layer.weight, layer.bias)


def set_products(layer: nn.Linear, products: LinearProducts | None) -> None:
    """Make ``layer`` compute through ``products``; ``None`` gives it back ``F.linear``."""
    if products is None:
        layer.__dict__.pop(_PRODUCTS, None)
        layer.__dict__.pop("forward", None)
    else:
        layer.__dict__[_PRODUCTS] = products
        layer.__dict__["forward"] = MethodType(_forward, layer)
