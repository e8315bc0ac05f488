"""Label-smoothed loss (computed block by block) against hand computations and autograd; optimisers and learning-rate schedules."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt_cli.config import TrainConfig
from nmt_cli.models import packed as packed_module
from nmt_cli.models.packed import can_pack
from nmt_cli.training import loss as loss_module
from nmt_cli.training.loss import label_smoothed_cross_entropy
from nmt_cli.training.schedule import InverseSqrtWarmup, LearningRateSchedule, build_optimizer


def _identity_layer(vocab: int, dtype=torch.float32) -> nn.Linear:
    """An output layer whose logits are its input features (V features -> V logits)."""
    layer = nn.Linear(vocab, vocab, bias=False).to(dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(vocab, dtype=dtype))
    return layer


def test_loss_matches_a_hand_computation():
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]]])  # (B=1, T=2, V=3)
    target = torch.tensor([[0, 2]])
    mask = torch.tensor([[True, False]])  # the second position is padding
    eps = 0.1
    log_z = math.log(math.exp(2.0) + math.exp(0.0) + math.exp(-1.0))
    log_p = [2.0 - log_z, 0.0 - log_z, -1.0 - log_z]
    expected_nll = -log_p[0]
    expected_loss = (1 - eps) * expected_nll + eps / 3 * -sum(log_p)
    loss, nll = label_smoothed_cross_entropy(logits, _identity_layer(3), target, mask, eps)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-6)
    assert nll.item() == pytest.approx(expected_nll, abs=1e-6)


def test_loss_equals_torch_cross_entropy_with_smoothing_and_ignores_padding():
    torch.manual_seed(0)
    features = torch.randn(3, 5, 7)
    layer = nn.Linear(7, 11)
    target = torch.randint(4, 11, (3, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    loss, nll = label_smoothed_cross_entropy(features, layer, target, mask, 0.2)
    logits = layer(features).view(-1, 11)
    padded_target = target.masked_fill(~mask, -100)
    reference = F.cross_entropy(logits, padded_target.view(-1), label_smoothing=0.2, reduction="sum")
    plain = F.cross_entropy(logits, padded_target.view(-1), reduction="sum")
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)
    assert nll.item() == pytest.approx(plain.item(), rel=1e-6)
    noisy = features.clone()
    noisy[~mask] = 1e4  # whatever sits at padded positions does not count
    assert label_smoothed_cross_entropy(noisy, layer, target, mask, 0.2)[0].item() == pytest.approx(loss.item(), rel=1e-6)


def reference_smoothed_loss(logits, target, mask, eps):
    """The formula through autograd on the whole logits matrix: summed (loss, NLL) over ``mask``."""
    log_probs = torch.log_softmax(logits, dim=-1)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * -log_probs.mean(dim=-1)
    return (loss * mask).sum(), (nll * mask).sum()


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("bias", [False, True])
def test_blockwise_gradient_equals_autograd_of_the_formula(eps, bias, monkeypatch):
    """Blocks of 5 rows (of 15 rows, 12 or 13 real ones: the last block is short) give autograd's
    gradient for the features, the weight and the bias; a loss scale (``backward(2.5 * loss)``)
    carries through."""
    monkeypatch.setattr(loss_module, "CPU_BLOCK_ELEMENTS", 5 * 13)
    torch.manual_seed(3)
    features = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    layer = nn.Linear(4, 13, bias=bias).double()
    target = torch.randint(0, 13, (3, 5))
    mask = torch.rand(3, 5) > 0.3
    assert int(mask.sum()) % 5 > 0
    parameters = [features, *layer.parameters()]

    expected_loss, expected_nll = reference_smoothed_loss(layer(features), target, mask, eps)
    expected = torch.autograd.grad(2.5 * expected_loss, parameters)
    loss, nll = label_smoothed_cross_entropy(features, layer, target, mask, eps)
    blockwise = torch.autograd.grad(2.5 * loss, parameters)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(nll, expected_nll.detach(), rtol=1e-12, atol=1e-12)
    assert not nll.requires_grad  # the NLL is reported, not trained on
    for got, want in zip(blockwise, expected):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda f, w: label_smoothed_cross_entropy(f, _layer_with(w), target, mask, eps)[0],
        (features, layer.weight.detach().clone().requires_grad_()),
    )


def _layer_with(weight: torch.Tensor) -> nn.Module:
    """A stand-in output layer with the given weight and no bias (for gradcheck)."""
    layer = nn.Module()
    layer.weight, layer.bias = weight, None
    return layer


def test_confident_wrong_rows_keep_a_finite_loss_and_gradient():
    """A reference word with p_y far below float32's smallest number (logit gaps of 300): the
    log-partition comes from the largest probability, so nothing underflows to inf."""
    features = torch.tensor([[[300.0, 0.0], [0.0, 300.0], [1.0, -1.0]]], requires_grad=True)
    layer = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(2))
    target, mask = torch.tensor([[1, 0, 1]]), torch.ones(1, 3, dtype=torch.bool)
    loss, nll = label_smoothed_cross_entropy(features, layer, target, mask, 0.1)
    expected_loss, expected_nll = reference_smoothed_loss(features.double() @ layer.weight.double().t(), target, mask, 0.1)
    torch.testing.assert_close(loss.double(), expected_loss.detach(), rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(nll.double(), expected_nll.detach(), rtol=1e-6, atol=1e-4)
    (grad,) = torch.autograd.grad(loss, features)
    assert torch.isfinite(grad).all()


def test_padding_rows_whose_target_underflows_leave_the_loss_finite_and_exact():
    """A padded position's target (the pad piece) gets p_y = 0 in float32: it must neither turn the
    loss into NaN (0 * inf) nor change the real rows' figures (on a CPU its row is left out)."""
    features = torch.tensor([[[0.0, 300.0], [0.5, -0.5], [1.0, -1.0]]], requires_grad=True)
    layer = _identity_layer(2)
    target, mask = torch.tensor([[0, 0, 1]]), torch.tensor([[False, True, True]])
    loss, nll = label_smoothed_cross_entropy(features, layer, target, mask, 0.1)
    expected_loss, expected_nll = reference_smoothed_loss(features.double(), target, mask, 0.1)
    torch.testing.assert_close(loss.double(), expected_loss.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(nll.double(), expected_nll.detach(), rtol=1e-6, atol=1e-6)
    (grad,) = torch.autograd.grad(loss, features)
    assert torch.isfinite(grad).all() and torch.equal(grad[0, 0], torch.zeros(2))


def test_on_a_cpu_the_padding_rows_never_reach_the_products_and_get_no_gradient(monkeypatch):
    torch.manual_seed(8)
    features, layer = torch.randn(4, 7, 16, requires_grad=True), nn.Linear(16, 40)
    target = torch.randint(0, 40, (4, 7))
    mask = torch.arange(7)[None] < torch.tensor([7, 5, 2, 6])[:, None]
    rows_multiplied = []
    shipped_logits = loss_module._OutputProducts.logits
    def logits(products, inputs):
        rows_multiplied.append(inputs.size(0))
        return shipped_logits(products, inputs)

    monkeypatch.setattr(loss_module._OutputProducts, "logits", logits)
    loss, nll, grad_features, *_ = _loss_figures(features, layer, target, mask)
    assert sum(rows_multiplied) == int(mask.sum()) == 20
    assert torch.equal(grad_features[~mask], torch.zeros(8, 16)) and grad_features[mask].abs().sum() > 0
    expected_loss, expected_nll = reference_smoothed_loss(layer(features), target, mask, 0.1)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll, expected_nll.detach(), rtol=1e-5, atol=1e-4)
    none_real = _loss_figures(features, layer, target, torch.zeros_like(mask))
    assert none_real[0].item() == 0.0 and all(torch.equal(grad, torch.zeros_like(grad)) for grad in none_real[2:])


