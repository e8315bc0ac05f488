"""The training loop on real models and a real prepared directory."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
from safetensors.torch import load_file

from nmt_cli import precision as precision_module
from nmt_cli.checkpoint import list_checkpoints, load_checkpoint, load_optimizer_state
from nmt_cli.config import Config, load_config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import ConfigError
from nmt_cli.models import build_model
from nmt_cli.precision import Precision
from nmt_cli.training import train
from nmt_cli.training.batching import BatchStream, collate, epoch_batches, make_batches
from nmt_cli.training.checkpointing import CheckpointKeeper
from nmt_cli.training.progress import read_metrics
from nmt_cli.training.trainer import seed_everything
from tests.test_loss_schedule import reference_smoothed_loss

TINY_TRANSFORMER = {
    "model.arch": "transformer", "model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64,
    "model.encoder_layers": 1, "model.decoder_layers": 1,
}
TINY_RNN = {"model.arch": "rnn_bahdanau", "model.embed_dim": 24, "model.hidden_size": 24}
QUICK = {"train.max_tokens": 400, "train.num_threads": 1, "train.warmup_steps": 10, "train.lr": 3e-3,
         "train.valid_max_sentences": 10}


def _config(**overrides) -> Config:
    return Config().with_overrides({**QUICK, **{k.replace("__", "."): v for k, v in overrides.items()}})


def train_losses(run_dir) -> list[float]:
    """The loss of every logged training interval of a run (``metrics.jsonl``)."""
    return [r["loss"] for r in read_metrics(run_dir) if r["kind"] == "train"]


def test_transformer_run_learns_and_writes_its_files(tiny_prepared, tmp_path):
    config = _config(**TINY_TRANSFORMER, train__max_steps=40, train__log_every=10, train__valid_every=20,
                     train__keep_last=1, train__keep_best=1)
    log = io.StringIO()
    summary = train(config, tiny_prepared, tmp_path / "run", stream=log)

    assert summary.stop_reason == "max_steps" and summary.step == 40
    records = read_metrics(tmp_path / "run")
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert [r["step"] for r in records if r["kind"] == "train"] == [10, 20, 30, 40]
    per_update = [r["tokens_per_update"] for r in records if r["kind"] == "train"]
    assert all(0 < tokens <= config.train.max_tokens for tokens in per_update)  # real target tokens of a batch
    assert losses[-1] < losses[0] - 0.3  # it learns
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [20, 40] and all(r["bleu"] is not None for r in valid)
    assert summary.target_tokens_per_second > 0
    recorded = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert recorded["step"] == 40 and recorded["stop_reason"] == "max_steps"
    assert recorded["parameters"] == summary.parameters > 0 and 50 < recorded["peak_rss_mb"] < 24 * 1024
    # what a person sees: the periodic line on the stream and in train.log
    lines = (tmp_path / "run" / "train.log").read_text().splitlines()
    assert lines == log.getvalue().splitlines()
    assert any(line.startswith("step 20/40 | epoch 1 | loss") and "tok/s" in line and "eta" in line for line in lines)
    assert load_config(tmp_path / "run" / "config.yaml") == config
    assert (tmp_path / "run" / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # best.json names the best validation, whose checkpoint is kept next to the last one
    best = json.loads((tmp_path / "run" / "checkpoints" / "best.json").read_text())
    best_valid = max(valid, key=lambda r: (r["bleu"], -r["step"]))
    assert (best["step"], best["value"]) == (best_valid["step"], best_valid["bleu"])
    kept = [p.name for p in list_checkpoints(tmp_path / "run")]
    assert kept == sorted({best["checkpoint"], "step-00000040"})
    assert load_checkpoint(tmp_path / "run").step == 40
    # a validation line and the last line round the best BLEU as the validation's own BLEU (2 decimals)
    best_text = f"best bleu {best_valid['bleu']:.2f} at step {best_valid['step']}"
    aer = f"aer {valid[-1]['aer']:.4f} | "  # the synthetic validation split has word links
    assert lines[-2] == (f"valid step 40 | loss {valid[-1]['loss']:.4f} | ppl {valid[-1]['ppl']:.2f} | "
                         f"bleu {valid[-1]['bleu']:.2f} | {aer}{best_text}"
                         + ("" if best_valid["step"] == 40 else " (1 without improvement)"))
    assert lines[-1].startswith("stopped (max_steps) at step 40") and lines[-1].endswith(best_text)


def test_rnn_bahdanau_trains_with_accumulation_and_plateau(tiny_prepared, tmp_path):
    config = _config(**TINY_RNN, train__max_steps=6, train__update_freq=2, train__schedule="plateau",
                     train__optimizer="adamw", train__log_every=3, train__valid_every=3, train__valid_bleu=False,
                     train__early_stop_metric="loss")
    summary = train(config, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    records = read_metrics(tmp_path / "run")
    losses = [r["loss"] for r in records if r["kind"] == "train"]  # records also give the validations below
    assert summary.step == 6 and len(losses) == 2 and losses[1] < losses[0]
    assert [r["bleu"] for r in records if r["kind"] == "valid"] == [None, None]


def test_early_stopping_when_the_metric_stops_improving(tiny_prepared, tmp_path):
    # learning rate 0: the validation loss never improves after the first validation
    config = _config(**TINY_TRANSFORMER, train__max_steps=100, train__lr=0.0, train__schedule="constant",
                     train__valid_every=2, train__valid_bleu=False, train__early_stop_metric="loss",
                     train__patience=2, train__log_every=100)
    summary = train(config, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    assert (summary.stop_reason, summary.step) == ("early_stop", 6)
    assert summary.best["step"] == 2


def test_max_epochs_stops_after_one_pass(tiny_prepared, tmp_path):
    config = _config(**TINY_TRANSFORMER, train__max_steps=0, train__max_epochs=1, train__valid_every=0,
                     train__log_every=1000)
    summary = train(config, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    split = PreparedData(tiny_prepared).split("train")
    assert summary.stop_reason == "max_epochs"
    assert summary.step == len(make_batches(split.src.lengths, split.tgt.lengths, 400))  # one window: all of it


@pytest.mark.parametrize("normalization", ["tokens", "sentences"])
def test_one_update_is_the_normalised_gradient_of_all_its_batches(tiny_prepared, tmp_path, normalization):
    """update_freq=2 with SGD(lr=1): w1 = w0 - grad(sum of both batches' losses / their tokens or sentences)."""
    config = _config(**TINY_TRANSFORMER, model__dropout=0.0, train__max_steps=1, train__update_freq=2,
                     train__optimizer="sgd", train__lr=1.0, train__schedule="constant", train__clip_norm=0.0,
                     train__valid_every=0, train__loss_normalization=normalization,
                     train__precision="fp32")  # the float32 rule on every CPU, bf16 units or not
    train(config, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    trained = load_file(str(list_checkpoints(tmp_path / "run")[-1] / "model.safetensors"))

    data = PreparedData(tiny_prepared)
    split = data.split("train")
    seed_everything(config.train.seed)
    model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True)
    stream = BatchStream(epoch_batches(data, split, 400, config.train.seed, config.train.batch_window),
                         config.train.seed)
    batches = [collate(split, next(stream)) for _ in range(2)]
    tokens = sum(b.num_tokens for b in batches)
    denominator = tokens if normalization == "tokens" else sum(b.src.size(0) for b in batches)
    assert 0 < denominator <= tokens
    expected = {name: p.detach().clone() for name, p in model.named_parameters()}
    for batch in batches:
        logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # the whole (B, T, V) matrix
        loss, _ = reference_smoothed_loss(logits, batch.tgt_out, batch.tgt_mask, 0.1)
        (loss / denominator).backward()
    compared = [name for name, _ in model.named_parameters() if name in trained]
    assert len(compared) > 10
    # float32 rounding grows with the gradient, which is tokens/sentences times larger per sentence
    atol = 1e-6 * tokens / denominator
    for name, parameter in model.named_parameters():
        if name in compared:
            torch.testing.assert_close(trained[name], expected[name] - parameter.grad, atol=atol, rtol=1e-5)


#: torch 2.11 (seen on CPU and on an H200 machine) draws a compiled model's dropout masks from
#: the second step on differently from eager mode; 2.13 draws the same ones
COMPILED_DROPOUT_FOLLOWS_EAGER = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 13)


