"""A job's run record, ``<job dir>/metrics.json`` (the fields of :class:`RunRecord`): one typed reader and
writer for the driver, sweeps, sweep resume, the claims runner and the report. No torch, no Lightning."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

FILE = "metrics.json"


class Status(StrEnum):
    """A job's outcome (docs/troubleshooting.md: each with its exit code); ``diverged`` is an outcome of the
    setting, not a crash; ``running``: a record without a status."""

    FINISHED = "finished"
    DIVERGED = "diverged"
    PREEMPTED = "preempted"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    RUNNING = "running"
    VALIDATED = "validated"  # a dry run's job (sweep summaries only)


#: Keys written only when set, in this order between ``config`` and ``metrics``.
_OPTIONAL = ("changed_on_resume", "diverged", "error")


@dataclass
class RunRecord:
    """The content of ``metrics.json``; unknown keys of a file read are kept in ``extra``."""

    status: Status = Status.RUNNING
    job: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    changed_on_resume: dict | None = None
    diverged: dict | None = None
    error: str | None = None
    metrics: dict = field(default_factory=dict)
    best: dict | None = None
    objective: dict = field(default_factory=dict)
    wall_time_s: float | None = None
    global_step: int | None = None
    tokens_seen: int | None = None
    params: dict = field(default_factory=dict)
    bleu_signature: str | None = None
    numerics: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def objective_value(self) -> float | None:
        """The objective as a finite-or-infinite float; ``None`` when missing, NaN or not a number."""
        return finite_or_none(self.objective.get("value"))

    def write(self, path: str | Path) -> None:
        """Write the record as indented JSON (values JSON cannot hold are written as text)."""
        out = {k: v for k, v in asdict(self).items() if k != "extra" and not (k in _OPTIONAL and v is None)}
        out["status"] = str(self.status)
        Path(path).write_text(json.dumps({**out, **self.extra}, indent=2, default=str))

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        """The record in ``path`` (a ``metrics.json`` or its job folder). Raises: OSError (no file), ValueError (not a
        JSON object, or an unknown ``status``)."""
        path = Path(path)
        data = json.loads((path / FILE if path.is_dir() else path).read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        names = {f.name for f in fields(cls)} - {"extra"}
        kw: dict[str, Any] = {k: v for k, v in data.items() if k in names and v is not None}
        kw["status"] = Status(data.get("status") or Status.RUNNING)
        return cls(**kw, extra={k: v for k, v in data.items() if k not in names})


def read_record(job_dir: str | Path) -> RunRecord | None:
    """The record of ``job_dir``; ``None`` when it has none or it cannot be read (a job killed while writing)."""
    try:
        return RunRecord.read(Path(job_dir) / FILE)
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: Any, indent: int | None = None) -> None:
    """``data`` as JSON in ``path`` (values JSON cannot hold as text), atomically: a temporary file renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=indent, default=str))
    tmp.replace(path)


def finite_or_none(value: Any) -> float | None:
    """``value`` as a float; ``None`` for ``None``, NaN and what is not a number."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value