def _loss_figures(features, layer, target, mask) -> tuple[torch.Tensor, ...]:
    """Smoothed loss (eps 0.1), NLL, and the loss's gradients by the features and every parameter of ``layer``."""
    loss, nll = label_smoothed_cross_entropy(features, layer, target, mask, 0.1)
    return loss, nll, *torch.autograd.grad(loss, [features, *layer.parameters()])


def test_log_partition_from_the_target_equals_the_one_from_the_largest_probability(monkeypatch):
    """The two ways of taking logsumexp (from p_y, and from max p where p_y could underflow) give
    the same loss, NLL and gradients in float32."""
    torch.manual_seed(5)
    features, layer = torch.randn(4, 9, 16, requires_grad=True), nn.Linear(16, 50)
    target, mask = torch.randint(0, 50, (4, 9)), torch.rand(4, 9) > 0.2

    from_target = _loss_figures(features, layer, target, mask)
    monkeypatch.setattr(loss_module, "SMALLEST_TARGET_PROB", 2.0)  # no p_y passes: every block takes max p
    from_largest = _loss_figures(features, layer, target, mask)
    for got, want in zip(from_target, from_largest):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch has no oneDNN packed products")
@pytest.mark.parametrize("bias", [False, True])
def test_onednn_products_give_the_loss_and_gradients_of_torchs_products(bias, monkeypatch):
    """In float32 on a CPU other than an Intel one the loss multiplies by the output weight through
    oneDNN, packed once per call; torch's own products (an Intel CPU, a build without oneDNN) give
    the same figures to rounding, over several blocks and a short last one."""
    torch.manual_seed(6)
    features, layer = torch.randn(3, 37, 16, requires_grad=True), nn.Linear(16, 300, bias=bias)
    target, mask = torch.randint(0, 300, (3, 37)), torch.rand(3, 37) > 0.2
    monkeypatch.setattr(loss_module, "CPU_BLOCK_ELEMENTS", 25 * 300)  # blocks of 25 rows
    blocks, short = divmod(int(mask.sum()), 25)  # of the real rows: padding is left out
    assert blocks >= 3 and short > 0

    calls = []
    packed_linear = loss_module.packed_linear
    monkeypatch.setattr(loss_module, "packed_linear", lambda *args: calls.append(1) or packed_linear(*args))
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "AuthenticAMD")
    onednn = _loss_figures(features, layer, target, mask)
    assert len(calls) == 2 * (blocks + 1)  # each block's logits and rows' gradient
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "GenuineIntel")
    with_torch = _loss_figures(features, layer, target, mask)
    assert len(calls) == 2 * (blocks + 1)
    for got, want in zip(onednn, with_torch):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("from_largest", [False, True])
