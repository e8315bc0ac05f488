"""Exact resume after a real kill, Ctrl-C that saves, and refusing to resume another run."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from nmt_cli.checkpoint import list_checkpoints
from nmt_cli.config import Config
from nmt_cli.errors import NmtError
from nmt_cli.training import train
from nmt_cli.training.progress import read_metrics
from nmt_cli.training.resume import capture_rng_state, restore_rng_state

REPO = Path(__file__).resolve().parents[1]

# tiny Transformer, deterministic CPU settings, dropout > 0 so the RNG state matters
SETTINGS = {
    "model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
    "model.decoder_layers": 1, "model.dropout": 0.2, "train.max_tokens": 300, "train.num_threads": 1,
    "train.warmup_steps": 10, "train.lr": 3e-3, "train.log_every": 1, "train.valid_every": 0,
    "train.early_stop_metric": "loss", "train.save_every": 5, "train.update_freq": 2,
}


def _start(config_file: Path, prepared: Path, run_dir: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "nmt_cli", "train", "--config", str(config_file), "--data", str(prepared),
               "--out", str(run_dir), "--device", "cpu"]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"training ended before {path.name} appeared:\n{process.stderr.read()}"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.01)


def _logged_by_step(run_dir: Path, key: str = "loss") -> dict[int, float]:
    """``key`` (the loss by default) of every logged training step, by step."""
    records = [r for r in read_metrics(run_dir) if r["kind"] == "train"]
    steps = [r["step"] for r in records]
    assert len(steps) == len(set(steps)), "a step was logged twice"
    return {r["step"]: r[key] for r in records}


@pytest.mark.slow
def test_killed_run_resumes_exactly(tiny_prepared, tmp_path):
    config = Config().with_overrides({**SETTINGS, "train.max_steps": 80})
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config.to_yaml())
    train(config, tiny_prepared, tmp_path / "uninterrupted", stream=io.StringIO())
    expected = _logged_by_step(tmp_path / "uninterrupted")

    run_dir = tmp_path / "killed"
    process = _start(config_file, tiny_prepared, run_dir)
    _wait_for(run_dir / "checkpoints" / "step-00000010" / "state.json", process)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    killed_at = max(_logged_by_step(run_dir))
    assert killed_at < 80, "the run finished before it was killed"

    resumed = _start(config_file, tiny_prepared, run_dir)
    _, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert "resuming from step-000000" in stderr
    losses = _logged_by_step(run_dir)
    assert sorted(losses) == list(range(1, 81))
    assert losses == expected  # every logged loss, to the last bit
    # the same batches: the same target tokens in every update
    assert _logged_by_step(run_dir, "tokens_per_update") == _logged_by_step(tmp_path / "uninterrupted", "tokens_per_update")
    # and the same final weights and optimizer state, bit for bit
    final = "checkpoints/step-00000080"
    resumed_weights, whole_weights = (load_file(root / final / "model.safetensors")
                                      for root in (run_dir, tmp_path / "uninterrupted"))
    assert resumed_weights.keys() == whole_weights.keys()
    assert all(torch.equal(resumed_weights[name], whole_weights[name]) for name in whole_weights)
    resumed_optimizer, whole_optimizer = (torch.load(root / final / "optimizer.pt", weights_only=True)["optimizer"]
                                          for root in (run_dir, tmp_path / "uninterrupted"))
    assert_same_tree(resumed_optimizer, whole_optimizer)


def assert_same_tree(first, second) -> None:
    """Nested dicts/lists of tensors and plain values, equal to the last bit."""
    if isinstance(first, torch.Tensor):
        assert isinstance(second, torch.Tensor) and first.dtype == second.dtype and torch.equal(first, second)
    elif isinstance(first, dict):
        assert first.keys() == second.keys()
        for key in first:
            assert_same_tree(first[key], second[key])
    elif isinstance(first, (list, tuple)):
        assert len(first) == len(second)
        for a, b in zip(first, second):
            assert_same_tree(a, b)
    else:
        assert first == second


@pytest.mark.slow  # fp16 on a CPU is many times slower
def test_fp16_resume_restores_the_loss_scale(tiny_prepared, tmp_path):
    """The first updates overflow at a loss scale of 2^40; a run resumed after them keeps the
    lowered scale (a fresh scaler would skip them again and train on other batches)."""
    settings = {**SETTINGS, "train.precision": "fp16", "train.fp16_init_scale": 2.0**40}
    train(Config().with_overrides({**settings, "train.max_steps": 12}), tiny_prepared, tmp_path / "whole",
          stream=io.StringIO())
    expected = _logged_by_step(tmp_path / "whole")
    assert sum(_logged_by_step(tmp_path / "whole", "skipped_updates").values()) >= 10

    train(Config().with_overrides({**settings, "train.max_steps": 5}), tiny_prepared, tmp_path / "split",
          stream=io.StringIO())
    train(Config().with_overrides({**settings, "train.max_steps": 12}), tiny_prepared, tmp_path / "split",
          stream=io.StringIO())
    assert _logged_by_step(tmp_path / "split") == pytest.approx(expected, abs=1e-6)
    assert _logged_by_step(tmp_path / "split", "loss_scale") == _logged_by_step(tmp_path / "whole", "loss_scale")


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_that_resumes(tiny_prepared, tmp_path):
    config = Config().with_overrides({**SETTINGS, "train.max_steps": 100_000, "train.save_every": 0})
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config.to_yaml())
    run_dir = tmp_path / "run"
    process = _start(config_file, tiny_prepared, run_dir)
    deadline = time.monotonic() + 60
    while len(_logged_by_step(run_dir)) < 3:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    last_logged = max(_logged_by_step(run_dir))
    newest = list_checkpoints(run_dir)[-1]
    state = json.loads((newest / "state.json").read_text())
    assert state["step"] == last_logged and newest.name == f"step-{last_logged:08d}"
    assert (newest / "optimizer.pt").is_file() and state["rng"] and state["data_position"]["batch"] > 0
    assert "interrupted at step" in stderr

    more = Config().with_overrides({**SETTINGS, "train.max_steps": last_logged + 3})
    summary = train(more, tiny_prepared, run_dir, stream=io.StringIO())
    assert summary.step == last_logged + 3
    assert sorted(_logged_by_step(run_dir)) == list(range(1, last_logged + 4))


def test_resume_refuses_another_config_unless_restarted(tiny_prepared, tmp_path):
    config = Config().with_overrides({**SETTINGS, "train.max_steps": 2})
    train(config, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    changed = config.with_overrides({"train.lr": 1e-3})
    with pytest.raises(NmtError, match=r"train.lr=0.003.*--restart"):
        train(changed, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    summary = train(changed, tiny_prepared, tmp_path / "run", restart=True, stream=io.StringIO())
    assert summary.step == 2 and [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-00000002"]
    longer = changed.with_overrides({"train.max_steps": 4})  # a longer budget is the same run
    assert train(longer, tiny_prepared, tmp_path / "run", stream=io.StringIO()).step == 4


def test_rng_states_round_trip_through_json():
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    saved = json.loads(json.dumps(capture_rng_state()))
    first = (torch.rand(3), np.random.rand(3), random.random())
    restore_rng_state(saved)
    second = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(first[0], second[0]) and np.array_equal(first[1], second[1]) and first[2] == second[2]


def test_a_format_1_rnn_run_resumes_only_with_the_unscaled_embeddings_it_was_trained_with(tiny_prepared, tmp_path):
    """Format-1 RNN checkpoints predate embedding scaling: resuming one under the new default is refused."""
    rnn = Config().with_overrides({"model.arch": "rnn_luong", "model.embed_dim": 16, "model.hidden_size": 16,
                                   "train.max_tokens": 300, "train.num_threads": 1, "train.max_steps": 2,
                                   "train.valid_every": 0, "train.early_stop_metric": "loss"})
    train(rnn, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    state_file = list_checkpoints(tmp_path / "run")[-1] / "state.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "format": 1}))
    longer = rnn.with_overrides({"train.max_steps": 3})
    with pytest.raises(NmtError, match=r"model.scale_embeddings=False, the config now says True"):
        train(longer, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    unscaled = longer.with_overrides({"model.scale_embeddings": False})
    assert train(unscaled, tiny_prepared, tmp_path / "run", stream=io.StringIO()).step == 3
