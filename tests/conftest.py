"""Shared fixtures: the real data in ../shared/data, single-threaded torch on the CPU, temp dirs.

``make test`` runs the suite in two pytest-xdist workers (``--dist loadfile``: a file's tests,
and its module fixtures, stay in one worker); the session fixtures that train a model are
built once for both workers (:func:`built_once`).
"""

from __future__ import annotations

import io
import os
import shutil
import signal
from pathlib import Path
from typing import Callable, Iterator

import pytest
import torch
from filelock import FileLock

from nmt_cli.models import packed

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("NMT_SHARED_DATA", REPO.parent / "shared" / "data"))

torch.set_num_threads(1)
CUDA_IS_AVAILABLE = torch.cuda.is_available

# A shell starts background jobs (`make test &`, `nohup ...`) with SIGINT ignored, and an ignored
# signal stays ignored through exec: the tests that press Ctrl-C on an nmt process would send a
# signal it never sees. With a handler here, every child process starts with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def cpu_as_auto() -> Iterator[None]:
    """Device ``auto`` means the CPU in this process, GPU or not: the suite's expected values are CPU values.

    tests/test_cuda.py checks the GPU paths, with :func:`cuda_as_auto`.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: False)
        yield


@pytest.fixture
def cuda_as_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo :func:`cpu_as_auto` for one test."""
    monkeypatch.setattr(torch.cuda, "is_available", CUDA_IS_AVAILABLE)


@pytest.fixture
def training_on_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 training multiplies through oneDNN, as on a CPU other than an Intel one
    (``models/packed.py``: ``onednn_trains_faster``), whichever CPU runs the test: the tests of that
    path must not depend on the machine."""
    monkeypatch.setattr(packed, "cpu_vendor", lambda: "AuthenticAMD")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A directory filled by ``build(directory)`` once per test session.

    Under pytest-xdist the workers share the session's temporary root: the first to get
    the lock builds the directory, the others wait for it and reuse it (the fixtures
    that train a model would otherwise train once per worker). Users only read it.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        directory = tmp_path_factory.mktemp(name)
        build(directory)
        return directory
    directory = tmp_path_factory.getbasetemp().parent / name  # the session's root, above the workers' own
    done = directory / ".built"
    with FileLock(f"{directory}.lock"):
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)  # a worker that failed half-way left it
            directory.mkdir()
            build(directory)
            done.touch()
    return directory


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``; tests that need it skip with the reason when it is absent."""
    if not (SHARED_DATA / "multi30k" / "train.de").is_file():
        pytest.skip(f"real data not available: {SHARED_DATA} is missing (set NMT_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def multi30k(shared_data: Path) -> Path:
    return shared_data / "multi30k"


@pytest.fixture(scope="session")
def tiny_prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small prepared synthetic corpus (400 training pairs, ~300 pieces), built once per session."""
    from nmt_cli.config import Config
    from nmt_cli.data.prepare import prepare

    config = Config().with_overrides({
        "data.source": "synthetic", "data.synthetic_train_size": 400, "data.synthetic_valid_size": 30,
        "data.synthetic_test_size": 10, "data.vocab_size": 300,
    })
    root = built_once(tmp_path_factory, "prepared", lambda root: prepare(config, root / "synthetic", progress=False))
    return root / "synthetic"


@pytest.fixture(scope="session")
def trained_transformer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run directory, prepared directory) of a small Transformer trained to a non-trivial BLEU.

    The synthetic corpus (4,000 training pairs, 300 pieces, 1,000 test sentences); 2+2 layers, d_model 64;
    800 steps on one thread (about 45 s), test BLEU about 45 with beam 5. Built once per session.
    """
    from nmt_cli.config import Config
    from nmt_cli.data.prepare import prepare
    from nmt_cli.training import train

    config = Config().with_overrides({
        "data.source": "synthetic", "data.synthetic_train_size": 4000, "data.synthetic_valid_size": 50,
        "data.synthetic_test_size": 1000, "data.vocab_size": 300,
        "model.d_model": 64, "model.heads": 4, "model.ffn_dim": 256, "model.encoder_layers": 2,
        "model.decoder_layers": 2, "model.dropout": 0.0,
        "train.max_tokens": 2048, "train.lr": 0.006, "train.warmup_steps": 100, "train.max_steps": 800,
        "train.log_every": 400, "train.valid_every": 800, "train.valid_bleu": False,
        "train.early_stop_metric": "loss", "train.keep_last": 2, "train.num_threads": 1, "train.seed": 1,
    })
    def build(root: Path) -> None:
        prepare(config, root / "data", progress=False)
        train(config, root / "data", root / "run", stream=io.StringIO())

    root = built_once(tmp_path_factory, "trained-transformer", build)
    return root / "run", root / "data"


@pytest.fixture(scope="session")
def tiny_trained_run(tiny_prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer Transformer trained 300 steps on ``tiny_prepared``: short but real translations.

    Learned positions with ``max_positions`` 128, so a source of about 100 pieces is too long for it.
    """
    from nmt_cli.config import Config
    from nmt_cli.training.trainer import train

    config = Config().with_overrides({
        "model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
        "model.decoder_layers": 1, "model.positions": "learned", "model.max_positions": 128,
        "train.max_steps": 300, "train.max_tokens": 2000, "train.lr": 3e-3, "train.warmup_steps": 20,
        "train.valid_every": 0, "train.early_stop_metric": "loss", "train.log_every": 100, "train.num_threads": 1,
        "decode.beam_size": 2,
    })
    root = built_once(tmp_path_factory, "tiny-trained",
                      lambda root: train(config, tiny_prepared, root / "run", stream=io.StringIO()))
    return root / "run"
