"""The CUDA paths: mixed-precision training, fused attention, translation and alignment on a GPU.

CI has no GPU, so these skip there with the reason; on a machine with one, run
``python -m pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from nmt_cli.decoding import Translator, generate, load_translator
from nmt_cli.errors import NmtError
from nmt_cli.models.attention.multihead import SoftmaxAttention
from nmt_cli.training import train
from nmt_cli.training.progress import read_metrics
from tests.test_trainer import TINY_RNN, TINY_TRANSFORMER, _config, train_losses
from tests.test_translator import TEXTS, build_checkpoint

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: these check the GPU paths"),
              pytest.mark.usefixtures("cuda_as_auto")]

ARCHS = {
    "transformer": TINY_TRANSFORMER,
    "linear_transformer": {**TINY_TRANSFORMER, "model.arch": "linear_transformer"},
    "rnn_bahdanau": TINY_RNN,
}


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_training_on_cuda_learns(tiny_prepared, tmp_path, arch, precision):
    config = _config(**ARCHS[arch], train__precision=precision, train__max_steps=40, train__log_every=10,
                     train__valid_every=40)
    log = io.StringIO()
    summary = train(config, tiny_prepared, tmp_path / "run", device="cuda", stream=log)
    assert summary.step == 40 and f"device cuda:0 x 1 | {precision}" in log.getvalue()
    losses = train_losses(tmp_path / "run")
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0] - 0.3
    if precision == "fp16":
        records = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "train"]
        assert all(r["loss_scale"] > 0 for r in records)


def test_float32_training_on_cuda_follows_the_cpu_run(tiny_prepared, tmp_path):
    """Without dropout (the generators differ) the first updates give the same losses on both devices."""
    settings = {**TINY_TRANSFORMER, "model.dropout": 0.0, "train__precision": "fp32", "train__max_steps": 5,
                "train__log_every": 1, "train__valid_every": 0}
    config = _config(**settings)
    train(config, tiny_prepared, tmp_path / "cpu", device="cpu", stream=io.StringIO())
    train(config, tiny_prepared, tmp_path / "cuda", device="cuda", stream=io.StringIO())
    assert train_losses(tmp_path / "cuda") == pytest.approx(train_losses(tmp_path / "cpu"), abs=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_attention_on_cuda_equals_the_explicit_formula(dtype):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, size, 16, generator=gen) for size in (5, 7, 7))
    key_mask = torch.arange(7)[None, :] < torch.tensor([7, 2, 5])[:, None]  # (B, S)
    kernel = SoftmaxAttention()
    reference, _ = kernel.read(q.double(), kernel.summarize(k.double(), v.double(), key_mask), need_weights=True)
    summary = kernel.summarize(k.cuda().to(dtype), v.cuda().to(dtype), key_mask.cuda())
    fused, _ = kernel.read(q.cuda().to(dtype), summary, need_weights=False)
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(fused.double().cpu(), reference, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("arch", ["transformer", "linear_transformer", "rnn_bahdanau"])
def test_translation_on_cuda_scores_like_cpu(tmp_path, arch):
    """The GPU decodes under half-precision autocast: the same hypotheses' scores within its rounding."""
    checkpoint = build_checkpoint(tmp_path, arch=arch)
    on_cpu = Translator.from_checkpoint(checkpoint, device="cpu").translate(TEXTS, with_attention=True)
    on_gpu = Translator.from_checkpoint(checkpoint, device="cuda").translate(TEXTS, with_attention=True)
    assert [h.text for h in on_gpu][1:3] == ["", ""]  # blank lines stay blank
    for cpu_hypothesis, gpu_hypothesis in zip(on_cpu, on_gpu):
        if cpu_hypothesis.tokens == gpu_hypothesis.tokens:  # random weights: near-ties may flip in bf16
            assert gpu_hypothesis.score == pytest.approx(cpu_hypothesis.score, abs=0.05)
    nonblank = [(c, g) for c, g, text in zip(on_cpu, on_gpu, TEXTS) if text.strip()]
    assert sum(c.tokens == g.tokens for c, g in nonblank) * 2 >= len(nonblank)
    assert all(g.attention.shape == c.attention.shape for c, g in nonblank if c.tokens == g.tokens)


