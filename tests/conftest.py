"""Shared fixtures: the real data in ../shared/data, single-threaded torch, temp dirs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("NMT_SHARED_DATA", REPO.parent / "shared" / "data"))

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``; tests that need it skip with the reason when it is absent."""
    if not (SHARED_DATA / "multi30k" / "train.de").is_file():
        pytest.skip(f"real data not available: {SHARED_DATA} is missing (set NMT_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def multi30k(shared_data: Path) -> Path:
    return shared_data / "multi30k"
