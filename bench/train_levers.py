"""Levers on a CPU training update, each against the update as shipped, on equal work.

The ways to speed up a float32 training update on this CPU that the profile
(``train_profile.py``) suggests and that nmt-cli does not take, measured so that the choice can
be checked: each lever is a change applied in this process around the shipped trainer's own
update (``Trainer._update``: collate, forward, loss, backward, clip, Adam), built as ``nmt
train`` builds it for ``train_speed.py``'s runs (``train_profile.build_trainer``).

- **Equal work.** A fixed list of token batches is drawn once; every lever trains on exactly
  those batches in every round, so the rows differ only in how the same products and kernels
  are computed.
- **Rounds.** Every lever first makes one untimed pass over the batches (its warm-up: the
  first-pass column; a compiled model compiles there); then each round times one pass of
  each lever, their order turning from round to round, so that a change of the machine's load
  hits them all. A lever's figure is the median over the rounds; beside it the ratio to the
  update as shipped, with an interval for the median of the rounds' paired ratios
  (``common.median_interval``).

Levers: the model's Linear layers through oneDNN (forward and input gradient by
``mkldnn::_linear_pointwise``, weight gradient by torch) on the plain weight, with rows as they
come or padded to a multiple of 64 (oneDNN builds a kernel for every row count), or all three
products through numpy's OpenBLAS (these replace ``F.linear``, which the layers that training
already multiplies through oneDNN do not call); every layer, whatever its size, multiplied as
training multiplies the large ones on CPUs other than Intel's (``training/packed_layers.py``:
base's layers, the RNN's readout, on weights reordered once per update); training's choice of
library swapped (``models/packed.py``, ``onednn_trains_faster``): the large layers on MKL where
training packs them, on oneDNN where it does not, and the loss's products on the library it does
not take; each block of the loss's logits in an array of its own instead of the one the loss call reuses;
attention's heads as views of its projection with the bias in the product (copied inside the
batched products) instead of added in one copy into contiguous heads; dropout masks of bools
instead of float32 ones that hold the scale;
the loss's block of logits (``training/loss.py``, ``CPU_BLOCK_ELEMENTS``) a quarter,
a half, twice and four times the shipped one; ``torch.compile`` of the model with dynamic shapes (what
``train.compile`` does, with shapes marked dynamic as batch shapes vary). ``--lever NAME``
runs only the levers named beside the update as shipped. ``--quick``: tiny,
2 updates, one round, no compile (its warm-up takes minutes).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator
from unittest.mock import patch

import numpy as np
import torch
import torch.nn.functional as F
from common import (RATIO_SPREAD_NOTE, THREADS, Report, bench_arguments, fmt, fmt_ratio_spread, load_averages,
                    median_interval, shared_load_note)
from peers.corpus import prepare_multi30k
from train_profile import SHAPES, build_trainer

from nmt_cli.models import dropout as dropout_module
from nmt_cli.models.attention.multihead import MultiHeadAttention
from nmt_cli.models.linear import products_of, set_products
from nmt_cli.models.packed import can_pack
from nmt_cli.training import loss as loss_module
from nmt_cli.training import packed_layers as packed_layers_module
from nmt_cli.training.packed_layers import MIN_WEIGHT_ELEMENTS, pack_training_layers

UPDATES = 10  # updates in one pass over the fixed batches
QUICK_UPDATES = 2
ROUNDS = 9  # timed passes per lever (--repeats): 9 paired ratios give a 96% interval
AS_SHIPPED = "as shipped"
PAD_ROWS = 64
LARGE_EXPONENT = MIN_WEIGHT_ELEMENTS.bit_length() - 1  # the layers training packs: 2^18 weights or more


class _ProductsLinear(torch.autograd.Function):
    """``y = x W^T + b`` with the forward and input-gradient products taken by ``product(a, b_t)``
    (``a b_t^T``) and the weight gradient by ``weight_product(a, b)`` (``a^T b``)."""

    @staticmethod
    def forward(ctx, x, weight, bias, product, weight_product):
        ctx.save_for_backward(x, weight)
        ctx.products = (product, weight_product)
        ctx.has_bias = bias is not None
        rows = x.reshape(-1, x.size(-1))
        y = product(rows, weight)
        if bias is not None:
            y += bias
        return y.view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        product, weight_product = ctx.products
        grad_rows = grad.reshape(-1, grad.size(-1))
        grad_x = product(grad_rows, weight.t()).view(x.shape) if ctx.needs_input_grad[0] else None
        grad_weight = weight_product(grad_rows, x.reshape(-1, x.size(-1))) if ctx.needs_input_grad[1] else None
        grad_bias = grad_rows.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias, None, None


def _onednn(rows: torch.Tensor, weight: torch.Tensor, pad: int = 1) -> torch.Tensor:
    """``rows W^T`` by oneDNN on the plain weight, ``rows`` padded with zeros to a multiple of ``pad``."""
    count = rows.size(0)
    padded = -(-count // pad) * pad
    if padded != count:
        rows = torch.cat([rows, rows.new_zeros(padded - count, rows.size(1))])
    return torch.ops.mkldnn._linear_pointwise(rows, weight.contiguous(), None, "none", [], "")[:count]


def _numpy(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.matmul(rows.detach().numpy(), weight.detach().t().numpy()))


def _numpy_weight_gradient(grad: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.matmul(grad.detach().t().numpy(), rows.detach().numpy()))


def _torch_weight_gradient(grad: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return grad.t() @ rows


@contextmanager
def linear_products(product: Callable, weight_product: Callable):
    """Every float32 ``F.linear`` under autograd (the model's layers; the loss on a CPU takes its own
    products) computed by ``product`` / ``weight_product``, for as long as the context lasts."""
    original = F.linear

    def linear(x, weight, bias=None):
        if x.dtype == torch.float32 and x.device.type == "cpu" and torch.is_grad_enabled():
            return _ProductsLinear.apply(x, weight, bias, product, weight_product)
        return original(x, weight, bias)

    with patch.object(F, "linear", linear):
        yield


def loss_block(elements: int) -> ContextManager:
    """The loss's blocks of ``elements`` logits instead of the shipped ``CPU_BLOCK_ELEMENTS``."""
    return patch.object(loss_module, "CPU_BLOCK_ELEMENTS", elements)


