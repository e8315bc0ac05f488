"""resolve_device: one rule for which device a command runs on; model_device: where a model's inputs go."""

from __future__ import annotations

import pytest
import torch

from nmt_cli.device import model_device, resolve_device
from nmt_cli.errors import NmtError


def test_auto_is_the_cpu_without_cuda_and_names_are_checked():
    assert resolve_device("auto") == resolve_device(None) == torch.device("cpu")
    with pytest.raises(NmtError, match="'cuda' requested but CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(NmtError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")
    with pytest.raises(NmtError, match="unsupported device 'meta'"):
        resolve_device("meta")


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_each_torchrun_process_gets_its_own_gpu_and_a_missing_one_is_one_line(one_gpu):
    assert resolve_device("auto", local_rank=0) == torch.device("cuda", 0)
    assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)
    with pytest.raises(NmtError, match=r"^cuda:1 requested, but this machine has 1 GPU: start at most that many "
                                       r"processes per node \(torchrun --nproc_per_node\)$"):
        resolve_device("auto", local_rank=1)
    with pytest.raises(NmtError, match=r"^cuda:3 requested, but this machine has 1 GPU$"):
        resolve_device("cuda:3")


def test_model_device_is_where_the_weights_are():
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(torch.nn.ReLU()) == torch.device("cpu")  # no weights at all: the CPU
    assert model_device(torch.nn.Linear(2, 2, device="meta")) == torch.device("meta")
