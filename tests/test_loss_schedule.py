"""Label-smoothed loss against hand computations; optimisers and learning-rate schedules."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from nmt_cli.config import TrainConfig
from nmt_cli.training.loss import label_smoothed_cross_entropy
from nmt_cli.training.schedule import InverseSqrtWarmup, LearningRateSchedule, build_optimizer


def test_loss_matches_a_hand_computation():
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]]])  # (B=1, T=2, V=3)
    target = torch.tensor([[0, 2]])
    mask = torch.tensor([[True, False]])  # the second position is padding
    eps = 0.1
    log_z = math.log(math.exp(2.0) + math.exp(0.0) + math.exp(-1.0))
    log_p = [2.0 - log_z, 0.0 - log_z, -1.0 - log_z]
    expected_nll = -log_p[0]
    expected_loss = (1 - eps) * expected_nll + eps / 3 * -sum(log_p)
    loss, nll = label_smoothed_cross_entropy(logits, target, mask, eps)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-6)
    assert nll.item() == pytest.approx(expected_nll, abs=1e-6)


def test_loss_equals_torch_cross_entropy_with_smoothing_and_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(4, 11, (3, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    loss, nll = label_smoothed_cross_entropy(logits, target, mask, 0.2)
    padded_target = target.masked_fill(~mask, -100)
    reference = F.cross_entropy(logits.view(-1, 11), padded_target.view(-1), label_smoothing=0.2, reduction="sum")
    plain = F.cross_entropy(logits.view(-1, 11), padded_target.view(-1), reduction="sum")
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)
    assert nll.item() == pytest.approx(plain.item(), rel=1e-6)
    noisy = logits.clone()
    noisy[~mask] = 1e4  # whatever sits at padded positions does not count
    assert label_smoothed_cross_entropy(noisy, target, mask, 0.2)[0].item() == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_gradient_equals_autograd_of_the_formula(eps):
    torch.manual_seed(3)
    logits = torch.randn(3, 5, 13, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 13, (3, 5))
    mask = torch.rand(3, 5) > 0.3
    weights = (torch.rand(2, dtype=torch.float64) + 0.5).tolist()

    def reference(z):
        log_probs = torch.log_softmax(z, dim=-1)
        nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        loss = (1 - eps) * nll + eps * -log_probs.mean(dim=-1)
        return (loss * mask).sum(), (nll * mask).sum()

    def combined(fn):
        loss, nll = fn(logits)
        return weights[0] * loss + weights[1] * nll  # both outputs carry gradient

    (expected,) = torch.autograd.grad(combined(reference), logits)
    (fused,) = torch.autograd.grad(combined(lambda z: label_smoothed_cross_entropy(z, target, mask, eps)), logits)
    torch.testing.assert_close(fused, expected, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda z: label_smoothed_cross_entropy(z, target, mask, eps), (logits,))


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
