"""Reading ``bench.json`` (written by ``xformer bench``; its format is not final, so the reader is
defensive): the first readable JSON object."""

from __future__ import annotations

import json
from pathlib import Path


def load_bench(paths: list[Path]) -> dict | None:
    """The first readable JSON object among ``paths``; ``None`` when there is none."""
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(data, dict):
            return data
    return None