def test_torchs_products_write_every_blocks_logits_into_one_array_with_the_figures_of_an_array_each(
        from_largest, monkeypatch):
    """With torch's products (an Intel CPU) every block's logits go into the one array of the loss
    call, and the figures are those of a new array per block, also where the log-partition needs
    the largest logit again (taken into an array of its own, not over the block's softmax)."""
    torch.manual_seed(7)
    features, layer = torch.randn(3, 37, 16, requires_grad=True), nn.Linear(16, 300)
    target, mask = torch.randint(0, 300, (3, 37)), torch.rand(3, 37) > 0.2
    monkeypatch.setattr(loss_module, "CPU_BLOCK_ELEMENTS", 25 * 300)  # blocks of 25 rows
    blocks, short = divmod(int(mask.sum()), 25)  # of the real rows: padding is left out
    assert blocks >= 3 and short > 0
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "GenuineIntel")
    if from_largest:
        monkeypatch.setattr(loss_module, "SMALLEST_TARGET_PROB", 2.0)  # every block takes max z again
    addresses = []
    shipped_logits = loss_module._OutputProducts.logits

    def logits(products, inputs):
        block = shipped_logits(products, inputs)
        addresses.append(block.data_ptr())
        return block

    monkeypatch.setattr(loss_module._OutputProducts, "logits", logits)
    reused = _loss_figures(features, layer, target, mask)
    assert len(addresses) == blocks + 1 and len(set(addresses)) == 1
    monkeypatch.setattr(loss_module._OutputProducts, "logits", loss_module._OutputProducts.fresh_logits)
    for got, want in zip(reused, _loss_figures(features, layer, target, mask)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    expected_loss, _ = reference_smoothed_loss(layer(features), target, mask, 0.1)
    torch.testing.assert_close(reused[0], expected_loss, rtol=1e-5, atol=1e-4)


def test_without_gradient_the_values_are_the_same_and_nothing_is_kept():
    torch.manual_seed(4)
    features, layer = torch.randn(2, 6, 8), nn.Linear(8, 30)
    target, mask = torch.randint(0, 30, (2, 6)), torch.ones(2, 6, dtype=torch.bool)
    with_grad = label_smoothed_cross_entropy(features, layer, target, mask, 0.1)
    with torch.no_grad():
        without = label_smoothed_cross_entropy(features, layer, target, mask, 0.1)
    assert without[0].grad_fn is None
    torch.testing.assert_close(without[0], with_grad[0].detach())
    torch.testing.assert_close(without[1], with_grad[1])


def test_bf16_autocast_on_cpu_is_close_to_float32():
    """Under autocast the products run in bf16, the softmax and the sums in float32."""
    torch.manual_seed(5)
    features = torch.randn(4, 9, 16, requires_grad=True)
    layer = nn.Linear(16, 50)
    target, mask = torch.randint(0, 50, (4, 9)), torch.rand(4, 9) > 0.2
    loss32, _ = label_smoothed_cross_entropy(features, layer, target, mask, 0.1)
    grad32 = torch.autograd.grad(loss32, [features, layer.weight])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss16, _ = label_smoothed_cross_entropy(features, layer, target, mask, 0.1)
    grad16 = torch.autograd.grad(loss16, [features, layer.weight])
    assert loss16.dtype == torch.float32
    assert loss16.item() == pytest.approx(loss32.item(), rel=2e-2)
    for got, want in zip(grad16, grad32):
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=0.05, atol=2e-2)