def compiled_model(trainer) -> Callable[[], ContextManager]:
    """A context that trains through ``torch.compile(model, dynamic=True)``, compiled once."""
    compiled = torch.compile(trainer.model, dynamic=True)
    return lambda: patch.object(trainer, "module", compiled)


@dataclass(frozen=True)
class Lever:
    name: str
    changes: str
    context: Callable[[object], Callable[[], ContextManager]]  # trainer -> a context factory
    quick: bool = True
    applies: Callable[[object], bool] = lambda trainer: True  # whether it changes anything for this trainer


def _plain(factory: Callable[[], ContextManager]) -> Callable[[object], Callable[[], ContextManager]]:
    return lambda trainer: factory


@contextmanager
def own_products_kept(layers: list) -> Iterator[None]:
    """The products each layer has now (``models/linear.py``) given back when the context ends."""
    own = [(layer, products_of(layer)) for layer in layers]
    try:
        yield
    finally:
        for layer, products in own:
            set_products(layer, products)


def mkl_for_large_layers(trainer) -> Callable[[], ContextManager]:
    """A context that puts the layers training multiplies through oneDNN (``training/packed_layers.py``)
    back on ``F.linear`` (MKL) and afterwards gives them their products again."""
    layers = trainer.packed_weights.layers

    @contextmanager
    def context():
        with own_products_kept(layers):
            for layer in layers:
                set_products(layer, None)
            yield
    return context


def packed_on_onednn(model, min_weights: int = MIN_WEIGHT_ELEMENTS):
    """:func:`~nmt_cli.training.packed_layers.pack_training_layers` as on a CPU where oneDNN trains
    faster, whichever CPU this is: the store, or None where no layer has ``min_weights``."""
    with patch.object(packed_layers_module, "onednn_trains_faster", can_pack):
        return pack_training_layers(model, next(model.parameters()).device, compiled=False, min_weights=min_weights)


