"""What makes a resumed run identical to an uninterrupted one: RNG states and settings.

Random generator states are stored as JSON (byte states in base64, numpy's and Python's
as lists) inside the checkpoint's ``state.json``. A run directory may be resumed only by
a config that differs in the keys below, which change how long or how loudly a run goes
but not the trajectory of the weights.
"""

from __future__ import annotations

import base64
import random
from typing import Any

import numpy as np
import torch

from nmt_cli.config import Config, DataConfig
from nmt_cli.errors import NmtError

__all__ = ["capture_rng_state", "restore_rng_state", "check_same_run", "check_same_architecture",
           "RESUMABLE_CHANGES"]

#: train keys that may change between a run and its resumption
RESUMABLE_CHANGES = frozenset({
    "max_steps", "max_epochs", "max_minutes", "num_threads", "log_every", "valid_every",
    "save_every", "valid_max_sentences", "patience", "keep_best", "keep_last", "average_last",
    "init_from", "init_keep",  # they only decide how a run starts
})


def _encode_bytes(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _decode_bytes(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def capture_rng_state() -> dict[str, Any]:
    """Torch (CPU and current CUDA device), numpy and Python generator states, JSON-ready."""
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    state: dict[str, Any] = {
        "torch": _encode_bytes(torch.get_rng_state()),
        "numpy": [numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]],
        "python": [python_state[0], list(python_state[1]), python_state[2]],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = _encode_bytes(torch.cuda.get_rng_state())
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    torch.set_rng_state(_decode_bytes(state["torch"]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(_decode_bytes(state["cuda"]))


def check_same_run(saved: Config, config: Config, run_dir: str) -> None:
    """Refuse to resume ``run_dir`` with settings that would change what it learns."""
    before, after = saved.to_dict(), config.to_dict()
    for section in ("data", "model", "train"):
        for key, old in before[section].items():
            new = after[section][key]
            if old != new and not (section == "train" and key in RESUMABLE_CHANGES) \
                    and not (section == "data" and key in DataConfig.RESOURCE_KEYS):
                raise NmtError(
                    f"{run_dir}: was trained with {section}.{key}={old!r}, the config now says {new!r}; "
                    "use --restart to start over there, or a new --out directory"
                )


def check_same_architecture(saved: Config, config: Config, source: str) -> None:
    """Refuse to start from weights of another architecture or size (fine-tuning)."""
    before, after = saved.to_dict()["model"], config.to_dict()["model"]
    for key, old in before.items():
        if old != after[key]:
            raise NmtError(f"{source}: was trained with model.{key}={old!r}, the config says {after[key]!r}; "
                           "fine-tuning needs the same architecture (use the model section of its run's config.yaml)")
