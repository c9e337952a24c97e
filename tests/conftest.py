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


#: Folders a run makes relative to where it starts; a test runs its jobs under its tmp_path, never here.
LEFT_BEHIND = ("outputs", "multirun", "lightning_logs", "wandb")


def _run_folders() -> set[Path]:
    return {p for name in LEFT_BEHIND for p in (REPO / name).glob("*/*")} | {
        REPO / n for n in LEFT_BEHIND if (REPO / n).exists() and not any((REPO / n).iterdir())
    }


def pytest_sessionstart(session) -> None:
    session.config._xformer_folders_before = _run_folders()


def pytest_sessionfinish(session) -> None:
    """Fail the session when a test left a run folder in the checkout (a job started without ``cwd=tmp_path`` or
    ``hydra.run.dir`` under it)."""
    before = getattr(session.config, "_xformer_folders_before", None)
    if before is None or hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks
        return
    left = sorted(_run_folders() - before)
    if left:
        print(f"\nerror: the tests left {len(left)} run folder(s) in the checkout: {', '.join(map(str, left[:5]))}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips the test when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data copies not found at {SHARED_DATA} (see docs/running.md: Data)")
    return SHARED_DATA