def layers_packed(min_weights: int) -> Callable[[object], Callable[[], ContextManager]]:
    """A lever's context factory: the Linear layers of at least ``min_weights`` weights but the
    output layer multiply as training multiplies the large ones where oneDNN trains faster
    (``training/packed_layers.py``: oneDNN on each weight and its transpose reordered on first use
    after an optimizer step); the trainer clears the reorders after each step, as it does its own,
    and the layers get their own products back afterwards."""
    def factory(trainer) -> Callable[[], ContextManager]:
        shipped = trainer.packed_weights

        @contextmanager
        def context():
            with own_products_kept(shipped.layers if shipped is not None else []):
                store = packed_on_onednn(trainer.model, min_weights)
                try:
                    with patch.object(trainer, "packed_weights", store):
                        yield
                finally:
                    if store is not None:
                        store.release()
        return context
    return factory


def would_pack_large_layers(trainer) -> bool:
    """Whether the model has layers that training would pack where oneDNN trains faster, and
    training here does not."""
    if trainer.packed_weights is not None or not can_pack(next(trainer.model.parameters()).device):
        return False
    store = packed_on_onednn(trainer.model)
    if store is None:
        return False
    store.release()
    return True


def loss_products_swapped() -> ContextManager:
    """The loss's logits and row-gradient products on the library training does not take on this CPU."""
    shipped = loss_module.onednn_trains_faster
    return patch.object(loss_module, "onednn_trains_faster", lambda device: not shipped(device))


def loss_logits_per_block() -> ContextManager:
    """Each block's logits in a newly allocated array instead of the one array the loss call reuses."""
    return patch.object(loss_module._OutputProducts, "logits", loss_module._OutputProducts.fresh_logits)


def loss_reuses_logits_array(trainer) -> bool:
    """Whether the float32 loss writes its logits into one reused array here (torch's products, not oneDNN's)."""
    return not loss_module.onednn_trains_faster(next(trainer.model.parameters()).device)


def heads_as_views() -> ContextManager:
    """Attention's projection with its bias in the product and its heads views of the output (copied
    where ``matmul`` needs them contiguous), instead of the bias added in one copy into contiguous heads."""
    def project(attention: MultiHeadAttention, x: torch.Tensor, first: int, parts: int) -> tuple[torch.Tensor, ...]:
        rows = slice(first * attention.d_model, (first + parts) * attention.d_model)
        projected = products_of(attention.in_proj)(x, attention.in_proj.weight[rows], attention.in_proj.bias[rows])
        return attention._split_heads(projected, parts)
    return patch.object(MultiHeadAttention, "_project", project)


def dropout_bool_masks() -> ContextManager:
    """Every dropout mask a bool one, applied through its bytes and the scale, instead of a scaled float32 one."""
    return patch.object(dropout_module, "_scaled_mask_dtype", lambda *tensors: None)


def openblas_threads() -> str:
    """The threads numpy's OpenBLAS took when it loaded: ``OPENBLAS_NUM_THREADS``, else one a core."""
    return os.environ.get("OPENBLAS_NUM_THREADS") or str(os.cpu_count())


