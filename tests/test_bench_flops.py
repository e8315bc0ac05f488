"""The FLOP formulas ``bench/model_flops.py`` adds to torch's counter, against hand counts.

torch's ``FlopCounterMode`` knows ``mm``, ``bmm``, ``addmm`` and the GPU attention kernels;
on a CPU an LSTM runs as oneDNN's fused layer, attention as the CPU flash kernel and our
loss accumulates the output layer's gradient with ``addmm_``. Without these formulas the
training-speed ceiling would be computed from a fraction of the work.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from model_flops import (EXTRA_FORMULAS, TORCH, matmul_peak_gflops, product_libraries,  # noqa: E402
                         product_run)  # bench/ is not a package


def counted(function) -> dict[str, int]:
    counter = FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS)
    with counter:
        function()
    return {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("bidirectional", [False, True])
def test_an_lstm_counts_its_gate_products_forward_and_twice_that_backward(bidirectional: bool) -> None:
    batch, steps, inputs, hidden = 3, 5, 8, 16
    lstm = torch.nn.LSTM(inputs, hidden, batch_first=True, bidirectional=bidirectional)
    sequence = torch.randn(batch, steps, inputs, requires_grad=True)
    directions = 2 if bidirectional else 1
    # per row and direction: x W_ih^T (4H x I) and h W_hh^T (4H x H), 2 FLOPs per multiply-add
    forward = directions * 2 * batch * steps * 4 * hidden * (inputs + hidden)
    flops = counted(lambda: lstm(sequence)[0].sum().backward())
    if "aten.mkldnn_rnn_layer" not in flops:
        pytest.skip(f"this torch build runs nn.LSTM without oneDNN's fused layer (counted: {sorted(flops)})")
    assert flops["aten.mkldnn_rnn_layer"] == forward
    assert flops["aten.mkldnn_rnn_layer_backward"] == 2 * forward


def test_cpu_flash_attention_counts_scores_and_weighted_values() -> None:
    batch, heads, queries, keys, dim = 2, 4, 6, 9, 8
    query = torch.randn(batch, heads, queries, dim, requires_grad=True)
    key = torch.randn(batch, heads, keys, dim, requires_grad=True)
    value = torch.randn(batch, heads, keys, dim, requires_grad=True)
    flops = counted(lambda: F.scaled_dot_product_attention(query, key, value).sum().backward())
    name = "aten._scaled_dot_product_flash_attention_for_cpu"
    if name not in flops:
        pytest.skip(f"this torch build has another CPU attention kernel (counted: {sorted(flops)})")
    forward = 2 * (2 * batch * heads * queries * keys * dim)  # Q K^T and P V
    assert flops[name] == forward
    # backward: Q K^T again, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q
    assert flops[name + "_backward"] == 5 * forward // 2


def test_an_accumulating_product_counts_like_addmm() -> None:
    total, left, right = torch.zeros(7, 5), torch.randn(7, 3), torch.randn(3, 5)
    assert counted(lambda: total.addmm_(left, right)) == {"aten.addmm_": 2 * 7 * 3 * 5}


def test_the_matmul_peak_is_a_positive_rate() -> None:
    peak = matmul_peak_gflops(repeats=1)
    assert 0 < peak < 1e5  # GFLOP/s: above zero and below any CPU's


def test_each_library_the_peak_times_computes_the_same_product() -> None:
    left, right = torch.randn(7, 5), torch.randn(5, 3)
    libraries = product_libraries(torch.float32)
    assert libraries[0] == TORCH and product_libraries(torch.bfloat16) == (TORCH,)  # oneDNN's packing: float32
    for library in libraries:
        assert torch.allclose(product_run(left, right, library)(), left @ right, atol=1e-5), library
