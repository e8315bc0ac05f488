"""float32 CPU training's oneDNN products for large Linear layers (training/packed_layers.py)."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from nmt_cli.config import Config
from nmt_cli.models import build_model
from nmt_cli.models import packed as packed_module
from nmt_cli.models.attention.multihead import MultiHeadAttention, SoftmaxAttention
from nmt_cli.models.linear import products_of
from nmt_cli.models.packed import can_pack, onednn_trains_faster, pack_linear_layers, packed_linear
from nmt_cli.training import packed_layers, train
from nmt_cli.training import trainer as trainer_module
from nmt_cli.training.packed_layers import MIN_WEIGHT_ELEMENTS, pack_training_layers
from tests.test_resume import SETTINGS, _logged_by_step

pytestmark = [pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch build has no oneDNN kernels"),
              pytest.mark.usefixtures("training_on_onednn")]  # the path taken on CPUs other than Intel's

CPU = torch.device("cpu")


def _twins(make) -> tuple[nn.Module, nn.Module]:
    """Two modules from ``make`` with the same weights."""
    torch.manual_seed(0)
    first = make()
    second = make()
    second.load_state_dict(first.state_dict())
    return first, second


def test_a_large_layer_gives_f_linears_output_and_gradients():
    packed, plain = _twins(lambda: nn.Linear(512, 1024))
    store = pack_training_layers(nn.Sequential(packed), CPU, compiled=False)
    assert store is not None and products_of(packed) is not F.linear
    x = torch.randn(3, 37, 512, requires_grad=True)
    x_plain = x.detach().clone().requires_grad_()
    out, out_plain = packed(x), plain(x_plain)
    torch.testing.assert_close(out, out_plain, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(out)
    out.backward(grad)
    out_plain.backward(grad)
    torch.testing.assert_close(x.grad, x_plain.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed.weight.grad, plain.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed.bias.grad, plain.bias.grad, rtol=1e-5, atol=1e-5)
    assert len(store) == 2  # the weight and its transpose, each reordered once
    # the layer is still exactly an nn.Linear with the same parameters: checkpoints and inference packing see no change
    assert type(packed) is nn.Linear and packed.state_dict().keys() == plain.state_dict().keys()
    assert type(pack_linear_layers(nn.Sequential(packed))[0]).__name__ == "PackedLinear"


def test_cross_attention_multiplies_by_slices_of_the_fused_projection():
    """Queries take the first d rows of in_proj, keys and values the rest: each slice is its own reorder."""
    make = lambda: MultiHeadAttention(512, 8, SoftmaxAttention())  # noqa: E731
    packed, plain = _twins(make)
    store = pack_training_layers(packed, CPU, compiled=False)
    memory, queries = torch.randn(2, 5, 512), torch.randn(2, 4, 512, requires_grad=True)
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    results = []
    for attention in (packed, plain):
        q = queries.detach().clone().requires_grad_()
        out, _ = attention.cross(q, attention.summarize_memory(memory, key_mask))
        out.square().sum().backward()
        results.append((out, q.grad, attention.in_proj.weight.grad, attention.out_proj.weight.grad))
    for mine, theirs in zip(*results):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    # Q rows and out_proj with their transposes; K/V rows without (the memory takes no gradient here)
    assert len(store) == 5


def test_reorders_are_remade_after_each_optimizer_step():
    """Fused Adam changes the weights in place; after clear() the products use the new weights."""
    layer = nn.Linear(512, 512)
    store = pack_training_layers(nn.Sequential(layer), CPU, compiled=False)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    x = torch.randn(64, 512)
    for _ in range(3):
        out = layer(x)
        torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        out.square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        store.clear()
        assert len(store) == 0
    store.release()
    assert products_of(layer) is F.linear and not store.layers


def test_what_keeps_f_linear():
    small = nn.Linear(128, 512)  # the tiny Transformer's largest layer
    assert small.weight.numel() < MIN_WEIGHT_ELEMENTS
    assert pack_training_layers(nn.Sequential(small), CPU, compiled=False) is None
    assert products_of(small) is F.linear
    large = nn.Linear(512, 512)
    assert pack_training_layers(nn.Sequential(large), CPU, compiled=True) is None  # torch.compile's own kernels
    assert pack_training_layers(nn.Sequential(large), torch.device("meta"), compiled=False) is None
    store = pack_training_layers(nn.Sequential(large), CPU, compiled=False)
    x = torch.randn(8, 512)
    with torch.no_grad():  # validation
        torch.testing.assert_close(large(x), F.linear(x, large.weight, large.bias))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert large(x).dtype == torch.bfloat16
    assert len(store) == 0


def test_training_with_packed_layers_resumes_exactly_and_follows_plain_training(tiny_prepared, tmp_path, monkeypatch):
    """Every layer of the test model packed (the threshold lowered): losses as with F.linear to
    rounding, and a run split in two sessions equal to the whole one to the last bit."""
    settings = {**SETTINGS, "train.max_steps": 12, "train.precision": "fp32"}  # auto is bf16 on some CPUs
    train(Config().with_overrides(settings), tiny_prepared, tmp_path / "plain", stream=io.StringIO())
    calls, stores = [], []
    monkeypatch.setattr(packed_layers, "packed_linear", lambda *args: calls.append(1) or packed_linear(*args))

    def recorded(*args):
        stores.append(pack_training_layers(*args, min_weights=1))
        return stores[-1]
    monkeypatch.setattr(trainer_module, "pack_training_layers", recorded)
    train(Config().with_overrides(settings), tiny_prepared, tmp_path / "whole", stream=io.StringIO())
    train(Config().with_overrides({**settings, "train.max_steps": 5}), tiny_prepared, tmp_path / "split",
          stream=io.StringIO())
    train(Config().with_overrides(settings), tiny_prepared, tmp_path / "split", stream=io.StringIO())
    assert calls, "no layer took oneDNN's products"
    # each run gave its layers F.linear back at its end: nothing else clears the reorders afterwards
    assert len(stores) == 3 and all(store is not None and not store.layers and not len(store) for store in stores)
    whole = _logged_by_step(tmp_path / "whole")
    assert _logged_by_step(tmp_path / "split") == whole
    assert whole == pytest.approx(_logged_by_step(tmp_path / "plain"), abs=2e-4)
    final = "checkpoints/step-00000012/model.safetensors"
    split_weights, whole_weights = load_file(tmp_path / "split" / final), load_file(tmp_path / "whole" / final)
    assert all(torch.equal(split_weights[name], whole_weights[name]) for name in whole_weights)


def test_a_base_sized_transformer_packs_its_layers_and_leaves_the_output_layer_to_the_loss():
    config = Config().with_overrides({"model.d_model": 512, "model.heads": 8, "model.ffn_dim": 2048,
                                      "model.encoder_layers": 1, "model.decoder_layers": 1}).model
    model = build_model(config, 600, 600, True)
    assert pack_training_layers(model, CPU, compiled=False) is not None
    packed = {name for name, module in model.named_modules() if isinstance(module, nn.Linear)
              and products_of(module) is not F.linear}
    assert packed and all(name.rsplit(".", 1)[-1] in {"in_proj", "out_proj", "linear1", "linear2"} for name in packed)
    assert products_of(model.output_layer()) is F.linear
    tiny = build_model(Config().with_overrides({"model.d_model": 128, "model.ffn_dim": 512}).model, 8000, 8000, True)
    assert pack_training_layers(tiny, CPU, compiled=False) is None  # no layer of 2^18 weights but the output layer


def test_on_an_intel_cpu_training_keeps_torchs_products(monkeypatch):
    """MKL takes its fast code paths on Intel CPUs, where training measured faster without
    oneDNN's reorders (``models/packed.py``); the vendor is read once from ``/proc/cpuinfo``."""
    large = nn.Linear(512, 512)
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "GenuineIntel")
    assert not onednn_trains_faster(CPU)
    assert pack_training_layers(nn.Sequential(large), CPU, compiled=False) is None
    assert products_of(large) is F.linear
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "")  # not told: as before the two were told apart
    assert onednn_trains_faster(CPU) and not onednn_trains_faster(torch.device("meta"))
