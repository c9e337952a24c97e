"""Pre-registration (docs/report.md, "Pre-registration"): when a ``-m`` sweep starts, every declaration in
``claims/*.yaml`` that reads it is frozen into ``<sweep dir>/preregistration.json``; the first freeze is never
overwritten, a changed declaration is appended as an observation. Imports neither torch nor Lightning."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from .record import write_json

FILE = "preregistration.json"
REPO = Path(__file__).resolve().parents[2]
CLAIMS_DIR = REPO / "claims"
"""The project's claim declarations (``claims/*.yaml``)."""


def digest(body: Any) -> str:
    """sha256 of ``body``'s canonical JSON (sorted keys, no spaces): the same for any YAML spelling of it."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint(body: dict) -> tuple[str, list[str]]:
    """``(sha256 of the whole declaration, [sha256 of each part])``."""
    parts = body.get("parts") if isinstance(body, dict) else None
    return digest(body), [digest(p) for p in parts] if isinstance(parts, list) else []


def declarations_reading(sweep_name: str, folder: Path = CLAIMS_DIR) -> dict[str, tuple[str, dict]]:
    """``{claim id: (file, declaration)}`` of the declarations in ``folder`` whose ``sweeps`` list ``sweep_name``.
    A file that does not parse is skipped here (the report refuses it with its own error line)."""
    out: dict[str, tuple[str, dict]] = {}
    for path in sorted(Path(folder).glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        for name, body in (data or {}).items() if isinstance(data, dict) else ():
            if isinstance(body, dict) and sweep_name in (body.get("sweeps") or []):
                rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                out[str(name)] = (str(rel), body)
    return out


def finished_jobs(sweep_dir: Path) -> int:
    """How many job folders of ``sweep_dir`` hold a finished run's record (``metrics.json``, status finished)."""
    n = 0
    for rec in Path(sweep_dir).glob("*/metrics.json"):
        try:
            n += json.loads(rec.read_text()).get("status") == "finished"
        except (OSError, ValueError, AttributeError):
            continue
    return n


def read(sweep_dir: Path) -> dict:
    """The sweep's record (an empty one when there is none)."""
    try:
        data = json.loads((Path(sweep_dir) / FILE).read_text())
    except (OSError, ValueError):
        return {"format": 1, "claims": {}, "observations": []}
    data.setdefault("claims", {})
    data.setdefault("observations", [])
    return data


def write(sweep_dir: Path, data: dict) -> None:
    """Write ``data`` as ``sweep_dir``'s record, atomically."""
    write_json(Path(sweep_dir) / FILE, data, indent=1)


def _frozen(file: str, body: dict, at: str, done: int | None, n_jobs: int | None) -> dict:
    sha, parts = fingerprint(body)
    fields = {"file": file, "sha256": sha, "parts_sha256": parts, "declaration": body, "frozen_at": at}
    return {**fields, "jobs_finished": done, "n_jobs": n_jobs}


def _observation(name: str, body: dict, at: str, done: int | None, n_jobs: int | None) -> dict:
    sha, parts = fingerprint(body)
    return {"claim": name, "sha256": sha, "parts_sha256": parts, "at": at, "jobs_finished": done, "n_jobs": n_jobs}


def freeze(
    sweep_dir: Path, declarations: dict[str, tuple[str, dict]], n_jobs: int | None, jobs_finished: int | None = None
) -> dict:
    """Freeze each of ``declarations`` (``{id: (file, body)}``) into ``sweep_dir``'s record, or record the first
    sighting of a changed one; returns the record. ``jobs_finished``: counted in ``sweep_dir`` when None."""
    data = read(sweep_dir)
    done = finished_jobs(sweep_dir) if jobs_finished is None else jobs_finished
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    changed = False
    for name, (file, body) in declarations.items():
        if (frozen := data["claims"].get(name)) is None:
            data["claims"][name] = _frozen(file, body, now, done, n_jobs)
            changed = True
            continue
        seen = {frozen["sha256"]} | {o["sha256"] for o in data["observations"] if o.get("claim") == name}
        if (sighting := _observation(name, body, now, done, n_jobs))["sha256"] not in seen:
            data["observations"].append(sighting)
            changed = True
    if changed:
        write(sweep_dir, data)
    return data


def status(record: dict, name: str, body: dict, sweep_dir: Path | None = None) -> dict:
    """The pre-registration status of claim ``name`` decided with declaration ``body`` against ``record``
    (:func:`read`): ``{"status", "frozen_sha256", "changed_parts", "jobs_finished", "n_jobs"}`` (the statuses:
    docs/report.md, "Pre-registration"); ``changed_parts``: 1-based numbers of the parts whose hash the frozen
    declaration lacks, ``changed_parts_jobs_finished``: the jobs finished when each was first seen (counted in
    ``sweep_dir`` now when no sweep start saw it)."""
    frozen = record.get("claims", {}).get(name)
    sha, parts = fingerprint(body)
    if frozen is None:
        return {"status": "not frozen", "frozen_sha256": None, "changed_parts": [], "jobs_finished": None}
    out = {"frozen_sha256": frozen["sha256"], "n_jobs": frozen.get("n_jobs")}
    if sha == frozen["sha256"]:
        k = frozen.get("jobs_finished")
        label = f"frozen after {k} of {frozen.get('n_jobs')} jobs had finished" if k else "declared before the data"
        label = "frozen at the sweep's start (jobs finished then: not recorded)" if k is None else label
        return {**out, "status": label, "changed_parts": [], "jobs_finished": k}
    seen = [o for o in record.get("observations", []) if o.get("claim") == name and o.get("sha256") == sha]
    k = seen[0]["jobs_finished"] if seen else (finished_jobs(sweep_dir) if sweep_dir is not None else None)
    old = set(frozen.get("parts_sha256") or [])
    changed = [i + 1 for i, p in enumerate(parts) if p not in old]
    obs = [o for o in record.get("observations", []) if o.get("claim") == name]
    first_seen = {}
    for i in changed:  # jobs finished when this part's present text was first seen
        hits = [o for o in obs if parts[i - 1] in (o.get("parts_sha256") or [])]
        first_seen[str(i)] = hits[0].get("jobs_finished") if hits else k
    out.update(status="changed after the data", changed_parts=changed, jobs_finished=k)
    return {**out, "changed_parts_jobs_finished": first_seen}


def derive(sweep_dir: Path, name: str, versions: list[tuple[str, dict, int | None]], n_jobs: int, note: str) -> dict:
    """A record for a sweep that ran before freezing existed, from ``versions`` of the declaration (``(commit,
    body, jobs finished then)`` in commit order, the first taken as frozen), written to ``sweep_dir`` with
    ``derived: note``; returns the record."""
    data = read(sweep_dir)
    commit, body, done = versions[0]
    data["claims"][name] = {**_frozen(f"claims/{name}.yaml@{commit}", body, commit, done, n_jobs), "derived": note}
    data["observations"] = [o for o in data["observations"] if o.get("claim") != name]
    seen = {data["claims"][name]["sha256"]}
    for commit, body, done in versions[1:]:
        if (sighting := _observation(name, body, commit, done, n_jobs))["sha256"] not in seen:
            seen.add(sighting["sha256"])
            data["observations"].append(sighting)
    write(sweep_dir, data)
    return data
