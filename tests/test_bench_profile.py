"""``bench/train_profile.py``'s record of an update's products: each product's shape, library and
operand layouts, grouped into the output layer's (the loss's) and the rest, since the ceiling
"products at their own shapes' rates" times every recorded product alone as it was called. The
quick run of the script is in ``test_bench_quick.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import train_profile  # noqa: E402  (bench/ is not a package)
from common import wrapped_functions  # noqa: E402
from model_flops import ONEDNN, ONEDNN_PACKED, TORCH, product_run  # noqa: E402

from nmt_cli.models.packed import can_pack  # noqa: E402
from nmt_cli.training.objectives import cross_entropy  # noqa: E402
from nmt_cli.training.packed_layers import pack_training_layers  # noqa: E402


def test_each_product_is_recorded_with_the_layout_of_its_operands() -> None:
    left, right, weight, rows = torch.randn(5, 3), torch.randn(5, 4), torch.randn(6, 4), torch.randn(2, 4)
    shapes = train_profile.ProductShapes()
    with shapes:
        torch.mm(left.t(), right)  # (3, 5) @ (5, 4), the left one column-major
        F.linear(rows, weight)  # rows @ weight.t(): the right one column-major
        torch.bmm(torch.randn(2, 3, 5), torch.randn(2, 5, 4))
    assert shapes.calls[train_profile.MODEL_LAYERS] == {
        (1, 3, 5, 4, TORCH, True, False): 1, (1, 2, 4, 6, TORCH, False, True): 1, (2, 3, 5, 4, TORCH, False, False): 1}
    assert not shapes.calls[train_profile.OUTPUT_LAYER]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("transposed", [False, True])
def test_an_operand_timed_alone_has_the_recorded_layout(batch: int, transposed: bool) -> None:
    operand = train_profile._operand(batch, 7, 4, transposed)
    assert operand.shape == ((batch,) if batch > 1 else ()) + (7, 4)
    assert train_profile._transposed(operand) == transposed
    assert train_profile.product_rate((batch, 7, 4, 5, TORCH, transposed, not transposed), repeats=1) > 0


def test_each_product_call_is_keyed_by_its_layout_and_replayed_alone_on_that_layout() -> None:
    """The call-by-call comparison: a profile's product calls by operator, shapes, strides and type,
    each timed alone on fresh operands of that layout (a bias, a transposed factor, a batch, out=)."""
    left, weight, bias = torch.randn(6, 4), torch.randn(5, 4), torch.randn(5)
    batched, out = torch.randn(3, 2, 4), torch.empty(6, 5)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        F.linear(left, weight, bias)  # addmm(bias, left, weight.t())
        F.linear(left, weight, bias)
        torch.bmm(batched, batched.transpose(1, 2))
        torch.mm(left, weight.t(), out=out)
    seconds, calls = train_profile.product_calls(profiler.events())
    addmm = ("aten::addmm", (((5,), (1,), "float"), ((6, 4), (4, 1), "float"), ((4, 5), (1, 4), "float")))
    bmm = ("aten::bmm", (((3, 2, 4), (8, 4, 1), "float"), ((3, 4, 2), (8, 1, 4), "float")))
    with_out = ("aten::mm", (((6, 4), (4, 1), "float"), ((4, 5), (1, 4), "float"), ((6, 5), (5, 1), "float")))
    assert calls == {addmm: 2, bmm: 1, with_out: 1}
    assert all(seconds[key] > 0 for key in calls)
    assert train_profile.describe_product_call(addmm) == "aten::addmm (6x4 @ 4x5T)"
    assert train_profile.describe_product_call(bmm) == "aten::bmm (3x2x4 @ 3x4x2T)"
    assert train_profile.describe_product_call(with_out) == "aten::mm (6x4 @ 4x5T)"
    for key in calls:
        assert train_profile.alone_seconds(key) > 0
    rebuilt = train_profile._rebuilt((4, 5), (1, 4), "float")
    assert rebuilt.shape == (4, 5) and rebuilt.stride() == (1, 4) and rebuilt.dtype == torch.float32


@pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN products")
def test_onednns_packed_product_is_replayed_alone_with_a_packed_weight() -> None:
    """The loss's product on oneDNN (float32 training's on CPUs other than Intel's): its weight is packed,
    an opaque layout the profiler records without strides."""
    run = product_run(torch.randn(6, 4), torch.randn(4, 5), ONEDNN_PACKED)  # (6, 4) @ (5, 4)^T, packed
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        run()
    _, calls = train_profile.product_calls(profiler.events())
    ((key, count),) = calls.items()
    assert count == 1 and key[0] == "mkldnn::_linear_pointwise"
    assert [shape for shape, _, _ in key[1]] == [(6, 4), (5, 4)]
    assert train_profile.describe_product_call(key) == "mkldnn::_linear_pointwise (6x4 @ packed 5x4T)"
    assert train_profile.alone_seconds(key) > 0


@pytest.mark.usefixtures("training_on_onednn")  # the loss on oneDNN where it has it, on any CPU
def test_the_losss_products_are_the_output_layers_and_the_mark_is_taken_off() -> None:
    generator = torch.Generator().manual_seed(3)
    features = torch.randn(2, 5, 8, generator=generator, requires_grad=True)
    output_layer = torch.nn.Linear(8, 30, bias=False)
    target, mask = torch.randint(0, 30, (2, 5), generator=generator), torch.ones(2, 5, dtype=torch.bool)
    shipped_loss = cross_entropy.label_smoothed_cross_entropy
    shapes = train_profile.ProductShapes()
    with shapes, shapes.marking_the_loss():
        loss, _ = cross_entropy.label_smoothed_cross_entropy(features, output_layer, target, mask, 0.1)
        torch.mm(torch.randn(2, 3), torch.randn(3, 4))  # after the loss: the model's again
    assert cross_entropy.label_smoothed_cross_entropy is shipped_loss
    libraries = {shape[4] for shape in shapes.calls[train_profile.OUTPUT_LAYER]}
    assert libraries == ({ONEDNN_PACKED, TORCH} if ONEDNN else {TORCH})  # logits and row gradient; weight gradient
    # the weight gradient (V, F) += grad^T (V, n) @ rows (n, F) takes grad transposed
    assert (1, 30, 10, 8, TORCH, True, False) in shapes.calls[train_profile.OUTPUT_LAYER]
    assert shapes.calls[train_profile.MODEL_LAYERS] == {(1, 2, 3, 4, TORCH, False, False): 1}


@pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch build has no oneDNN products")
@pytest.mark.usefixtures("training_on_onednn")
def test_onednn_weight_reorders_are_a_part_of_their_own_wherever_they_run() -> None:
    """A packed layer's reorders (its weight in forward, the transpose in backward), run inside
    attention's range, and the loss's reorders of the output weight go to the reorders' part; the
    products stay products."""
    generator = torch.Generator().manual_seed(4)
    layer, output_layer = torch.nn.Linear(16, 16), torch.nn.Linear(16, 30, bias=False)
    store = pack_training_layers(torch.nn.Sequential(layer), torch.device("cpu"), False, min_weights=1)
    features = torch.randn(2, 5, 16, generator=generator, requires_grad=True)
    target, mask = torch.randint(0, 30, (2, 5), generator=generator), torch.ones(2, 5, dtype=torch.bool)
    attention = train_profile._ranged(train_profile.ATTENTION, layer)
    with train_profile.part_ranges(), profile(activities=[ProfilerActivity.CPU]) as profiler:
        loss, _ = cross_entropy.label_smoothed_cross_entropy(attention(features), output_layer, target, mask, 0.1)
        loss.backward()
    store.release()
    events = profiler.events()
    reorders = [event for event in events if event.name == "mkldnn::_reorder_linear_weight"]
    assert len(reorders) == 4  # the layer's weight and its transpose; the output weight and its transpose
    assert all(train_profile._range_of(event) == train_profile.REORDERS for event in reorders)
    in_reorders = [event for event in events if not event.name.startswith(train_profile.RANGE)
                   and train_profile._range_of(event) == train_profile.REORDERS]
    parts, _, _ = train_profile.part_microseconds(events)
    # all of them, the backward one too (whose autograd node would have put it in attention)
    assert parts[train_profile.REORDERS] == pytest.approx(sum(event.self_cpu_time_total for event in in_reorders))
    assert parts[train_profile.REORDERS] > 0
    assert parts[train_profile.PRODUCTS] > 0 and parts[train_profile.LOSS] > 0


def test_a_profiles_wrapped_functions_are_put_back_as_they_were_even_after_an_error() -> None:
    """``common.wrapped_functions``, which both profiles' parts use: an inherited method is not left
    behind on the subclass, and an error inside the context does not keep the wrappers."""
    class Family:
        def step(self) -> str:
            return "step"

    class Model(Family):
        def encode(self) -> str:
            return "encode"

    own_encode, parts = Model.encode, []

    def wrap(part, function):
        def wrapped(*args, **kwargs):
            parts.append(part)
            return function(*args, **kwargs)
        return wrapped

    with pytest.raises(RuntimeError), wrapped_functions([(Model, "step", "decoder"), (Model, "encode", "encoder")],
                                                        wrap):
        model = Model()
        assert (model.step(), model.encode()) == ("step", "encode")
        raise RuntimeError("a failed decode")
    assert parts == ["decoder", "encoder"]
    assert "step" not in Model.__dict__ and Model.encode is own_encode


def test_every_pass_of_the_profile_runs_on_the_batches_drawn_once_for_it() -> None:
    """Warm-up, timed, profiled, counted and call-by-call updates all take the same few batches, so no
    timed or profiled update meets a batch (and a heap size) that the warm-up did not."""
    from types import SimpleNamespace

    fresh = iter(range(1000))  # the trainer's endless stream of batches
    taken = []

    class Trainer(SimpleNamespace):
        def _update(self):
            for _ in range(self.cfg.update_freq):
                taken.append(next(self.stream_of_batches))
            torch.mm(torch.randn(4, 3), torch.randn(3, 5))
            self.interval.tokens += 10

    trainer = Trainer(model=torch.nn.Linear(2, 2), stream_of_batches=fresh, cfg=SimpleNamespace(update_freq=2),
                      interval=SimpleNamespace(tokens=0))
    profile_of = train_profile._profile_trainer(trainer, steps=3, warmup=2, threads=1)
    assert next(fresh) == 6  # the batches of 3 updates of 2 batches each, drawn once
    # warm-up, timed, profiled, counted, call by call
    assert set(taken) == set(range(6)) and len(taken) == 2 * (3 + 3 + 3 + 1 + 3)
    assert taken[:6] == list(range(6)) and profile_of.tokens == 10 and len(profile_of.wall_ms) == 3
