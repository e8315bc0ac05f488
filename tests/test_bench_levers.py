"""``bench/train_levers.py``: each lever computes the update the shipped trainer computes, only
by other means (so that its row times equal work), and puts back what it changed. No benchmark
runs here; the quick run of the script is in ``test_bench_quick.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import train_levers  # noqa: E402  (bench/ is not a package)

from nmt_cli.models import packed as packed_module  # noqa: E402
from nmt_cli.models.attention.multihead import MultiHeadAttention, SoftmaxAttention  # noqa: E402
from nmt_cli.models.dropout import dropout  # noqa: E402
from nmt_cli.models.linear import products_of  # noqa: E402
from nmt_cli.models.packed import can_pack  # noqa: E402
from nmt_cli.training import loss as loss_module  # noqa: E402
from nmt_cli.training.packed_layers import pack_training_layers  # noqa: E402


def linear_and_gradients(rows: int) -> tuple[torch.Tensor, ...]:
    """A Linear layer's output and its three gradients, on (2, rows, 24) inputs, 40 outputs."""
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(2, rows, 24, generator=generator, requires_grad=True)
    weight = torch.randn(40, 24, generator=generator, requires_grad=True)
    bias = torch.randn(40, generator=generator, requires_grad=True)
    upstream = torch.randn(2, rows, 40, generator=generator)
    y = F.linear(x, weight, bias)
    y.backward(upstream)
    return y.detach(), x.grad, weight.grad, bias.grad


MODEL_LAYER_LEVERS = [lever for lever in train_levers.levers() if lever.name.startswith("model layers")]
PACKED = "model layers: oneDNN, weights packed"
F_LINEAR_LEVERS = [lever for lever in MODEL_LAYER_LEVERS if lever.name != PACKED]


@pytest.mark.parametrize("lever", F_LINEAR_LEVERS, ids=lambda lever: lever.name)
@pytest.mark.parametrize("rows", [1, 37, 64])
def test_a_model_layer_lever_computes_the_same_output_and_gradients(lever, rows: int) -> None:
    expected = linear_and_gradients(rows)
    shipped_linear = F.linear
    with lever.context(None)():
        assert F.linear is not shipped_linear  # the lever is in force
        got = linear_and_gradients(rows)
    assert F.linear is shipped_linear  # and put back
    for name, want, have in zip(("output", "input gradient", "weight gradient", "bias gradient"), expected, got):
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-5, msg=f"{lever.name}: {name}")


def test_the_onednn_levers_are_offered_where_onednn_is() -> None:
    names = {lever.name for lever in MODEL_LAYER_LEVERS}
    assert "model layers: OpenBLAS" in names
    assert ("model layers: oneDNN" in names) == can_pack(torch.device("cpu"))


@pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch build has no oneDNN products")
@pytest.mark.usefixtures("training_on_onednn")  # the shipped store below packs the large layer, on any CPU
@pytest.mark.parametrize("rows", [1, 37])
def test_the_packed_weights_lever_packs_every_layer_for_the_trainer_to_clear_and_puts_them_back(rows: int) -> None:
    """Every layer, small ones too, on the trainer's store (which the trainer clears after each
    optimizer step); afterwards the large layer has the products training gave it, the small one
    ``F.linear``, and the trainer its own store."""
    large, small = torch.nn.Linear(512, 512), torch.nn.Linear(512, 40)
    model = torch.nn.Sequential(large, small)
    shipped = pack_training_layers(model, torch.device("cpu"), False)
    trainer = SimpleNamespace(model=model, packed_weights=shipped)
    own = products_of(large)
    x = torch.randn(2, rows, 512, generator=torch.Generator().manual_seed(rows), requires_grad=True)
    model(x).square().sum().backward()
    expected = [parameter.grad.clone() for parameter in model.parameters()]
    model.zero_grad()
    lever = next(lever for lever in MODEL_LAYER_LEVERS if lever.name == PACKED)
    with lever.context(trainer)():
        store = trainer.packed_weights
        assert store is not shipped and store.layers == [large, small]
        assert products_of(small) is not F.linear and products_of(large) is not own
        model(x).square().sum().backward()
        assert len(store) == 4  # each weight and its transpose, reordered for the trainer to clear
    for name, want, (_, parameter) in zip(("large weight", "large bias", "small weight", "small bias"), expected,
                                          model.named_parameters()):
        torch.testing.assert_close(parameter.grad, want, rtol=1e-4, atol=1e-4, msg=name)
    assert trainer.packed_weights is shipped and products_of(large) is own and products_of(small) is F.linear


def test_a_loss_block_lever_changes_the_block_and_puts_it_back() -> None:
    shipped = loss_module.CPU_BLOCK_ELEMENTS
    block_levers = [lever for lever in train_levers.levers() if lever.name.startswith("loss blocks")]
    assert len(block_levers) == 4 and all(f"2^{shipped.bit_length() - 1} " not in lever.name for lever in block_levers)
    for lever in block_levers:
        with lever.context(None)():
            assert loss_module.CPU_BLOCK_ELEMENTS == 2 ** int(lever.name.split("^")[1].split()[0]) != shipped
        assert loss_module.CPU_BLOCK_ELEMENTS == shipped


@pytest.mark.parametrize("rates, shipped, verdict", [
    ([10.0], [9.0], "- (one round)"),
    ([11, 12, 11, 12, 11, 12], [10, 10, 10, 10, 10, 10], "yes: faster"),
    ([8, 9, 8, 9, 8, 9], [10, 10, 10, 10, 10, 10], "no: slower"),
    ([9, 11, 9, 11, 9, 11], [10, 10, 10, 10, 10, 10], "no: within noise"),
])
def test_a_lever_is_worth_taking_only_when_its_whole_interval_lies_above_one(rates, shipped, verdict: str) -> None:
    assert train_levers.worth_taking(rates, shipped) == verdict


@pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch build has no oneDNN products")
@pytest.mark.usefixtures("training_on_onednn")
def test_the_mkl_lever_puts_the_large_layers_on_f_linear_and_back() -> None:
    large, small = torch.nn.Linear(512, 512), torch.nn.Linear(16, 16)
    model = torch.nn.Sequential(large, small)
    trainer = SimpleNamespace(model=model, packed_weights=pack_training_layers(model, torch.device("cpu"), False))
    lever = next(lever for lever in train_levers.levers() if lever.name == "large layers: MKL")
    assert lever.applies(trainer)
    assert not lever.applies(SimpleNamespace(packed_weights=None))  # the tiny Transformer: no layer that large
    own = products_of(large)
    assert own is not F.linear and products_of(small) is F.linear
    with lever.context(trainer)():
        assert products_of(large) is F.linear
        x = torch.randn(4, 512)
        torch.testing.assert_close(large(x), F.linear(x, large.weight, large.bias), rtol=0, atol=0)
    assert products_of(large) is own


@pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch build has no oneDNN products")
def test_on_an_intel_cpu_the_onednn_lever_packs_the_large_layers_for_the_trainer_and_gives_them_back(
        monkeypatch) -> None:
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "GenuineIntel")
    large, small = torch.nn.Linear(512, 512), torch.nn.Linear(16, 16)
    model = torch.nn.Sequential(large, small)
    trainer = SimpleNamespace(model=model, packed_weights=pack_training_layers(model, torch.device("cpu"), False))
    assert trainer.packed_weights is None  # training packs nothing here
    lever = next(lever for lever in train_levers.levers() if lever.name == "large layers: oneDNN")
    assert lever.applies(trainer) and products_of(large) is F.linear  # asking built and released a store
    assert not lever.applies(SimpleNamespace(model=torch.nn.Sequential(small), packed_weights=None))
    x = torch.randn(4, 512, requires_grad=True)
    with lever.context(trainer)():
        store = trainer.packed_weights
        assert store is not None and store.layers == [large] and products_of(small) is F.linear
        large(x).sum().backward()
        assert len(store) == 2  # the weight and its transpose, for the trainer to clear after the step
    assert trainer.packed_weights is None and products_of(large) is F.linear


@pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch build has no oneDNN products")
@pytest.mark.parametrize("vendor, lever_name", [("GenuineIntel", "loss products: oneDNN"),
                                                 ("AuthenticAMD", "loss products: MKL")])
def test_the_loss_products_lever_takes_the_library_training_does_not(monkeypatch, vendor: str,
                                                                      lever_name: str) -> None:
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: vendor)
    cpu = torch.device("cpu")
    shipped = loss_module.onednn_trains_faster(cpu)
    lever = next(lever for lever in train_levers.levers() if lever.name.startswith("loss products"))
    assert lever.name == lever_name
    with lever.context(None)():
        assert loss_module.onednn_trains_faster(cpu) is not shipped
    assert loss_module.onednn_trains_faster(cpu) is shipped


@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_the_logits_array_lever_gives_each_block_an_array_of_its_own_where_the_loss_reuses_one(
        monkeypatch, vendor: str) -> None:
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: vendor)
    trainer = SimpleNamespace(model=torch.nn.Linear(2, 2))
    lever = next(lever for lever in train_levers.levers() if lever.name == "loss logits: an array per block")
    assert lever.applies(trainer) is (vendor == "GenuineIntel" or not can_pack(torch.device("cpu")))  # torch's products
    shipped = loss_module._OutputProducts.logits
    with lever.context(trainer)():
        assert loss_module._OutputProducts.logits is loss_module._OutputProducts.fresh_logits
    assert loss_module._OutputProducts.logits is shipped


def test_the_heads_lever_gives_the_same_attention_with_heads_as_views_of_the_projection() -> None:
    """Old way and shipped way: the same output and gradients; the lever's heads are views, the shipped ones not."""
    torch.manual_seed(2)
    attention = MultiHeadAttention(d_model=16, heads=4, kernel=SoftmaxAttention())
    x = torch.randn(3, 5, 16, requires_grad=True)
    lever = next(lever for lever in train_levers.levers() if lever.name == "attention heads: views")

    def run():
        attention.zero_grad()
        x.grad = None
        output = attention.causal(x)
        output.backward(torch.ones_like(output))
        return output, x.grad, attention.in_proj.weight.grad, attention.in_proj.bias.grad, attention._project(x, 0, 3)

    *shipped, shipped_heads = run()
    with lever.context(None)():
        *views, view_heads = run()
    for got, want in zip(views, shipped):
        torch.testing.assert_close(got, want)
    assert all(head.is_contiguous() for head in shipped_heads)
    assert not any(head.is_contiguous() for head in view_heads)


def test_the_dropout_lever_draws_bool_masks_that_drop_the_same_elements() -> None:
    x = torch.rand(1000) + 0.5
    lever = next(lever for lever in train_levers.levers() if lever.name == "dropout masks: bools")
    torch.manual_seed(3)
    shipped = dropout(x.requires_grad_(), 0.3, training=True)
    torch.manual_seed(3)
    with lever.context(None)():
        old = dropout(x, 0.3, training=True)
    assert old.grad_fn.saved_tensors[0].dtype == torch.bool and shipped.grad_fn.saved_tensors[0].dtype == torch.float32
    torch.testing.assert_close(old, shipped, rtol=0, atol=0)
