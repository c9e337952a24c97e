"""Shared fixtures: repository paths and the shared data copies (tests skip when they are absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Test tensors are tiny: one intra-op thread is many times faster than two busy-waiting ones on a
# shared 2-core machine, and subprocesses (run.py jobs) inherit the setting.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

#: The tiny job every run-level test starts from (numbers data, a 1+1-layer d_model 32 model, quiet
#: console); each test module adds its own trainer settings.
TINY = [
    "data.n_train=300",
    "data.n_val=40",
    "data.n_test=40",
    "data.n_long=10",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1",
]


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips the test when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data copies not found at {SHARED_DATA} (see docs/running.md: Data)")
    return SHARED_DATA