@pytest.mark.slow
def test_compiled_model_trains_like_the_eager_one(tiny_prepared, tmp_path):
    """``train.compile``: the same losses, dropout included where torch draws the same masks
    (about 50 s, nearly all compiling)."""
    dropout = 0.1 if COMPILED_DROPOUT_FOLLOWS_EAGER else 0.0  # 0.1: the default
    settings = {**TINY_TRANSFORMER, "model.dropout": dropout, "train__max_steps": 4, "train__log_every": 1,
                "train__valid_every": 0, "train__precision": "fp32"}  # fp32 sums, on every CPU
    losses = {}
    for compiled in (False, True):
        train(_config(**settings, train__compile=compiled), tiny_prepared, tmp_path / str(compiled),
              stream=io.StringIO())
        losses[compiled] = train_losses(tmp_path / str(compiled))
    assert len(losses[True]) == 4
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)


def test_checkpoint_keeper_keeps_last_and_best(tmp_path):
    keeper = CheckpointKeeper(tmp_path, metric="bleu", mode="max", keep_last=2, keep_best=1)
    for step in (10, 20, 30, 40, 50):
        keeper.path(step).mkdir(parents=True)
        (keeper.path(step) / "state.json").write_text("{}")
        (keeper.path(step) / "model.safetensors").write_text("")
    validations = [{"step": 10, "bleu": 5.0}, {"step": 20, "bleu": 9.0}, {"step": 30, "bleu": 9.0},
                   {"step": 40, "bleu": 7.0}]
    keeper.prune(validations)
    keeper.write_best(validations)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000020", "step-00000040", "step-00000050"]
    assert json.loads((tmp_path / "checkpoints" / "best.json").read_text())["step"] == 20


