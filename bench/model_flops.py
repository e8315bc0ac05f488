"""Matrix-product FLOPs of a training step, and this machine's matrix-product peak.

Together they bound training speed: a trainer that spent all its time in matrix products,
each at the best rate this CPU reaches, would train ``peak / (FLOPs per target token)``
tokens/s. ``train_speed.py`` reports each toolkit's achieved rate as a share of the peak
(model FLOPs utilisation, the usual measure of how much of the hardware a trainer uses)
and that ceiling as a multiple of the fastest peer.

FLOPs are counted on nmt-cli's model with torch's ``FlopCounterMode`` over sampled training
batches: one forward and backward pass with the loss, as the trainer runs it. The peers
train the same architecture on the same batches, so up to padding it is their count too.
Only matrix products are counted (2 FLOPs per multiply-add); softmax, layer norm and the
other element-wise work is what a ceiling leaves out.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from common import THREADS
from peers.arch import RnnSpec, TransformerSpec
from peers.ours import model_section

from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.models import build_model
from nmt_cli.models.packed import can_pack, pack_weight, packed_linear
from nmt_cli.training.batching import collate, make_batches
from nmt_cli.training.loss import label_smoothed_cross_entropy

#: shapes (rows, inner, columns) of the products a step is made of: Transformer projections
#: and feed-forward layers, LSTM gates, the output layer; the peak is the best of them
PEAK_SHAPES = ((2048, 512, 2048), (2048, 2048, 512), (2048, 512, 512), (2048, 768, 1024), (2048, 256, 8000))


def _rnn_layer_flops(input_shape, input_weights, hidden_weights, *args, **kwargs) -> int:
    """oneDNN's fused RNN layer (``aten.mkldnn_rnn_layer``): ``x W_ih^T`` and ``h W_hh^T`` per row.

    ``input_shape`` is (B, T, I) or packed (rows, I); the weights are (gates * H, I) and (gates * H, H).
    """
    rows = int(np.prod(input_shape[:-1]))
    return 2 * rows * (int(np.prod(input_weights)) + int(np.prod(hidden_weights)))


def _rnn_layer_backward_flops(input_shape, input_weights, hidden_weights, *args, **kwargs) -> int:
    """Gradients of inputs, states and both weights: twice the forward products."""
    return 2 * _rnn_layer_flops(input_shape, input_weights, hidden_weights)


def _accumulating_product_flops(self_shape, left, right, *args, **kwargs) -> int:
    """In-place ``C += A B`` (``aten.addmm_``: the loss accumulates the output layer's weight gradient)."""
    return 2 * left[0] * left[1] * right[1]


def _cpu_attention_flops(query, key, value, *args, **kwargs) -> int:
    """torch's CPU flash attention: ``Q K^T`` and ``P V``."""
    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward_flops(grad_out, query, key, value, *args, **kwargs) -> int:
    """Its backward: ``Q K^T`` again, then ``dP``, ``dV``, ``dQ`` and ``dK``."""
    return sdpa_backward_flop_count(grad_out, query, key, value)


def _packed_product_flops(input_shape, weight_shape, *args, **kwargs) -> int:
    """oneDNN's product with a packed weight (``mkldnn._linear_pointwise``: float32 training's products
    on CPUs other than Intel's, the loss's with the output layer and the large layers'): ``x W^T``,
    the weight (out, in)."""
    return 2 * int(np.prod(input_shape[:-1])) * int(np.prod(weight_shape))


#: whether this torch has oneDNN's packed products, which float32 training takes on CPUs other than Intel's
ONEDNN = can_pack(torch.device("cpu"))

#: products torch's counter has no formula for (it knows mm, bmm, addmm and the GPU attentions)
EXTRA_FORMULAS = {
    torch.ops.aten.addmm_: _accumulating_product_flops,
    torch.ops.aten.mkldnn_rnn_layer: _rnn_layer_flops,
    torch.ops.aten.mkldnn_rnn_layer_backward: _rnn_layer_backward_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops,
    **({torch.ops.mkldnn._linear_pointwise: _packed_product_flops} if ONEDNN else {}),
}


def flops_per_target_token(prepared: Path, spec: TransformerSpec | RnnSpec, max_tokens: int,
                           samples: int = 4, seed: int = 0) -> float:
    """Matrix-product FLOPs of one training step per target token, over ``samples`` random batches."""
    data = PreparedData(prepared)
    tokenizer, split = data.tokenizer, data.split("train")
    config = Config.from_dict({"model": model_section(spec)})
    torch.manual_seed(seed)
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    batches = make_batches(split.src.lengths, split.tgt.lengths, max_tokens)
    chosen = np.random.default_rng(seed).choice(len(batches), min(samples, len(batches)), replace=False)
    flops = tokens = 0
    for index in chosen:
        batch = collate(split, batches[index])
        counter = FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS)
        with counter:
            features, _ = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, features_only=True)
            loss, _ = label_smoothed_cross_entropy(features, model.output_layer(), batch.tgt_out, batch.tgt_mask,
                                                   smoothing=0.1)
            loss.backward()
        model.zero_grad(set_to_none=True)
        flops += counter.get_total_flops()
        tokens += batch.num_tokens
    return flops / tokens


#: a product's library: torch's own (MKL on a CPU), or oneDNN with a packed weight (the float32 loss)
TORCH, ONEDNN_PACKED = "torch", "onednn"


def product_libraries(dtype: torch.dtype) -> tuple[str, ...]:
    """The libraries nmt-cli runs its matrix products in ``dtype`` with: ``torch.mm`` (MKL on a CPU) and,
    in float32 where this torch has it, oneDNN with the right factor packed (the loss's products)."""
    return (TORCH, ONEDNN_PACKED) if ONEDNN and dtype == torch.float32 else (TORCH,)


def product_run(left: torch.Tensor, right: torch.Tensor, library: str):
    """A call that computes ``left @ right`` (2-d) as ``library`` runs it (one of :func:`product_libraries`);
    oneDNN's packs ``right`` once, here."""
    if library == TORCH:
        return lambda: torch.mm(left, right)
    packed = pack_weight(right.t())
    return lambda: packed_linear(left, packed)


def matmul_peak_gflops(dtype: torch.dtype = torch.float32, threads: int = THREADS, repeats: int = 5) -> float:
    """The best rate over :data:`PEAK_SHAPES` in ``dtype`` on ``threads`` threads (GFLOP/s), of ``torch.mm``
    and of oneDNN's packed product (:func:`product_run`): on AMD CPUs MKL's is the lower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        best = 0.0
        for rows, inner, columns in PEAK_SHAPES:
            left, right = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, columns, dtype=dtype)
            for run in (product_run(left, right, library) for library in product_libraries(dtype)):
                run()  # warm-up: thread pool and packed buffers
                for _ in range(repeats):
                    start = time.perf_counter()
                    run()
                    best = max(best, 2 * rows * inner * columns / (time.perf_counter() - start) / 1e9)
        return best
    finally:
        torch.set_num_threads(previous)