def test_generate_decodes_on_the_device_the_model_is_on(tmp_path):
    translator = Translator.from_checkpoint(build_checkpoint(tmp_path), device="auto")
    sources = [translator.tokenizer.encode_src(text) for text in TEXTS if text.strip()]
    assert translator.device.type == "cuda"
    implicit = generate(translator.model, sources, translator.decode)
    explicit = generate(translator.model, sources, translator.decode, device=translator.device)
    assert [h.tokens for h in implicit] == [h.tokens for h in explicit] and any(h.tokens for h in implicit)


def test_int8_under_auto_runs_on_the_cpu_and_cuda_int8_is_one_line(tmp_path):
    checkpoint = build_checkpoint(tmp_path)
    assert Translator.from_checkpoint(checkpoint, quantize="int8").device.type == "cpu"
    with pytest.raises(NmtError, match="runs on the CPU only"):
        Translator.from_checkpoint(checkpoint, device="cuda", quantize="int8")


def test_ctranslate2_under_auto_uses_the_gpu_or_else_the_cpu(tmp_path):
    pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed")
    from nmt_cli.export import export_ctranslate2

    exported = export_ctranslate2(build_checkpoint(tmp_path / "run"), tmp_path / "export")
    on_cpu = load_translator(exported, device="cpu").translate(TEXTS)
    auto = load_translator(exported)
    hypotheses = auto.translate(TEXTS)
    assert [h.text for h in hypotheses][1:3] == ["", ""]
    if auto.device.type == "cpu":  # this CTranslate2 cannot use this GPU (built for another CUDA, say)
        assert [h.tokens for h in hypotheses] == [h.tokens for h in on_cpu]
    else:
        nonblank = [(c, g) for c, g, text in zip(on_cpu, hypotheses, TEXTS) if text.strip()]
        assert sum(c.tokens == g.tokens for c, g in nonblank) * 2 >= len(nonblank)


def test_alignment_on_cuda_reads_what_the_cpu_reads(tiny_prepared, tmp_path):
    """`nmt align` on the GPU: an ensemble with a null model, both directions averaged, gives
    the CPU's word matrices (within float32 rounding of the two devices' kernels) and links."""
    from click.testing import CliRunner

    from nmt_cli.alignment.output import load_soft_npz
    from nmt_cli.checkpoint import save_checkpoint
    from nmt_cli.cli import align as _align_command  # noqa: F401  (registers `nmt align`)
    from nmt_cli.cli import cli
    from nmt_cli.config import Config
    from nmt_cli.data.prepared import PreparedData
    from nmt_cli.models import build_model
    from nmt_cli.pharaoh import read_alignments
    from tests.test_guided_alignment import GUIDED, TINY

    data = PreparedData(tiny_prepared)
    models = []
    for number, overrides in enumerate(({**GUIDED, "model.alignment_null": True}, TINY)):
        config = Config().with_overrides(overrides)
        torch.manual_seed(number)
        model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True)
        models.append(save_checkpoint(tmp_path / f"model{number}", model.state_dict(), config, data.tokenizer,
                                      {"step": 1}))
    members = ["--checkpoint", models[0], "--checkpoint", models[1],
               "--reverse-checkpoint", models[1], "--reverse-checkpoint", models[0]]
    for device in ("cpu", "cuda"):
        result = CliRunner().invoke(cli, ["align", *map(str, members), "--symmetrize", "average",
                                          "--average-threshold", "0.15", "--src",
                                          str(data.text_path("valid", "src")), "--tgt",
                                          str(data.text_path("valid", "tgt")), "--out", str(tmp_path / device),
                                          "--device", device], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    on_cpu, _ = load_soft_npz(tmp_path / "cpu" / "soft.npz")
    on_gpu, settings = load_soft_npz(tmp_path / "cuda" / "soft.npz")
    assert len(on_gpu) == 30 and len(settings["ensemble"]) == 2
    for cpu_pair, gpu_pair in zip(on_cpu, on_gpu):
        np.testing.assert_allclose(gpu_pair.matrix, cpu_pair.matrix, atol=1e-4)
    cpu_links, gpu_links = ({(line, link) for line, links in enumerate(read_alignments(tmp_path / device /
                                                                            "alignments.align"))
                             for link in links.sure} for device in ("cpu", "cuda"))
    # the same links, but for one whose mean weight is within the devices' rounding of the threshold
    assert len(cpu_links) > 100 and len(cpu_links ^ gpu_links) <= len(cpu_links) // 200
