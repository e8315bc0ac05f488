"""Where a training step's time goes, and the ceiling the matrix products set.

The runs of ``train_speed.py`` (same Multi30k de->en pieces, shapes, token batches and
settings, ``peers.ours.train_section``), in this process: a :class:`~nmt_cli.training.trainer.Trainer`
is built as ``nmt train`` builds it and its own update (``Trainer._update``: collate, forward,
loss, backward, clip, Adam) runs on the token batches of ``--steps`` updates, drawn once: a
warm-up pass over them (at least 3 updates), then every pass below over the same batches. A batch
larger than any before makes glibc's heap grow, and the first touch of each new page is a page
fault, which a short warm-up on fresh batches left in base's timed and profiled updates; after the
warm-up pass no timed or profiled update meets a batch the heap has not held.

- **Wall time per update**: the median over the timed updates without the profiler (its
  CPU time beside it: on a shared machine the wall time also holds other people's work).
- **Parts**: one more pass over the same batches under ``torch.profiler``; each operator's
  own time (exclusive of the operators it calls) goes to a part. Matrix products (``mm``,
  ``addmm``, ``bmm``) and oneDNN's fused LSTM layers are parts wherever they run. The other
  operators go to the part of the code that ran them (oneDNN's weight reorders, attention,
  the loss, dropout, the optimizer step, collating the batch), found from ``record_function``
  ranges put around those functions for the profile, and, in backward, from the forward
  operator whose autograd node runs them (the profiler's sequence numbers; a reorder counts
  as a reorder wherever it runs). The rest are other kernels (layer norm, embeddings,
  residual adds, ReLU, copies) or framework operators that move no data (views, autograd
  bookkeeping). What no operator covers is **Python and dispatch**:
  the profiled wall time less every operator's time. Parts are shares of the profiled wall
  time; the profiler's own cost (the profiled less the plain wall time, in the whole-update
  row) falls mostly on this part and on the small operators.
- **Ceiling**: the matrix-product FLOPs of an update (counted as ``model_flops.py`` counts
  them) at the best product rate of this machine (``model_flops.matmul_peak_gflops``: ``torch.mm``
  and, in float32, oneDNN with a packed weight, which the loss uses;
  timed just before and just after each shape's runs: a shared host's speed drifts),
  and at the rates ``torch.mm`` / ``torch.bmm`` (or oneDNN, for the loss's products) reach on the
  update's own product shapes and operand layouts (an operand passed transposed stays so),
  timed alone, the best of three rounds over all of them (the LSTM layers at the peak rate):
  the time of an update that did nothing but its products. The rate the products reach inside
  training is their FLOPs over their profiled time, for all of them and apart for the output
  layer's (the loss's block products: logits, their row and weight gradients) and the rest (the
  model's layers and attention), each beside its time alone at its own shapes' rates. Those rates
  are each shape's best over many back-to-back calls, a ceiling; where training loses product speed
  is measured like for like **call by call**: one more pass over the same batches under the
  profiler, with shapes recorded, gives each product call's time (the whole call) and its operands'
  shapes and strides; then each call runs alone, its operator on fresh operands of that layout, one
  call at a time, the median of five, and the products that lose the most in training are named.
  **Target**: the update that would run its products at 70% of
  the peak (issue 57's target), and what it would leave beside the products at their own shapes' rates
  for everything else, against what the rest takes now: where that is nothing, the target is
  out of reach at those shapes whatever the overhead. With ``--threads 1`` the kernels are
  timed by this process's CPU time, and the whole update's rate is also given at its CPU
  time: on a shared machine the wall time holds the time other processes had the core, the
  CPU time does not.

Shapes: ``tiny`` (Transformer 2+2, d 128), ``base`` (6+6, d 512, 8 heads, ffn 2048: the
Transformer-base shape at its full size), ``rnn`` (Bahdanau, LSTM 256) and ``rnn-luong`` (Luong's
general attention with input feeding, LSTM 256: the shape train_speed compares with fairseq), fp32, 2 threads
(``--threads``), batches of at most 2,048 tokens. ``--quick``: the quick Multi30k slice, tiny
and rnn, 2 updates.
"""

from __future__ import annotations

