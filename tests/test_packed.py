"""float32 inference through oneDNN's prepacked products (``nmt_cli.models.packed``).

The packed network computes the same ``x W^T + b`` with sums in another order, so its
teacher-forced log-probabilities agree with the plain model's to rounding, for every family,
and a trained model translates the same sentences with and without packing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from nmt_cli.checkpoint import load_checkpoint
from nmt_cli.config import ModelConfig
from nmt_cli.decoding import Translator, load_translator
from nmt_cli.models.packed import PackedLinear, can_pack, cpu_vendor, pack_linear_layers
from tests.test_export import save_run
from tests.test_quantization import FAMILIES, SIZES, teacher_forced_log_probs
from tests.test_translator import tiny_tokenizer

pytestmark = pytest.mark.skipif(not can_pack(torch.device("cpu")), reason="this torch build has no oneDNN kernels")

#: largest |log p_packed - log p_plain| allowed: float32 rounding of sums taken in another order
LOG_PROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_checkpoint(request, tmp_path_factory) -> Path:
    config = ModelConfig(**SIZES, **FAMILIES[request.param])
    return save_run(tmp_path_factory.mktemp("run"), config, tiny_tokenizer())


def test_packed_linear_is_the_linear_map():
    torch.manual_seed(0)
    linear = nn.Linear(24, 40)
    packed = PackedLinear(linear)
    for shape in [(1, 24), (7, 24), (3, 5, 24), (0, 24)]:
        x = torch.randn(shape)
        torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
    x = torch.randn(24, 6).t()  # a transposed (non-contiguous) input
    torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)


def test_packed_model_stays_with_the_plain_one(family_checkpoint: Path) -> None:
    checkpoint = load_checkpoint(family_checkpoint)
    plain = checkpoint.build_model("cpu").eval()
    packed = pack_linear_layers(checkpoint.build_model("cpu").eval())
    assert not any(type(module) is nn.Linear for module in packed.modules())
    assert any(isinstance(module, PackedLinear) for module in packed.modules())
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, checkpoint.tokenizer.src_vocab_size, (3, 7), generator=generator)
    tgt = torch.randint(4, checkpoint.tokenizer.tgt_vocab_size, (3, 6), generator=generator)
    difference = (teacher_forced_log_probs(packed, src, tgt) - teacher_forced_log_probs(plain, src, tgt)).abs()
    assert difference.max() < LOG_PROB_TOLERANCE


@pytest.mark.slow  # trains the 800-step trained_transformer
def test_translator_packs_on_the_cpu_and_translates_as_the_plain_model(trained_transformer) -> None:
    run, data = trained_transformer
    texts = (data / "test.de").read_text(encoding="utf-8").splitlines()[:200]
    packed = load_translator(run, device="cpu")
    assert any(isinstance(module, PackedLinear) for module in packed.model.modules())
    checkpoint = load_checkpoint(run)
    plain = Translator(checkpoint.build_model("cpu"), checkpoint.tokenizer, packed.decode, "cpu")
    same = sum(a.tokens == b.tokens for a, b in zip(packed.translate(texts), plain.translate(texts)))
    assert same >= 0.99 * len(texts)


def test_the_cpu_vendor_is_the_one_proc_cpuinfo_names():
    info = Path("/proc/cpuinfo")
    named = [line.partition(":")[2].strip() for line in info.read_text().splitlines()
             if line.startswith("vendor_id")] if info.is_file() else []
    assert cpu_vendor() == (named[0] if named else "")