def levers() -> list[Lever]:
    shipped_block = loss_module.CPU_BLOCK_ELEMENTS
    found = [Lever(AS_SHIPPED, "nothing: the update nmt train runs", _plain(nullcontext))]
    if can_pack(torch.device("cpu")):
        onednn_loss = loss_module.onednn_trains_faster(torch.device("cpu"))
        libraries, other_cpus = ("torch's (MKL)", "oneDNN's"), "CPUs other than Intel's"
        found += [
            Lever("model layers: oneDNN", "forward and input-gradient products of the model's Linear layers by "
                  "oneDNN (a kernel built per row count), weight gradient by torch (MKL)",
                  _plain(lambda: linear_products(_onednn, _torch_weight_gradient))),
            Lever(f"model layers: oneDNN, rows padded to {PAD_ROWS}", f"as above, rows padded with zeros to a "
                  f"multiple of {PAD_ROWS} so that oneDNN builds fewer kernels",
                  _plain(lambda: linear_products(lambda rows, weight: _onednn(rows, weight, PAD_ROWS),
                                                 _torch_weight_gradient))),
            Lever("model layers: oneDNN, weights packed", "every Linear layer, whatever its size, as training "
                  "multiplies the large ones where oneDNN trains faster: oneDNN on each weight and its transpose "
                  "reordered once per update (the reorders timed), weight gradient by torch (MKL)",
                  layers_packed(0)),
            Lever("large layers: oneDNN", f"the model's Linear layers of 2^{LARGE_EXPONENT} weights or more on "
                  "oneDNN's products on weights reordered once per update, as training takes them on CPUs other "
                  "than Intel's, instead of torch's (MKL)", layers_packed(MIN_WEIGHT_ELEMENTS),
                  applies=would_pack_large_layers),
            Lever(f"loss products: {'MKL' if onednn_loss else 'oneDNN'}", "the loss's logits and row-gradient "
                  f"products on {' instead of '.join(libraries if onednn_loss else libraries[::-1])}, as training "
                  f"takes them on {'Intel CPUs' if onednn_loss else other_cpus}",
                  _plain(loss_products_swapped))]
    found.append(Lever("large layers: MKL", f"the model's Linear layers of 2^{LARGE_EXPONENT} weights or more on "
                       "torch's products (MKL), as before 37efa18 and as training takes them on Intel CPUs, instead "
                       "of oneDNN's on weights reordered once per update", mkl_for_large_layers,
                       applies=lambda trainer: trainer.packed_weights is not None))
    found += [
        Lever("model layers: OpenBLAS", "all three products of the model's Linear layers by numpy's OpenBLAS "
              f"({openblas_threads()} threads of its own beside torch's)",
              _plain(lambda: linear_products(_numpy, _numpy_weight_gradient)))]
    found.append(Lever("loss logits: an array per block", "each block of the loss's logits written by torch's "
                       "product into a newly allocated array, as before this lever, instead of into one array the "
                       "loss call's blocks reuse", _plain(loss_logits_per_block), applies=loss_reuses_logits_array))
    found.append(Lever("attention heads: views", "attention's Q/K/V projection with its bias in the product and its "
                       "heads views of the output, copied inside the batched products, instead of the bias added in "
                       "one copy into contiguous heads", _plain(heads_as_views)))
    found.append(Lever("dropout masks: bools", "every dropout mask a bool one applied through its bytes and the "
                       "scale, as before this lever, instead of a float32 one holding the scale",
                       _plain(dropout_bool_masks)))
    shipped_exponent = shipped_block.bit_length() - 1
    for exponent in range(shipped_exponent - 2, shipped_exponent + 3):  # two halvings and two doublings
        if exponent != shipped_exponent:
            found.append(Lever(f"loss blocks of 2^{exponent} logits", f"the loss's block of logits "
                               f"(shipped: 2^{shipped_exponent})",
                               _plain(lambda elements=2**exponent: loss_block(elements))))
    found.append(Lever("torch.compile", "the model (encoder and decoder, not the loss) compiled by inductor with "
                       "dynamic shapes", compiled_model, quick=False))
    return found