import itertools
import math
import statistics
import tempfile
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager
from unittest.mock import patch

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from common import (THREADS, Report, bench_arguments, fmt, load_averages, repeats_of, shared_load_note,
                    wrapped_functions)
from model_flops import EXTRA_FORMULAS, ONEDNN, ONEDNN_PACKED, PEAK_SHAPES, TORCH, matmul_peak_gflops, product_run
from peers.arch import BASE_TRANSFORMER, TINY_LUONG_RNN, TINY_RNN, TINY_TRANSFORMER, RnnSpec, TrainSpec, TransformerSpec
from peers.corpus import prepare_multi30k
from peers.ours import model_section, train_section

from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.models import dropout as dropout_module
from nmt_cli.models.attention.multihead import MultiHeadAttention
from nmt_cli.models.rnn import AttentionalRNN
from nmt_cli.training import loss as loss_module
from nmt_cli.training import trainer as trainer_module
from nmt_cli.training.batching import Batch
from nmt_cli.training.distributed import init_distributed
from nmt_cli.training.objectives import cross_entropy
from nmt_cli.training.packed_layers import PackedWeights
from nmt_cli.training.run_dir import RunDirectory
from nmt_cli.training.updater import Updater

aten = torch.ops.aten

SHAPES = {"tiny": TINY_TRANSFORMER, "base": BASE_TRANSFORMER, "rnn": TINY_RNN, "rnn-luong": TINY_LUONG_RNN}
#: updates timed (and as many profiled) per shape, and warm-up updates before them
STEPS = {"tiny": 20, "base": 4, "rnn": 12, "rnn-luong": 12}
QUICK_STEPS = 2
WARMUP = 3
#: rounds of timing every recorded product shape alone; each shape's best counts
RATE_ROUNDS = 3

#: issue 57's target: matrix products at this share of the measured peak over the whole update
PEAK_SHARE_TARGET = 0.70
PRODUCTS = "matrix products (mm, addmm, bmm)"
LSTM = "LSTM layers (oneDNN: gate products and gate functions)"
REORDERS = ("weight reorders for oneDNN (packed layers' weights and their transposes once per update, the output "
            "layer's once per loss call)")
ATTENTION = "attention (fused kernel, or the explicit one's scaling and softmax; head split/merge; RNN: scores, softmax, context)"
LOSS = "loss: log-softmax, exp, smoothed-CE gradient (output-layer products above)"
DROPOUT = "dropout (mask draw and apply)"
OPTIMIZER = "optimizer: gradient-norm clip, fused Adam, zero_grad"
DATA = "data: collate and copy the batch"
OTHER = "other kernels (layer norm, embeddings, residual adds, ReLU, copies)"
FRAMEWORK = "framework operators (views, autograd bookkeeping)"
PYTHON = "Python and dispatch (wall time outside every operator)"
PARTS = (PRODUCTS, LSTM, REORDERS, ATTENTION, LOSS, DROPOUT, OPTIMIZER, DATA, OTHER, FRAMEWORK, PYTHON)

PRODUCT_OPS = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::addbmm",
               "mkldnn::_linear_pointwise"}
LSTM_OPS = {"aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"}
VIEW_OPS = {"aten::view", "aten::t", "aten::transpose", "aten::as_strided", "aten::expand", "aten::permute",
            "aten::unsqueeze", "aten::squeeze", "aten::reshape", "aten::_unsafe_view", "aten::slice",
            "aten::select", "aten::unbind", "aten::split", "aten::split_with_sizes", "aten::narrow",
            "aten::detach", "detach", "aten::alias", "aten::resolve_conj", "aten::resolve_neg", "aten::unflatten",
            "aten::empty", "aten::empty_strided", "aten::lift_fresh", "aten::_reshape_alias", "aten::chunk",
            "aten::is_nonzero", "aten::result_type", "aten::empty_like"}
RANGE = "train_profile::"
#: the two groups of products whose rates in training are shown apart
OUTPUT_LAYER, MODEL_LAYERS = "output layer", "model layers"


def _ranged(part: str, function):
    """``function`` inside a ``record_function`` range naming ``part``."""
    def wrapped(*args, **kwargs):
        with record_function(RANGE + part):
            return function(*args, **kwargs)
    return wrapped