def test_precision_choices(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(precision_module, "cpu_has_native_bf16", lambda: True)
    auto = Precision("auto", cpu, family="transformer")  # bench/bf16_quality.py: bf16 reaches fp32's BLEU
    assert auto.name == "bf16" and auto.dtype == torch.bfloat16 and auto.scaler is None and auto.note is None
    for unmeasured in ("rnn_bahdanau", "rnn_luong", "linear_transformer", "mask_align", None):
        assert Precision("auto", cpu, family=unmeasured).name == "fp32"
    bf16 = Precision("bf16", cpu)
    assert bf16.dtype == torch.bfloat16 and bf16.scaler is None and bf16.note is None
    fp16 = Precision("fp16", cpu, init_scale=128.0)
    assert fp16.dtype == torch.float16 and fp16.scaler.get_scale() == 128.0


@pytest.mark.parametrize(("model", "expected"), [(TINY_TRANSFORMER, "bf16"), (TINY_RNN, "fp32")],
                         ids=["transformer", "rnn_bahdanau"])
def test_a_cpu_with_bf16_units_trains_the_transformer_in_bf16_by_default(tiny_prepared, tmp_path, monkeypatch,
                                                                           model, expected):
    monkeypatch.setattr(precision_module, "cpu_has_native_bf16", lambda: True)
    config = _config(**model, train__max_steps=1, train__valid_every=0)
    assert config.train.precision == "auto"
    train(config, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    header = (tmp_path / "run" / "train.log").read_text(encoding="utf-8").splitlines()[0]
    assert f"| {expected} |" in header


def test_bf16_on_a_cpu_without_bf16_units_runs_fp32_and_says_so(monkeypatch):
    monkeypatch.setattr(precision_module, "cpu_has_native_bf16", lambda: False)
    auto = Precision("auto", torch.device("cpu"), family="transformer")
    assert auto.name == "fp32" and auto.dtype is None and auto.note is None  # the default: nothing to say
    bf16 = Precision("bf16", torch.device("cpu"))
    assert bf16.name == "fp32" and bf16.dtype is None and "no bf16 units" in bf16.note
    assert isinstance(bf16.autocast(), contextlib.nullcontext)
    assert Precision("fp16", torch.device("cpu")).dtype == torch.float16  # fp16 stays: it tests loss scaling


def test_the_cpu_bf16_check_follows_torchs_avx512_bf16_and_amx_probes(monkeypatch):
    for avx512_bf16, amx, expected in ((False, False, False), (True, False, True), (False, True, True)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda value=avx512_bf16: value)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda value=amx: value)
        assert precision_module.cpu_has_native_bf16() is expected
        assert precision_module.has_native_bf16(torch.device("cpu")) is expected


@pytest.mark.filterwarnings("ignore:.*CUDA is not available")  # the fp16 scaler of a GPU this machine lacks
@pytest.mark.parametrize(("capability", "expected"), [((8, 0), torch.bfloat16), ((7, 5), torch.float16)])
def test_auto_precision_on_cuda_is_bf16_only_where_the_gpu_computes_in_it(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert Precision("auto", torch.device("cuda", 0)).dtype == expected


@pytest.mark.slow  # fp16 on a CPU is many times slower
@pytest.mark.parametrize("model", [TINY_TRANSFORMER, TINY_RNN], ids=["transformer", "rnn_bahdanau"])
def test_fp16_skips_overflowed_updates_without_counting_them(tiny_prepared, tmp_path, model):
    """A loss scale of 2^40 overflows fp16 gradients: those updates change nothing and are not steps."""
    settings = {**model, "train__max_steps": 12, "train__log_every": 1, "train__valid_every": 0}
    train(_config(**settings), tiny_prepared, tmp_path / "fp32", stream=io.StringIO())
    log = io.StringIO()
    summary = train(_config(**settings, train__precision="fp16", train__fp16_init_scale=2.0**40),
                    tiny_prepared, tmp_path / "fp16", stream=log)

    assert summary.step == 12
    records = [r for r in read_metrics(tmp_path / "fp16") if r["kind"] == "train"]
    assert [r["step"] for r in records] == list(range(1, 13))
    skipped = sum(r["skipped_updates"] for r in records)
    assert skipped >= 10  # each overflow halves the scale, down to one fp16 gradients fit in
    assert records[0]["loss_scale"] == 2.0**40 / 2 ** records[0]["skipped_updates"]
    assert records[-1]["loss_scale"] == 2.0**40 / 2**skipped  # no growth within 2,000 clean updates
    header, note, first_step = log.getvalue().splitlines()[:3]
    assert "| fp16 |" in header and note.startswith("note: fp16 on a CPU only tests loss scaling")
    assert first_step.startswith("step 1/12") and f"{records[0]['skipped_updates']} overflow(s) skipped" in first_step
    # the schedule did not advance on skipped updates: the same learning rates as the fp32 run
    fp32_lrs = [r["lr"] for r in read_metrics(tmp_path / "fp32") if r["kind"] == "train"]
    assert [r["lr"] for r in records] == pytest.approx(fp32_lrs, rel=1e-12)
    # nor did the optimizer: Adam counted 12 steps; the scaler's state is in the checkpoint
    saved = load_optimizer_state(tmp_path / "fp16" / "checkpoints" / "step-00000012")
    assert {float(state["step"]) for state in saved["optimizer"]["state"].values()} == {12.0}
    assert saved["grad_scaler"]["scale"] == records[-1]["loss_scale"]


def test_bleu_metric_needs_bleu_validation(tiny_prepared, tmp_path):
    with pytest.raises(ConfigError, match="valid_bleu"):
        _config(**TINY_TRANSFORMER, train__valid_bleu=False, train__early_stop_metric="bleu")