def timed_pass(trainer, batches: list, context: ContextManager) -> tuple[float, int]:
    """(seconds, target tokens) of one update per ``update_freq`` of ``batches``, under ``context``."""
    trainer.stream_of_batches = iter(batches)
    tokens = trainer.interval.tokens
    with context:
        started = time.perf_counter()
        for _ in range(len(batches) // trainer.cfg.update_freq):
            trainer._update()
        seconds = time.perf_counter() - started
    return seconds, trainer.interval.tokens - tokens


def worth_taking(rates: list[float], shipped: list[float]) -> str:
    """Whether the interval of the paired rounds' ratios (:func:`common.median_interval`) lies wholly above 1."""
    if len(rates) < 2:
        return "- (one round)"
    low, high, _ = median_interval([a / b for a, b in zip(rates, shipped)])
    return "yes: faster" if low > 1 else "no: slower" if high < 1 else "no: within noise"


def measure_shape(report: Report, prepared: Path, name: str, updates: int, rounds: int, quick: bool,
                  only: list[str] | None = None) -> None:
    spec = SHAPES[name]
    with tempfile.TemporaryDirectory() as scratch:
        trainer = build_trainer(prepared, spec, Path(scratch) / "run", THREADS)
        trainer.model.train()
        batches = [next(trainer.stream_of_batches) for _ in range(updates * trainer.cfg.update_freq)]
        chosen = [lever for lever in levers() if (lever.quick or not quick) and lever.applies(trainer)
                  and (only is None or lever.name in only or lever.name == AS_SHIPPED)]
        contexts = {lever.name: lever.context(trainer) for lever in chosen}
        first_pass = {lever.name: timed_pass(trainer, batches, contexts[lever.name]())[0] for lever in chosen}
        rates: dict[str, list[float]] = {lever.name: [] for lever in chosen}
        for round_index in range(rounds):
            turn = round_index % len(chosen)
            for lever in chosen[turn:] + chosen[:turn]:
                seconds, tokens = timed_pass(trainer, batches, contexts[lever.name]())
                rates[lever.name].append(tokens / seconds)
    shipped = rates[AS_SHIPPED]
    for lever in chosen:
        mine = rates[lever.name]
        shipped_row = lever.name == AS_SHIPPED
        report.add_row(f"{name}: {spec.describe()}", lever.name, lever.changes,
                       f"{fmt(statistics.median(mine))} ({fmt(min(mine))}-{fmt(max(mine))})",
                       f"{first_pass[lever.name]:.1f}", "1.00x" if shipped_row else fmt_ratio_spread(mine, shipped),
                       "shipped" if shipped_row else worth_taking(mine, shipped))


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny", help=f"comma list of {', '.join(SHAPES)} (default tiny)")
    parser.add_argument("--updates", type=int, default=None,
                        help=f"updates in a pass over the fixed batches (default {UPDATES}; --quick {QUICK_UPDATES})")
    parser.add_argument("--lever", action="append", default=None, metavar="NAME",
                        help="run only this lever beside the update as shipped (repeatable; default: every lever)")
    args = parser.parse_args()
    names = args.models.split(",")
    unknown = [name for name in names if name not in SHAPES]
    if unknown:
        parser.error(f"--models: unknown shape {unknown[0]!r} (choose from {', '.join(SHAPES)})")
    offered = [lever.name for lever in levers() if lever.name != AS_SHIPPED]
    if args.lever and (unknown := [name for name in args.lever if name not in offered]):
        parser.error(f"--lever: unknown lever {unknown[0]!r} (choose from {'; '.join(offered)})")
    updates = args.updates or (QUICK_UPDATES if args.quick else UPDATES)
    rounds = args.repeats if args.repeats is not None else (1 if args.quick else ROUNDS)
    prepared = prepare_multi30k(args.work, args.quick)
    report = Report("train_levers", f"Levers on a training update against the update as shipped (fp32, {THREADS} "
                    "CPU threads)", ["shape", "lever", "what it changes", "tgt tok/s (range)", "first pass s",
                                     "against as shipped", "worth taking"], quick=args.quick)
    report.variant = ", ".join(filter(None, ["models " + ", ".join(names) if args.models != "tiny" else "",
                                             "levers " + "; ".join(args.lever) if args.lever else ""]))
    torch.set_num_threads(THREADS)
    load_before = load_averages()
    for name in names:
        measure_shape(report, prepared, name, updates, rounds, args.quick, args.lever)
    report.notes += [
        f"Each lever trains on the same {updates} updates' token batches (train_speed.py's settings: batches of at "
        f"most 2,048 tokens, {THREADS} threads); one untimed pass first (first pass s: a compiled model compiles "
        f"there), then {rounds} timed pass(es) each, their order turning from round to round. tgt tok/s: the "
        "median pass (the range of the passes beside it).",
        f"Against as shipped: {RATIO_SPREAD_NOTE}. Worth taking: yes where the whole "
        "interval lies above 1, no where it lies below 1 (slower) or holds 1 (within noise).",
        shared_load_note(load_before),
    ] + (["--quick: torch.compile left out (its warm-up takes minutes)."] if args.quick else [])
    report.emit(args.json)


if __name__ == "__main__":
    main()