def test_inverse_sqrt_follows_the_transformer_schedule_with_peak_lr():
    d_model, warmup, peak = 512, 4000, 7e-4
    schedule = InverseSqrtWarmup(warmup)
    paper = lambda n: d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)  # noqa: E731
    for update in (1, 100, 3999, 4000, 4001, 20000):
        expected = peak * paper(update) / paper(warmup)
        assert peak * schedule(update - 1) == pytest.approx(expected, rel=1e-9)
    assert peak * schedule(warmup - 1) == pytest.approx(peak)


def _lrs(schedule_name: str, updates: int, metrics: list[float] | None = None) -> list[float]:
    model = torch.nn.Linear(2, 2)
    cfg = TrainConfig(schedule=schedule_name, lr=1e-3, warmup_steps=3, plateau_patience=1, plateau_factor=0.5)
    optimizer = build_optimizer(model.parameters(), cfg)
    schedule = LearningRateSchedule(optimizer, cfg, metric_mode="max")
    seen = []
    for index in range(updates):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.after_update()
        if metrics:
            schedule.after_validation(metrics[index])
    return seen


def test_schedules_warmup_constant_and_plateau():
    assert _lrs("inverse_sqrt", 5) == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3, 1e-3 * math.sqrt(3 / 4),
                                                     1e-3 * math.sqrt(3 / 5)])
    assert _lrs("constant", 4) == [1e-3] * 4
    # BLEU improves, then stalls: after `patience` + 1 bad validations the rate halves
    assert _lrs("plateau", 5, metrics=[10.0, 12.0, 11.0, 11.5, 11.0]) == pytest.approx(
        [1e-3, 1e-3, 1e-3, 1e-3, 5e-4])


def test_schedule_state_survives_json():
    model = torch.nn.Linear(2, 2)
    cfg = TrainConfig(schedule="inverse_sqrt", warmup_steps=10)
    optimizer = build_optimizer(model.parameters(), cfg)
    schedule = LearningRateSchedule(optimizer, cfg, "max")
    for _ in range(4):
        optimizer.step()
        schedule.after_update()
    saved = json.loads(json.dumps(schedule.state_dict()))
    fresh_optimizer = build_optimizer(model.parameters(), cfg)
    fresh_optimizer.load_state_dict(optimizer.state_dict())
    fresh = LearningRateSchedule(fresh_optimizer, cfg, "max")
    fresh.load_state_dict(saved)
    for _ in range(3):
        optimizer.step(), fresh_optimizer.step()
        schedule.after_update(), fresh.after_update()
        assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]


def test_optimizers():
    params = list(torch.nn.Linear(2, 2).parameters())
    adam = build_optimizer(params, TrainConfig())
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.9, 0.98)
    assert isinstance(build_optimizer(params, TrainConfig(optimizer="adamw", weight_decay=0.01)), torch.optim.AdamW)
    assert isinstance(build_optimizer(params, TrainConfig(optimizer="sgd", lr=0.1)), torch.optim.SGD)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_fused_adam_on_cpu_takes_the_same_steps_as_torchs_loop(name):
    """The fused kernel is only faster: ten updates agree with the reference implementation."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8)
    reference_model = torch.nn.Linear(16, 8)
    reference_model.load_state_dict(model.state_dict())
    cfg = TrainConfig(optimizer=name, lr=1e-2, weight_decay=0.01)
    fused = build_optimizer(model.parameters(), cfg)
    assert fused.defaults["fused"] is True
    reference = type(fused)(reference_model.parameters(), lr=1e-2, betas=(0.9, 0.98), eps=cfg.adam_eps,
                            weight_decay=0.01, foreach=False)
    for _ in range(10):
        inputs = torch.randn(4, 16)
        for net, optimizer in ((model, fused), (reference_model, reference)):
            optimizer.zero_grad()
            net(inputs).square().mean().backward()
            optimizer.step()
    for tensor, expected in zip(model.parameters(), reference_model.parameters()):
        torch.testing.assert_close(tensor, expected)
