"""The per-seed files of a report folder (written next to ``report.md`` so that anyone can recompute a verdict
without the sweep's job folders), and reading a report folder back as a sweep.

- ``seeds.csv``: one row per job: ``setting`` (the group label), one column per swept key, ``seed``,
  ``status``, ``diverged_step``, ``global_step``, ``tokens_seen``, ``params_total``, ``job`` (folder relative
  to the sweep) and every final metric of the sweep.
- ``curves.csv``: the per-seed ``val/*`` curves of ``csv/metrics.csv``, long format: ``job, setting, seed,
  metric, optimizer_step, value`` (``optimizer_step``: updates done).
- ``jobs.json``: what :func:`xformer.report.aggregate.load_job` read from each job, so that
  ``xformer report <report folder>`` rebuilds the same sweep (:func:`read_report_folder`).
- ``verdicts.json``: one record per claim with its parts (:func:`write_verdicts`), read by ``xformer claims table``.

Paths in these files and in ``report.md`` are portable (:func:`portable`): ``${XFORMER_DATA}/…``,
``${XFORMER_RUNS}/…``, ``./…`` (this checkout) or ``~/…``, never the absolute paths of the machine that ran it.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import fields
from pathlib import Path

from .aggregate import Job, NoJobsError, Sweep, fmt_value, read_curves

SEEDS_CSV, CURVES_CSV, JOBS_JSON, VERDICTS_JSON = "seeds.csv", "curves.csv", "jobs.json", "verdicts.json"
FORMAT = 1
"""Version of ``jobs.json``."""
VERDICTS_FORMAT = 2
"""Version of ``verdicts.json`` (2: a claim's ``parts``)."""
JOB_FIELDS = [f.name for f in fields(Job) if f.name not in ("path", "curves")]
"""The :class:`~xformer.report.aggregate.Job` fields a ``jobs.json`` record holds, besides ``job`` (its folder)."""


def _prefixes() -> list[tuple[str, str]]:
    """``(absolute folder, portable spelling)``, longest first: the data and runs roots, then home."""
    found = []
    for var in ("XFORMER_DATA", "XFORMER_RUNS"):
        if os.environ.get(var):
            found.append((str(Path(os.environ[var]).expanduser().resolve()), "${" + var + "}"))
            found.append((os.environ[var].rstrip("/"), "${" + var + "}"))
    found.append((str(Path(__file__).resolve().parents[2]), "."))  # this checkout (a job's hydra root_dir)
    found.append((str(Path.home()), "~"))
    return sorted({a: b for a, b in found if a and a != "/"}.items(), key=lambda ab: -len(ab[0]))


def portable(obj, prefixes: list[tuple[str, str]] | None = None):
    """``obj`` (a string, or lists/dicts of them) with every absolute path under ``$XFORMER_DATA``,
    ``$XFORMER_RUNS`` or the home folder rewritten as ``${XFORMER_DATA}/…``, ``${XFORMER_RUNS}/…`` or
    ``~/…``; other values unchanged."""
    prefixes = _prefixes() if prefixes is None else prefixes
    if isinstance(obj, str):
        for absolute, short in prefixes:
            if obj == absolute:
                return short
            obj = obj.replace(absolute + "/", short + "/")
        return obj
    if isinstance(obj, dict):
        return {k: portable(v, prefixes) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v, prefixes) for v in obj]
    return obj


def write_verdicts(results: list, out: Path) -> Path:
    """Write ``verdicts.json``: ``{"format": 2, "claims": [...]}``, a record per claim with its parts
    (:meth:`xformer.report.rules.results.ClaimResult.record`), paths made portable."""
    path = out / VERDICTS_JSON
    records = portable([r.record() for r in results])
    path.write_text(json.dumps({"format": VERDICTS_FORMAT, "claims": records}, indent=1, default=str))
    return path


def _rel(path: Path, roots: list[Path]) -> str:
    """``path`` relative to the first of ``roots`` it lies under, else as it is."""
    return next((os.path.relpath(path, r) for r in roots if path.is_relative_to(r)), str(path))


def _setting(sweep: Sweep, job: Job) -> str:
    return ", ".join(f"{k}={fmt_value(job.value(k))}" for k in sweep.swept_keys) or "all jobs"


def write_seed_files(sweep: Sweep, out: Path) -> list[Path]:
    """Write ``seeds.csv``, ``curves.csv`` and ``jobs.json`` for ``sweep`` into ``out``; return them."""
    out.mkdir(parents=True, exist_ok=True)
    roots = [Path(d) for d in sweep.dirs]
    names = {id(j): _rel(j.path, roots) for j in sweep.jobs}
    metrics = sweep.metric_keys
    header = ["setting", *sweep.swept_keys, *"seed status diverged_step global_step tokens_seen".split()]
    header += ["params_total", "job", *metrics]
    with (out / SEEDS_CSV).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for j in sweep.jobs:
            swept = [fmt_value(j.value(k)) for k in sweep.swept_keys]
            steps = ["" if v is None else v for v in (j.diverged_step, j.global_step, j.tokens_seen)]
            values = [repr(j.metrics[m]) if m in j.metrics else "" for m in metrics]
            row = [_setting(sweep, j), *swept, fmt_value(j.seed), j.status, *steps, j.params.get("total", "")]
            w.writerow([*row, names[id(j)], *values])
    records = []
    with (out / CURVES_CSV).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job", "setting", "seed", "metric", "optimizer_step", "value"])
        for j in sweep.jobs:
            curves = {k: c for k, c in read_curves(j, None).items() if k.startswith("val/")}
            for key, (xs, ys) in sorted(curves.items()):
                for x, y in zip(xs, ys, strict=False):
                    w.writerow([names[id(j)], _setting(sweep, j), fmt_value(j.seed), key, f"{x:g}", repr(y)])
            record = {"job": names[id(j)]} | {k: getattr(j, k) for k in JOB_FIELDS}
            record |= {"config": portable(j.config), "error": portable(j.error)}
            record["metrics"] = {k: v if math.isfinite(v) else repr(v) for k, v in j.metrics.items()}  # "nan", "inf"
            records.append(record)
    (out / JOBS_JSON).write_text(json.dumps({"format": FORMAT, "jobs": records}, indent=1, default=str))
    return [out / SEEDS_CSV, out / CURVES_CSV, out / JOBS_JSON]


def is_report_folder(d: Path) -> bool:
    """Whether ``d`` holds the files :func:`write_seed_files` writes."""
    return (d / JOBS_JSON).is_file() and (d / CURVES_CSV).is_file()


def read_report_folder(d: Path) -> list[Job]:
    """The jobs of a report folder, with their validation curves from ``curves.csv``. Raises NoJobsError:
    ``jobs.json`` is unreadable or of an unknown format."""
    try:
        data = json.loads((d / JOBS_JSON).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise NoJobsError(f"{d / JOBS_JSON}: unreadable ({e})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise NoJobsError(f"{d / JOBS_JSON}: not a report folder of format {FORMAT}")
    curves: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    with (d / CURVES_CSV).open(newline="") as fh:
        for row in csv.DictReader(fh):
            xs, ys = curves.setdefault(row["job"], {}).setdefault(row["metric"], ([], []))
            xs.append(float(row["optimizer_step"]))
            ys.append(float(row["value"]))
    jobs = [
        Job(path=d / r["job"], curves=curves.get(r["job"], {}), **{k: r[k] for k in JOB_FIELDS if k in r})
        for r in data["jobs"]
    ]
    for j in jobs:
        j.metrics = {k: float(v) for k, v in j.metrics.items()}  # "nan", "inf" are written as text
    return jobs
