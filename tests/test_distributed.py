"""Two CPU processes under torchrun (gloo) train exactly like one process on both batches,
on one node or as two nodes (two torchrun agents meeting at a c10d rendezvous), and a run
of two processes resumes on one."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nmt_cli.checkpoint import list_checkpoints
from nmt_cli.config import Config
from nmt_cli.training import train
from nmt_cli.training.progress import read_metrics
from tests.test_trainer import train_losses

REPO = Path(__file__).resolve().parents[1]

SETTINGS = {
    "model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
    "model.decoder_layers": 1, "model.dropout": 0.0, "train.max_tokens": 300, "train.num_threads": 1,
    "train.optimizer": "sgd", "train.lr": 0.5, "train.schedule": "constant", "train.log_every": 1,
    "train.valid_every": 0, "train.early_stop_metric": "loss", "train.max_steps": 3,
}


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(list_checkpoints(run_dir)[-1] / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize("precision", [
    {},
    # the first updates overflow on both ranks alike (their gradients are summed before the check)
    {"train.precision": "fp16", "train.fp16_init_scale": 2.0**40},
], ids=["fp32", "fp16-overflowing"])
def test_two_processes_equal_one_process_accumulating_their_batches(tiny_prepared, tmp_path, precision):
    settings = {**SETTINGS, **precision}
    config_file = tmp_path / "ddp.yaml"
    config_file.write_text(Config().with_overrides({**settings, "train.update_freq": 1}).to_yaml())
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "nmt_cli", "train", "--config", str(config_file), "--data", str(tiny_prepared),
               "--out", str(tmp_path / "ddp"), "--device", "cpu"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]

    # each rank takes every second batch of the shuffled order, so update n of the pair sees
    # the same two batches as update n of one process accumulating two batches
    single = Config().with_overrides({**settings, "train.update_freq": 2})
    train(single, tiny_prepared, tmp_path / "single", stream=io.StringIO())
    assert train_losses(tmp_path / "ddp") == pytest.approx(train_losses(tmp_path / "single"), abs=1e-5)
    ddp_weights, single_weights = _weights(tmp_path / "ddp"), _weights(tmp_path / "single")
    assert ddp_weights.keys() == single_weights.keys()
    for name, tensor in ddp_weights.items():
        torch.testing.assert_close(tensor, single_weights[name], atol=1e-5, rtol=1e-4)

    # rank 1's batch mattered: rank 0's batch alone gives another loss
    alone = Config().with_overrides({**settings, "train.update_freq": 1, "train.max_steps": 1})
    train(alone, tiny_prepared, tmp_path / "alone", stream=io.StringIO())
    assert abs(train_losses(tmp_path / "alone")[0] - train_losses(tmp_path / "ddp")[0]) > 1e-3

    # only rank 0 wrote: one header (and the fp16-on-CPU note), three progress lines, one final line
    log = (tmp_path / "ddp" / "train.log").read_text().splitlines()
    assert len(log) == 5 + bool(precision) and "device cpu x 2" in log[0]
    assert [line.split(" |")[0] for line in log if line.startswith("step ")] == ["step 1/3", "step 2/3", "step 3/3"]
    if precision:
        skipped = [r["skipped_updates"] for r in read_metrics(tmp_path / "ddp") if r["kind"] == "train"]
        assert skipped == [r["skipped_updates"] for r in read_metrics(tmp_path / "single") if r["kind"] == "train"]
        assert skipped[0] >= 10


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _launch(launchers: list[list[str]], config_file: Path, prepared: Path, out: Path) -> None:
    """Start one ``torchrun`` per launcher argument list at once (the nodes), each training
    into ``out``, and wait for all of them."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    processes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "nmt_cli", "train",
                                   "--config", str(config_file), "--data", str(prepared), "--out", str(out),
                                   "--device", "cpu"],
                                  cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for launcher in launchers]
    try:
        outputs = [process.communicate(timeout=180)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]


def _state(run_dir: Path) -> dict:
    return json.loads((list_checkpoints(run_dir)[-1] / "state.json").read_text())


@pytest.mark.slow
def test_two_nodes_equal_one_process_and_the_run_resumes_on_one(tiny_prepared, tmp_path):
    settings = {**SETTINGS, "train.max_steps": 2}
    config_file = tmp_path / "ddp.yaml"
    config_file.write_text(Config().with_overrides({**settings, "train.update_freq": 1}).to_yaml())
    node = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", "nmt-two-nodes"]
    _launch([node, node], config_file, tiny_prepared, tmp_path / "ddp")
    assert _state(tmp_path / "ddp")["world_size"] == 2

    train(Config().with_overrides({**settings, "train.update_freq": 2}), tiny_prepared, tmp_path / "single",
          stream=io.StringIO())
    assert train_losses(tmp_path / "ddp") == pytest.approx(train_losses(tmp_path / "single"), abs=1e-5)
    ddp_weights, single_weights = _weights(tmp_path / "ddp"), _weights(tmp_path / "single")
    assert ddp_weights.keys() == single_weights.keys()
    for name, tensor in ddp_weights.items():
        torch.testing.assert_close(tensor, single_weights[name], atol=1e-5, rtol=1e-4)

    # resumed by one process: the same epoch at the same share of it (each rank had taken 2
    # batches, so batch 4 is next); train.update_freq stays 1, so an update now sees one batch
    train(Config().with_overrides({**settings, "train.update_freq": 1, "train.max_steps": 3}), tiny_prepared,
          tmp_path / "ddp", stream=io.StringIO())
    state = _state(tmp_path / "ddp")
    assert (state["step"], state["world_size"], state["data_position"]) == (3, 1, {"epoch": 1, "batch": 5})
    assert [r["step"] for r in read_metrics(tmp_path / "ddp") if r["kind"] == "train"] == [1, 2, 3]