@contextmanager
def part_ranges():
    """Ranges around the functions each part is made of, for the length of a profile."""
    patches = [(MultiHeadAttention, name, ATTENTION) for name in ("forward", "causal", "cross", "summarize_memory")]
    patches += [(PackedWeights, "reordered", REORDERS), (loss_module._OutputProducts, "__init__", REORDERS),
                (AttentionalRNN, "_attend", ATTENTION), (cross_entropy, "label_smoothed_cross_entropy", LOSS),
                (dropout_module, "dropout", DROPOUT), (Updater, "step", OPTIMIZER), (trainer_module, "collate", DATA),
                (Batch, "to", DATA)]
    with wrapped_functions(patches, _ranged):
        yield


def _range_of(event) -> str | None:
    """The part of the innermost range around a forward operator, or None."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(RANGE):
            return parent.name[len(RANGE):]
        parent = parent.cpu_parent
    return None


def _backward_node(event):
    """The ``autograd::engine::evaluate_function`` event an operator runs under in backward, or None."""
    parent = event
    while parent is not None:
        if parent.name.startswith("autograd::engine::evaluate_function"):
            return parent
        parent = parent.cpu_parent
    return None


def part_microseconds(events) -> tuple[Counter, int, float]:
    """Each part's operator time (microseconds, every operator's own time) in a profile, the operators
    run, and the products' time inside the loss (the output layer's: the loss takes its gradient in
    forward)."""
    forward_part: dict[int, str] = {}  # sequence number of an autograd node -> part of the op that made it
    for event in events:
        if event.sequence_nr >= 0 and _backward_node(event) is None and not event.name.startswith(RANGE):
            part = _range_of(event)
            if part is not None:
                forward_part.setdefault(event.sequence_nr, part)
    parts: Counter = Counter()
    operators, output_layer = 0, 0.0
    for event in events:
        if event.name.startswith(RANGE):  # a range's own time is Python
            continue
        operators += 1
        ranged = _range_of(event)
        if event.name in PRODUCT_OPS:
            part = PRODUCTS
            if ranged == LOSS:
                output_layer += event.self_cpu_time_total
        elif event.name in LSTM_OPS:
            part = LSTM
        elif ranged == REORDERS:  # in forward or in backward, whichever layer asked
            part = REORDERS
        else:
            node = _backward_node(event)
            part = forward_part.get(node.sequence_nr) if node is not None else ranged
            if part is None:
                framework = (event.name in VIEW_OPS or node is not None and not event.name.startswith("aten::")
                             or "AccumulateGrad" in event.name)
                part = FRAMEWORK if framework else OTHER
        parts[part] += event.self_cpu_time_total
    return parts, operators, output_layer


def _transposed(operand: torch.Tensor) -> bool:
    """Whether a product's operand is laid out column-major in its last two dimensions (a ``.t()`` of a
    row-major matrix): the libraries take such an operand as it is, at a rate of its own."""
    return _column_major(tuple(operand.shape), operand.stride())


def _column_major(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """:func:`_transposed` of a layout (an opaque one, without strides, is not)."""
    return len(shape) >= 2 and len(stride) >= 2 and stride[-2] == 1 and stride[-1] != 1 and shape[-2] > 1


class ProductShapes(TorchDispatchMode):
    """Records the (batch, rows, inner, columns, library, left transposed, right transposed) of every
    matrix product it sees, by group:
    :data:`OUTPUT_LAYER` while the loss runs (:meth:`marking_the_loss`), else :data:`MODEL_LAYERS`."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, Counter] = {OUTPUT_LAYER: Counter(), MODEL_LAYERS: Counter()}
        self.group = MODEL_LAYERS

    def marking_the_loss(self) -> ContextManager:
        """The loss's products counted as the output layer's, for as long as the context lasts."""
        loss = cross_entropy.label_smoothed_cross_entropy

        def marked(*args, **kwargs):
            self.group = OUTPUT_LAYER
            try:
                return loss(*args, **kwargs)
            finally:
                self.group = MODEL_LAYERS
        return patch.object(cross_entropy, "label_smoothed_cross_entropy", marked)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in (aten.mm, aten.bmm):
            left, right = args[0], args[1]
        elif packet in (aten.addmm, aten.addmm_, aten.baddbmm):
            left, right = args[1], args[2]
        else:
            left = None
        if left is not None:
            batch = left.size(0) if left.dim() == 3 else 1
            self.calls[self.group][(batch, left.size(-2), left.size(-1), right.size(-1), TORCH, _transposed(left),
                                    _transposed(right))] += 1
        elif ONEDNN and packet is torch.ops.mkldnn._linear_pointwise:  # x (..., in), packed weight (out, in)
            inputs, weight = args[0], args[1]
            self.calls[self.group][(1, inputs.numel() // inputs.size(-1), inputs.size(-1), weight.size(0),
                                    ONEDNN_PACKED, False, False)] += 1
        return func(*args, **(kwargs or {}))


