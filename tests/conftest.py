"""Shared fixtures: repository paths and the shared data copies (tests skip when they are absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips the test when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data copies not found at {SHARED_DATA} (see README: Data)")
    return SHARED_DATA
