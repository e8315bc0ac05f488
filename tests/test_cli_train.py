"""`nmt train`, `nmt average` and `nmt plot` through the command line."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from nmt_cli.checkpoint import list_checkpoints, load_checkpoint
from nmt_cli.cli import cli
from nmt_cli.cli import train as _train_commands  # noqa: F401  (registers train, average, plot)
from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.models import build_model

TINY = ["--set", "model.d_model=32", "--set", "model.heads=2", "--set", "model.ffn_dim=64",
        "--set", "model.encoder_layers=1", "--set", "model.decoder_layers=1", "--set", "train.num_threads=1",
        "--set", "train.valid_every=0", "--set", "train.early_stop_metric=loss", "--set", "train.log_every=2"]


def _nmt(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def run_dir(tiny_prepared, tmp_path_factory):
    """A run of 6 steps saved every 2, keeping the last 2, averaged at the end."""
    run = tmp_path_factory.mktemp("cli") / "run"
    result = _nmt("train", "--data", str(tiny_prepared), "--out", str(run), "--max-tokens", "300", *TINY,
                  "--set", "train.max_steps=6", "--set", "train.save_every=2", "--set", "train.keep_last=1",
                  "--set", "train.average_last=2")
    assert result.exit_code == 0, result.output
    return run


def test_dry_run_prints_the_model_and_its_size(tiny_prepared):
    result = _nmt("train", "--dry-run", "--data", str(tiny_prepared), *TINY)
    assert result.exit_code == 0, result.output
    tokenizer = PreparedData(tiny_prepared).tokenizer
    config = Config().with_overrides({"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64,
                                      "model.encoder_layers": 1, "model.decoder_layers": 1})
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    assert "Transformer(" in result.output
    assert ["total", f"{model.num_parameters():,}"] in [line.split() for line in result.output.splitlines()]
    assert f"vocabulary {tokenizer.src_vocab_size:,} source" in result.output


def test_train_keeps_the_last_checkpoints_and_averages_them(run_dir):
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-00000004", "step-00000006"]
    averaged = load_file(str(run_dir / "checkpoints" / "average-last2" / "model.safetensors"))
    four = load_file(str(run_dir / "checkpoints" / "step-00000004" / "model.safetensors"))
    six = load_file(str(run_dir / "checkpoints" / "step-00000006" / "model.safetensors"))
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor, (four[name] + six[name]) / 2)
    assert (run_dir / "train.log").read_text().count("\nstep ") == 3


def test_average_command_writes_a_loadable_checkpoint(run_dir, tmp_path):
    result = _nmt("average", "--out", str(tmp_path / "avg"), str(run_dir), "--last", "2")
    assert result.exit_code == 0, result.output
    assert "averaged 2 checkpoints (step-00000004, step-00000006)" in result.output
    ours = load_file(str(tmp_path / "avg" / "model.safetensors"))
    at_end = load_file(str(run_dir / "checkpoints" / "average-last2" / "model.safetensors"))
    assert all(torch.equal(ours[name], at_end[name]) for name in at_end)
    checkpoint = load_checkpoint(tmp_path / "avg")
    assert checkpoint.step == 6 and checkpoint.build_model() is not None
    explicit = _nmt("average", "--out", str(tmp_path / "avg2"), *map(str, list_checkpoints(run_dir)))
    assert explicit.exit_code == 0, explicit.output
    assert all(torch.equal(load_file(str(tmp_path / "avg2" / "model.safetensors"))[n], ours[n]) for n in ours)


def test_plot_command_draws_the_curve(run_dir, tmp_path):
    result = _nmt("plot", str(run_dir), "--out", str(tmp_path / "curve.png"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_resuming_with_other_settings_is_a_one_line_error(run_dir, tiny_prepared):
    result = _nmt("train", "--data", str(tiny_prepared), "--out", str(run_dir), "--max-tokens", "300", *TINY,
                  "--set", "train.max_steps=6", "--set", "model.dropout=0.3")
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "model.dropout=0.1" in result.output
    assert "--restart" in result.output and len(result.output.strip().splitlines()) == 1


def test_train_needs_data_and_out():
    result = _nmt("train", *TINY)
    assert result.exit_code == 1 and "--data PREPARED_DIR and --out RUN_DIR" in result.output