def _operand(batch: int, rows: int, columns: int, transposed: bool) -> torch.Tensor:
    """A random (rows, columns) matrix, or ``batch`` of them, row-major or as the ``.t()`` of a row-major one."""
    leading = (batch,) if batch > 1 else ()
    if transposed:
        return torch.randn(*leading, columns, rows).transpose(-1, -2)
    return torch.randn(*leading, rows, columns)


def product_rate(shape: tuple[int, int, int, int, str, bool, bool], clock=time.perf_counter,
                 repeats: int = 5) -> float:
    """Best GFLOP/s of a product of one shape and layout in its library (:data:`TORCH`: ``torch.mm``,
    ``torch.bmm`` for a batch; :data:`ONEDNN_PACKED`: oneDNN with the right factor packed), at the
    current thread count."""
    batch, rows, inner, columns, library, left_transposed, right_transposed = shape
    left, right = _operand(batch, rows, inner, left_transposed), _operand(batch, inner, columns, right_transposed)
    if batch == 1:
        run = product_run(left, right, library)
    else:
        run = lambda: torch.bmm(left, right)  # noqa: E731
    flops = 2 * batch * rows * inner * columns
    calls = max(1, int(2e8 // max(flops, 1)))  # about 0.2 GFLOP per timing
    run()
    best = float("inf")
    for _ in range(repeats):
        started = clock()
        for _ in range(calls):
            run()
        best = min(best, (clock() - started) / calls)
    return flops / best / 1e9


def kernel_clock(threads: int):
    """The clock kernels are timed by: one thread's CPU time (steady on a shared machine), else wall time."""
    return time.process_time if threads == 1 else time.perf_counter


#: single calls timed per product alone (after one untimed), the median counts
ALONE_REPEATS = 5
#: the profiler's names of the element types a product may take
PROFILED_DTYPES = {"float": torch.float32, "double": torch.float64, "c10::BFloat16": torch.bfloat16,
                   "c10::Half": torch.float16}


def product_calls(events) -> tuple[Counter, Counter]:
    """Seconds and calls of each matrix-product call in a profile recorded with shapes, keyed by the
    operator and its tensor arguments' shapes, strides and element types (each call's whole time, as
    the same call alone is timed)."""
    seconds, calls = Counter(), Counter()
    for event in events:
        if event.name in PRODUCT_OPS:
            key = (event.name, tuple((tuple(shape), tuple(stride), dtype) for shape, stride, dtype in zip(
                event.structured_input_shapes, event.structured_input_strides, event.input_dtypes)
                if dtype in PROFILED_DTYPES))
            seconds[key] += event.cpu_time_total / 1e6
            calls[key] += 1
    return seconds, calls


def _rebuilt(shape: tuple[int, ...], stride: tuple[int, ...], dtype: str) -> torch.Tensor:
    """A tensor of this layout over new random memory."""
    extent = sum((size - 1) * step for size, step in zip(shape, stride)) + 1
    return torch.randn(extent, dtype=PROFILED_DTYPES[dtype]).as_strided(shape, stride)


def alone_seconds(key) -> float:
    """The median time of one call of a :func:`product_calls` key alone, on fresh operands of its layout
    (oneDNN's packed product: its input and a weight packed once, as :func:`model_flops.product_run`)."""
    name, operands = key
    if name == "mkldnn::_linear_pointwise":
        (inputs, _, _), (weight, _, _) = operands[:2]  # (..., in), the packed (out, in)
        run = product_run(torch.randn(math.prod(inputs[:-1]), inputs[-1]), torch.randn(weight[1], weight[0]),
                          ONEDNN_PACKED)
    else:
        packet = getattr(aten, name.split("::")[1])
        arguments = [_rebuilt(*operand) for operand in operands]
        inputs = sum(str(argument.type) == "Tensor" for argument in packet.default._schema.arguments)
        if len(arguments) > inputs:  # called with out=: the result's array is the last tensor recorded
            run = lambda: packet.out(*arguments[:-1], out=arguments[-1])  # noqa: E731
        else:
            run = lambda: packet.default(*arguments)  # noqa: E731
    run()
    times = []
    for _ in range(ALONE_REPEATS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def describe_product_call(key) -> str:
    """``aten::mm (2047x512 @ 512x2048)``, a transposed operand marked ``T``, a bias left out; oneDNN's
    product by its input and its packed (out, in) weight."""
    name, operands = key
    if name == "mkldnn::_linear_pointwise":
        (inputs, _, _), (weight, _, _) = operands[:2]
        return f"{name} ({'x'.join(map(str, inputs))} @ packed {'x'.join(map(str, weight))}T)"
    with_bias = name in ("aten::addmm", "aten::addmm_", "aten::baddbmm", "aten::addbmm")
    factors = operands[1:3] if with_bias else operands[:2]
    named = ["x".join(map(str, shape)) + ("T" if _column_major(shape, stride) else "") for shape, stride, _ in factors]
    return f"{name} ({' @ '.join(named)})"


@dataclass
class CallByCall:
    """An update's products timed call by call in training and alone (ms per update)."""

    in_training_ms: float
    alone_ms: float
    calls: float
    most_lost: list[tuple[str, float]]  # (product, ms per update lost in training), the largest first

    def describe(self) -> str:
        lost = "; ".join(f"{name} +{ms:.1f} ms" for name, ms in self.most_lost)
        return (f"{fmt(self.calls)} calls an update, each timed by the profiler as the update ran it; the "
                f"same calls alone (each one's operator, shapes and strides on fresh operands, one call at a time, "
                f"median of {ALONE_REPEATS}): {self.alone_ms:.1f} ms, so in training they take "
                f"{self.in_training_ms / self.alone_ms - 1:+.0%}; most time lost in training: {lost}")


def time_products_call_by_call(trainer, steps: int) -> CallByCall:
    """One more pass of ``steps`` updates under the profiler, shapes recorded, then each product call alone."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        for _ in range(steps):
            trainer._update()
    seconds, calls = product_calls(profiler.events())
    alone = {key: alone_seconds(key) * count for key, count in calls.items()}
    lost = sorted(((describe_product_call(key), (seconds[key] - alone[key]) * 1e3 / steps) for key in alone),
                  key=lambda item: -item[1])
    return CallByCall(sum(seconds.values()) * 1e3 / steps, sum(alone.values()) * 1e3 / steps,
                      sum(calls.values()) / steps, [item for item in lost[:3] if item[1] > 0])


@dataclass
class ShapeProfile:
    """What one shape's updates were made of."""

    wall_ms: list[float]  # per timed update
    cpu_ms: list[float]
    tokens: float  # target tokens per update
    parts_ms: dict[str, float]  # per update
    operators: float  # per update
    profiled_wall_ms: float  # per update, under the profiler
    flops: float  # matrix-product FLOPs per update
    lstm_flops: float
    product_seconds_at_shape_rates: float  # per update, ``mm``/``bmm`` products at their own shapes' rates
    groups: dict[str, "ProductGroup"]  # OUTPUT_LAYER and MODEL_LAYERS (the LSTM layers in neither)
    call_by_call: CallByCall


@dataclass
class ProductGroup:
    """Some of an update's products: their FLOPs, profiled time in training and time alone at their shapes' rates."""

    flops: float
    profiled_ms: float
    alone_ms: float

    def describe(self, all_flops: float) -> str:
        return (f"{self.flops / 1e9:.2f} GFLOP ({self.flops / all_flops:.0%} of the products'): "
                f"{fmt(self.flops / (self.profiled_ms / 1e3) / 1e9)} GFLOP/s in training; alone at their own "
                f"shapes' rates {self.alone_ms:.1f} ms ({fmt(self.flops / (self.alone_ms / 1e3) / 1e9)} GFLOP/s)")


def build_trainer(prepared: Path, spec: TransformerSpec | RnnSpec, run_dir: Path, threads: int):
    """A Trainer of ``nmt train`` for ``spec`` at ``train_speed.py``'s settings (no file is written)."""
    train_spec = TrainSpec(steps=10**6, log_every=10**6, warmup=4000)
    config = Config.from_dict({"model": model_section(spec), "train": train_section(train_spec, threads)})
    return trainer_module.Trainer(config, PreparedData(prepared), RunDirectory(run_dir), init_distributed("cpu"))


def profile_shape(prepared: Path, spec: TransformerSpec | RnnSpec, steps: int, warmup: int,
                  threads: int) -> ShapeProfile:
    """Time ``steps`` updates, profile as many more, count the products of one more."""
    with tempfile.TemporaryDirectory() as scratch:
        return _profile_trainer(build_trainer(prepared, spec, Path(scratch) / "run", threads), steps, warmup, threads)


def _profile_trainer(trainer, steps: int, warmup: int, threads: int) -> ShapeProfile:
    """:func:`profile_shape` on a built trainer: the batches of ``steps`` updates are drawn once and
    every pass (warm-up, timed, profiled, counted) cycles over them."""
    trainer.model.train()
    batches = [next(trainer.stream_of_batches) for _ in range(steps * trainer.cfg.update_freq)]
    trainer.stream_of_batches = itertools.cycle(batches)
    for _ in range(max(warmup, steps)):  # every batch at least once
        trainer._update()
    wall, cpu = [], []
    tokens_before = trainer.interval.tokens
    for _ in range(steps):
        started, started_cpu = time.perf_counter(), time.process_time()
        trainer._update()
        wall.append((time.perf_counter() - started) * 1e3)
        cpu.append((time.process_time() - started_cpu) * 1e3)
    tokens = (trainer.interval.tokens - tokens_before) / steps
    with part_ranges(), profile(activities=[ProfilerActivity.CPU]) as profiler:
        started = time.perf_counter()
        for _ in range(steps):
            trainer._update()
        profiled_wall = (time.perf_counter() - started) * 1e3 / steps
    parts, operators, output_layer_us = part_microseconds(profiler.events())
    parts_ms = {part: parts[part] / 1e3 / steps for part in PARTS if part != PYTHON}
    parts_ms[PYTHON] = max(0.0, profiled_wall - sum(parts_ms.values()))
    tokens_before = trainer.interval.tokens
    counter, shapes = FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS), ProductShapes()
    with ExitStack() as stack:
        stack.enter_context(counter)
        stack.enter_context(shapes)
        stack.enter_context(shapes.marking_the_loss())
        trainer._update()
    counted_tokens = trainer.interval.tokens - tokens_before
    by_op = counter.get_flop_counts().get("Global", {})
    lstm_flops = sum(v for op, v in by_op.items() if "rnn_layer" in str(op))
    scale = tokens / max(counted_tokens, 1)  # FLOPs of that update, at the timed updates' mean tokens
    recorded = [shape for calls in shapes.calls.values() for shape in calls]
    rates = {shape: 0.0 for shape in recorded}
    for _ in range(RATE_ROUNDS):  # rounds over every shape: a burst of the host's load hits one timing of each
        for shape in recorded:
            rates[shape] = max(rates[shape], product_rate(shape, kernel_clock(threads)))
    flops = {group: sum(count * 2 * shape[0] * shape[1] * shape[2] * shape[3] for shape, count in calls.items())
             for group, calls in shapes.calls.items()}
    seconds = {group: sum(count * 2 * shape[0] * shape[1] * shape[2] * shape[3] / (rates[shape] * 1e9)
                          for shape, count in calls.items()) for group, calls in shapes.calls.items()}
    output_layer_ms = output_layer_us / 1e3 / steps
    profiled = {OUTPUT_LAYER: output_layer_ms, MODEL_LAYERS: parts_ms[PRODUCTS] - output_layer_ms}
    groups = {group: ProductGroup(flops[group] * scale, profiled[group], seconds[group] * scale * 1e3)
              for group in shapes.calls}
    return ShapeProfile(wall, cpu, tokens, parts_ms, operators / steps, profiled_wall,
                        counter.get_total_flops() * scale, lstm_flops * scale, sum(seconds.values()) * scale, groups,
                        time_products_call_by_call(trainer, steps))


def peak_rate(threads: int) -> float:
    """This machine's best product rate now (GFLOP/s; ``model_flops.matmul_peak_gflops``); on one thread
    timed by this process's CPU time, as the rates of the update's own shapes are."""
    if threads == 1:
        libraries = (TORCH, ONEDNN_PACKED) if ONEDNN else (TORCH,)
        return max(product_rate((1, *shape, library, False, False), time.process_time) for shape in PEAK_SHAPES
                   for library in libraries)
    return matmul_peak_gflops(threads=threads)


def target_row(at_peak: float, at_shapes: float, wall: float, parts_ms: dict[str, float],
               profiled_wall: float) -> tuple[str, str, str]:
    """ms / update, share and note of the update that would run its products at
    :data:`PEAK_SHARE_TARGET` of peak: how long it may take, and what that leaves for everything
    but the products once they run at their own shapes' rates, against what the rest takes now
    (the non-product parts, scaled from the profiled update to the plain one)."""
    allowed = at_peak / PEAK_SHARE_TARGET
    rest_now = sum(ms for part, ms in parts_ms.items() if part not in (PRODUCTS, LSTM)) * wall / profiled_wall
    left = allowed - at_shapes
    if left <= 0:
        why = (f"out of reach at these shapes: their products alone, at their own shapes' rates, take "
               f"{at_shapes:.1f} ms")
    else:
        why = (f"{left:.1f} ms would be left beside the products at their own shapes' rates ({at_shapes:.1f} ms) "
               f"for everything else, which takes {rest_now:.1f} ms now")
    return f"{allowed:.1f}", f"{allowed / wall:.0%}", why


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help=f"comma list of {', '.join(SHAPES)} "
                        "(default: all; --quick: tiny,rnn)")
    parser.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS}, as "
                        "train_speed.py; 1 measures more steadily on a loaded machine)")
    parser.add_argument("--steps", type=int, default=None, help="updates timed and profiled per shape "
                        f"(default {', '.join(f'{k} {v}' for k, v in STEPS.items())}; --quick {QUICK_STEPS})")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else (["tiny", "rnn"] if args.quick else list(SHAPES))
    unknown = [name for name in names if name not in SHAPES]
    if unknown:
        parser.error(f"--models: unknown shape {unknown[0]!r} (choose from {', '.join(SHAPES)})")
    prepared = prepare_multi30k(args.work, args.quick)
    report = Report("train_profile", f"Where a training step's time goes (fp32, {args.threads} CPU thread"
                    f"{'s' if args.threads > 1 else ''})",
                    ["shape", "part", "ms / update", "share", "note"], quick=args.quick)
    # a thread count or a subset of the shapes (as train_speed.py's --models, so that a run on another
    # machine can stand beside the full table) is a section of its own
    report.variant = ", ".join(filter(None, [
        f"{args.threads} thread{'s' if args.threads > 1 else ''}" if args.threads != THREADS else "",
        "models " + ", ".join(names) if args.models else ""]))
    load_before = load_averages()
    peaks = {}
    torch.set_num_threads(args.threads)
    for name in names:
        spec = SHAPES[name]
        steps = args.steps or (QUICK_STEPS if args.quick else STEPS[name])
        shape = f"{name}: {spec.describe()}"
        peak_before = peak_rate(args.threads)
        runs = [profile_shape(prepared, spec, steps, 1 if args.quick else WARMUP, args.threads) for _ in range(repeats_of(args))]
        peak = peaks[name] = max(peak_before, peak_rate(args.threads))
        measured = runs[len(runs) // 2] if len(runs) > 1 else runs[0]
        walls = [statistics.median(run.wall_ms) for run in runs]
        wall = statistics.median(walls)
        for part in PARTS:
            report.add_row(shape, part, f"{measured.parts_ms[part]:.1f}",
                           f"{measured.parts_ms[part] / measured.profiled_wall_ms:.0%}", "")
        cpu = statistics.median(c for run in runs for c in run.cpu_ms)
        report.add_row(shape, "whole update", f"{wall:.1f}", "100%",
                       f"{fmt(measured.tokens / wall * 1e3)} tgt tok/s ({fmt(measured.tokens)} tgt tokens per "
                       f"update); updates {min(min(r.wall_ms) for r in runs):.0f}-"
                       f"{max(max(r.wall_ms) for r in runs):.0f} ms; CPU {cpu:.0f} ms; "
                       f"{fmt(measured.operators)} operators; under the profiler {measured.profiled_wall_ms:.0f} ms")
        product_ms = measured.parts_ms[PRODUCTS] + measured.parts_ms[LSTM]
        at_peak = measured.flops / (peak * 1e9) * 1e3
        at_shapes = measured.product_seconds_at_shape_rates * 1e3 + measured.lstm_flops / (peak * 1e9) * 1e3
        report.add_row(shape, "ceiling: products at the peak rate, nothing else", f"{at_peak:.1f}",
                       f"{at_peak / wall:.0%}",
                       f"{measured.flops / 1e9:.2f} GFLOP per update at {fmt(peak)} GFLOP/s: "
                       f"{fmt(measured.tokens / at_peak * 1e3)} tgt tok/s")
        report.add_row(shape, "ceiling: products at their own shapes' rates", f"{at_shapes:.1f}",
                       f"{at_shapes / wall:.0%}",
                       f"{fmt(measured.tokens / at_shapes * 1e3)} tgt tok/s"
                       + ("; LSTM layers at the peak rate" if measured.lstm_flops else ""))
        report.add_row(shape, f"target: products at {PEAK_SHARE_TARGET:.0%} of peak over the whole update",
                       *target_row(at_peak, at_shapes, wall, measured.parts_ms, measured.profiled_wall_ms))
        report.add_row(shape, "products in training: rate reached", "", "",
                       f"{fmt(measured.flops / (product_ms / 1e3) / 1e9)} GFLOP/s in their profiled time "
                       f"({measured.flops / (product_ms / 1e3) / 1e9 / peak:.0%} of peak); whole update: "
                       f"{fmt(measured.flops / (wall / 1e3) / 1e9)} GFLOP/s "
                       f"({measured.flops / (wall / 1e3) / 1e9 / peak:.0%} of peak); at its CPU time {cpu:.0f} ms: "
                       f"{fmt(measured.flops / (cpu / 1e3) / 1e9)} GFLOP/s "
                       f"({measured.flops / (cpu / 1e3) / 1e9 / peak:.0%} of peak)")
        for group, title in ((OUTPUT_LAYER, "the output layer's (in the loss: logits, row and weight gradients)"),
                             (MODEL_LAYERS, "the model's layers and attention")):
            report.add_row(shape, f"products in training: {title}", f"{measured.groups[group].profiled_ms:.1f}", "",
                           measured.groups[group].describe(measured.flops))
        report.add_row(shape, "products in training, call by call",
                       f"{measured.call_by_call.in_training_ms:.1f}", "", measured.call_by_call.describe())
    report.notes += [
        f"whole update: median wall time of {', '.join(f'{n} {args.steps or (QUICK_STEPS if args.quick else STEPS[n])}' for n in names)} "
        f"timed updates on batches drawn once, after a warm-up pass over the same batches (at least "
        f"{1 if args.quick else WARMUP} updates), median of {repeats_of(args)} run(s); "
        "parts: one more pass over the same updates under torch.profiler (each operator's own time; "
        "Python and dispatch: the profiled wall time less every operator's time; shares of the profiled wall time)",
        f"peak: the best rate of torch.mm and of oneDNN's packed product on {args.threads} thread(s) over "
        f"model_flops.PEAK_SHAPES, timed just before and "
        f"just after each shape's runs, as the machine's speed drifts ({', '.join(f'{n} {fmt(v)}' for n, v in peaks.items())} "
        "GFLOP/s)"
        + (", kernels timed by this process's CPU time (one thread: not slowed by other processes)"
           if args.threads == 1 else "") + "; FLOPs of matrix products only, counted as model_flops.py counts them",
        shared_load_note(load_before) + " The CPU time beside the wall time shows how much of an update was this "
        "process's.",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
