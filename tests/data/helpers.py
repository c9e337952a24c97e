"""Helpers for the data-layer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
"""Public data copies (``<repo>/../shared/data``); tests that need them skip when absent."""


def shared(*parts: str) -> Path:
    """Path under :data:`SHARED_DATA`, or ``pytest.skip`` when it does not exist."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public data copy not found at {path} (see shared/data/README.md)")
    return path
