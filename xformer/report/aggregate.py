"""Find the jobs of one or more sweeps, group them by the swept values and average over seeds.

A *job* is a folder holding ``metrics.json`` (:func:`xformer.jobs.driver.run`) or ``.hydra/overrides.yaml``
(a job that crashed before its summary), found recursively below each folder given. The *swept keys* are the
override keys (``model.ffn_ratio``, ``model/pe``) whose value differs between jobs, never ``seed`` or
``hydra.*``; a job that does not override a key gets its value from its resolved config or Hydra group
choices, so sweeps run with different override lists pool. Jobs with equal swept values form a
:class:`Group`; every metric is summarised over its seeds as a :class:`Stat` (mean, sample std, n).

A *diverged* job (status ``diverged``, or an older ``failed`` one whose error is a ``NonFiniteLossError``) is
an outcome of its setting: it stays in its group and enters every metric's :class:`Stat` as a non-finite
value. Crashed, unfinished or missing jobs are kept apart (``Sweep.failed``) and never averaged.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any, Callable, Iterable

from omegaconf import OmegaConf

from xformer.config.overrides import parse
from xformer.jobs.record import FILE, RunRecord, Status

log = logging.getLogger(__name__)

SEED_KEY = "seed"
DIVERGED = Status.DIVERGED.value
SKIP_DIRS = {".hydra", "wandb", "checkpoints", "csv", "__pycache__", "node_modules", ".git", ".venv"}


class NoJobsError(ValueError):
    """A folder given to the report does not exist or holds no jobs."""


# -- one job ------------------------------------------------------------------------------------
@dataclass
class Job:
    """One training job as read from disk (or from W&B).

    Attributes:
        path: the job folder (``multirun/<date>/<time>/<num>``); for W&B runs a pseudo path.
        status: ``finished`` | ``diverged`` | ``failed`` | ``preempted`` | ``running`` (metrics.json), or
            ``missing`` (no metrics.json).
        overrides: the command-line overrides, ``{key: parsed value}`` (``+``/``~`` prefixes dropped).
        config, choices: the resolved config (``{}`` when unknown); the Hydra group choices (``{"model/pe": "rope"}``).
        metrics, params: final flat metrics (``val/loss``, ``test/exact_match@2x`` ...); parameter counts by role.
        wall_time_s, global_step, tokens_seen: from metrics.json when present.
        diverged_step, error: the step a diverged job diverged at (``None`` when unknown); the error line.
        curves: ``{metric: (steps, values)}`` when already loaded (W&B); files are read lazily.
    """

    path: Path
    status: str
    overrides: dict[str, Any] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    choices: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)
    wall_time_s: float | None = None
    global_step: int | None = None
    tokens_seen: int | None = None
    diverged_step: int | None = None
    error: str = ""
    curves: dict[str, tuple[list[float], list[float]]] | None = None

    @property
    def finished(self) -> bool:
        return self.status == Status.FINISHED

    @property
    def diverged(self) -> bool:
        return self.status == DIVERGED

    @property
    def seed(self) -> Any:
        return self.value(SEED_KEY)

    def knows(self, key: str) -> bool:
        """Whether :meth:`value` can tell ``key`` (an override, a group choice or a config entry)."""
        return key in self.overrides or key in self.choices or ("/" not in key and bool(self.config))

    def value(self, key: str) -> Any:
        """The job's value for an override key: its override, else its Hydra group choice
        (``model/pe``, ``data``), else its resolved config entry (``model.ffn_ratio``); ``None`` when
        unknown."""
        if key in self.overrides:
            return self.overrides[key]
        if key in self.choices or "/" in key:
            choice = self.choices.get(key)
            return parse_value(choice) if isinstance(choice, str) else choice
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node if not isinstance(node, (dict, list)) else str(node)


def parse_value(text: str) -> Any:
    """An override value as Python: ``"4"`` → 4, ``"0.1"`` → 0.1, ``"true"`` → True, ``"null"`` → None;
    anything else (``rope``, ``[1,2]``) stays a string, unquoted."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~"):  # Hydra's null; "none" is an option name (model/pe=none)
        return None
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    return s


def parse_override(text: str) -> tuple[str, Any] | None:
    """``"model.ffn_ratio=2"`` → ``("model.ffn_ratio", 2)``; ``+``/``++``/``~`` prefixes are dropped;
    a deletion without value (``~key``) or a string without ``=`` gives ``None``."""
    if "=" not in text:
        return None
    override = parse(text)  # Hydra's own grammar (xformer.config.overrides)
    if override is not None and not override.is_sweep_override() and not override.is_delete():
        return (override.key_or_group, override.value())
    key, _, val = text.partition("=")  # a value Hydra's grammar refuses (an extension's syntax)
    key = key.lstrip("+~").strip()
    return (key, parse_value(val)) if key else None


def fmt_value(v: Any) -> str:
    """A swept value as text (``true``/``null`` spelled as in Hydra overrides)."""
    return json.dumps(v) if v is None or isinstance(v, bool) else str(v)


def value_sort_key(v: Any) -> tuple:
    """Orders numbers numerically before strings, ``None`` last."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, float(v), "")
    if v is None:
        return (2, 0.0, "")
    return (1, 0.0, fmt_value(v))


def find_job_dirs(root: Path) -> list[Path]:
    """All job folders at or below ``root`` (folders with ``metrics.json`` or ``.hydra/overrides.yaml``),
    sorted; job folders are not searched further. Hidden and bulky folders (wandb, checkpoints) are skipped."""
    found: list[Path] = []
    for here, dirs, files in os.walk(root):
        p = Path(here)
        if FILE in files or (p / ".hydra" / "overrides.yaml").is_file():
            found.append(p)
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
    return sorted(found, key=_path_sort_key)


def _path_sort_key(p: Path) -> tuple:
    return tuple((0, int(s), "") if s.isdigit() else (1, 0, s) for s in p.parts)


def _load_yaml(path: Path) -> Any:
    """A YAML file as plain Python (unresolved interpolations kept as text); ``None`` if unreadable."""
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # noqa: BLE001 - a half-written file must not stop the report
        return None


def load_job(path: Path) -> Job:
    """Read one job folder: overrides from ``.hydra/overrides.yaml`` (else ``metrics.json``'s), config and
    choices from ``metrics.json`` (else ``.hydra/``). Without ``metrics.json`` the job is ``missing``; an
    unreadable one makes it ``failed``. Never raises for bad content."""
    record, status = RunRecord(), "missing"
    if (path / FILE).is_file():
        try:
            record = RunRecord.read(path / FILE)
            status = record.status.value
        except (OSError, ValueError):
            status = Status.FAILED.value
    info = record.job
    raw = _load_yaml(path / ".hydra" / "overrides.yaml")
    if not isinstance(raw, list):
        raw = info.get("overrides") or []
    overrides = dict(kv for kv in (parse_override(str(o)) for o in raw) if kv is not None)
    overrides = {k: v for k, v in overrides.items() if not k.startswith("hydra.")}
    config = record.config or _load_yaml(path / ".hydra" / "config.yaml") or {}
    choices = info.get("choices") or {}
    if not choices and (path / ".hydra" / "hydra.yaml").is_file():
        hydra = _load_yaml(path / ".hydra" / "hydra.yaml") or {}
        choices = ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    metrics = {k: float(v) for k, v in record.metrics.items() if _is_number(v)}
    params = {k: int(v) for k, v in record.params.items() if _is_number(v)}
    error = str(record.error or "")
    if status == Status.FAILED and error.startswith("NonFiniteLossError"):  # written before "diverged" existed
        status = DIVERGED
    div_step = record.diverged.get("step") if isinstance(record.diverged, dict) else None
    if status == DIVERGED and div_step is None:
        found = re.search(r"at step (\d+)", error)
        div_step = int(found.group(1)) if found else record.global_step
    return Job(
        path=path,
        status=status,
        overrides=overrides,
        config=config if isinstance(config, dict) else {},
        choices={str(k): v for k, v in choices.items()},
        metrics=metrics,
        params=params,
        wall_time_s=record.wall_time_s,
        global_step=record.global_step,
        diverged_step=int(div_step) if _is_number(div_step) else None,
        error=error,
        tokens_seen=int(record.tokens_seen) if _is_number(record.tokens_seen) else None,
    )


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, bool)


# -- statistics ---------------------------------------------------------------------------------
@dataclass
class Stat:
    """A metric over the seeds of a group: ``mean``, sample ``std`` (ddof=1; ``None`` when n == 1),
    ``n`` finite values, the ``values`` themselves, and ``n_nonfinite`` (NaN/inf: diverged runs,
    excluded from mean and std)."""

    mean: float
    std: float | None
    n: int
    values: list[float]
    n_nonfinite: int = 0

    @classmethod
    def of(cls, values: Iterable[float]) -> "Stat | None":
        """The statistic of ``values``; ``None`` when none is finite and none is given."""
        vals = [float(v) for v in values]
        finite = [v for v in vals if math.isfinite(v)]
        bad = len(vals) - len(finite)
        if not finite:
            return cls(math.nan, None, 0, [], bad) if bad else None
        n = len(finite)
        mean = sum(finite) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in finite) / (n - 1)) if n > 1 else None
        return cls(mean, std, n, finite, bad)

    def text(self, digits: int = 4) -> str:
        """``"0.6 ± 0.1414 (n=2)"``; ``"0.6 (n=1)"``; diverged runs noted."""
        if self.n == 0:
            return f"diverged ({self.n_nonfinite})"
        std = f" ± {self.std:.{max(digits - 1, 2)}g}" if self.std is not None else ""
        bad = f" +{self.n_nonfinite} diverged" if self.n_nonfinite else ""
        return f"{self.mean:.{digits}g}{std} (n={self.n}){bad}"


@dataclass
class Group:
    """The seeds of one setting: jobs that share the swept values ``values`` (``{swept key: value}``), split
    into ``jobs`` (finished, averaged), ``diverged`` (in every metric's ``Stat.n_nonfinite``) and ``failed``
    (crashed or unfinished: neither); ``stats`` ``{metric: Stat}``; ``params`` mean parameter counts by role."""

    values: dict[str, Any]
    jobs: list[Job] = field(default_factory=list)
    failed: list[Job] = field(default_factory=list)
    diverged: list[Job] = field(default_factory=list)
    stats: dict[str, Stat] = field(default_factory=dict)
    params: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return tuple(self.values.values())

    @property
    def n(self) -> int:
        return len(self.jobs)

    def label(self) -> str:
        """``"model.ffn_ratio=4, model/pe=rope"`` (``"all jobs"`` when nothing is swept)."""
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in self.values.items()) or "all jobs"

    def stat(self, metric: str) -> Stat | None:
        return self.stats.get(metric)

    def config(self) -> dict:
        """The resolved config of the group's first job (finished first), ``{}`` if none."""
        return next((j.config for j in self.jobs + self.diverged + self.failed if j.config), {})


@dataclass
class Sweep:
    """Everything the report needs about a set of jobs: the folders searched (``dirs``), every job found,
    the sorted ``swept_keys``, the overrides all jobs share (``fixed``), the ``groups`` with a finished or
    diverged job (ordered by swept values), all crashed or unfinished jobs (``failed``), all ``diverged`` ones,
    every metric of a finished job (``metric_keys``, sorted) and a warning per job folder not counted because
    another folder ran the same job (``dropped``)."""

    dirs: list[Path]
    jobs: list[Job]
    swept_keys: list[str]
    fixed: dict[str, Any]
    groups: list[Group]
    failed: list[Job]
    metric_keys: list[str]
    diverged: list[Job] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def finished(self) -> list[Job]:
        return [j for j in self.jobs if j.finished]


def swept_keys(jobs: list[Job]) -> list[str]:
    """Override keys (never ``seed`` or ``hydra.*``) whose value differs between ``jobs``, sorted.

    A job without the override contributes its config/choice value (:meth:`Job.value`); a job that
    cannot tell (crashed before writing any config) contributes nothing."""
    keys = sorted({k for j in jobs for k in j.overrides if k != SEED_KEY and not k.startswith("hydra.")})
    return [k for k in keys if len({_hashable(j.value(k)) for j in jobs if j.knows(k)}) > 1]


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)


def group_jobs(jobs: list[Job], keys: list[str]) -> tuple[list[Group], list[Job]]:
    """Group ``jobs`` by their values of ``keys``; return (groups with a finished or diverged job,
    crashed/unfinished jobs). A group's :class:`Stat` of a metric holds its finished seeds' values and one
    non-finite value per diverged seed (what a diverged run logged is not its result)."""
    by_key: dict[tuple, Group] = {}
    for j in jobs:
        values = {k: _hashable(j.value(k)) for k in keys}
        g = by_key.setdefault(tuple(values.values()), Group(values=values))
        (g.jobs if j.finished else g.diverged if j.diverged else g.failed).append(j)
    groups = [g for g in by_key.values() if g.jobs or g.diverged]
    groups.sort(key=lambda g: tuple(value_sort_key(v) for v in g.key))
    all_names = sorted({m for j in jobs if j.finished for m in j.metrics})
    for g in groups:
        names = sorted({m for j in g.jobs for m in j.metrics}) if g.jobs else all_names
        g.stats = {
            m: s
            for m in names
            if (s := Stat.of([j.metrics[m] for j in g.jobs if m in j.metrics] + [math.nan] * len(g.diverged)))
            is not None
        }
        counted = g.jobs + g.diverged
        roles = sorted({r for j in counted for r in j.params})
        g.params = {r: fmean(j.params[r] for j in counted if r in j.params) for r in roles}
    failed = [j for j in jobs if not j.finished and not j.diverged]
    return groups, failed


def aggregate_jobs(jobs: list[Job], dirs: list[Path] | None = None) -> Sweep:
    """Build a :class:`Sweep` from already-loaded jobs. Raises NoJobsError: ``jobs`` is empty."""
    if not jobs:
        raise NoJobsError("no jobs")
    keys = swept_keys(jobs)
    jobs, dropped = drop_duplicate_runs(jobs, keys)
    shared = [k for k in sorted({k for j in jobs for k in j.overrides}) if k not in keys and k != SEED_KEY]
    fixed = {k: jobs[0].value(k) for k in shared}
    groups, failed = group_jobs(jobs, keys)
    metric_keys = sorted({m for j in jobs if j.finished for m in j.metrics})
    diverged = [j for j in jobs if j.diverged]
    return Sweep(list(dirs or []), jobs, keys, fixed, groups, failed, metric_keys, diverged, dropped)


def drop_duplicate_runs(jobs: list[Job], keys: list[str]) -> tuple[list[Job], list[str]]:
    """Count each run of a setting once: of two job folders with the same swept values and the same
    seed (a sweep given twice under different names, a rerun copied beside the original), the first
    finished one is kept (else the first) and the other is dropped with a warning naming both
    (wandb#6614: pooled runs counted twice narrow every interval). Returns ``(kept, warnings)``."""
    kept: dict[tuple, Job] = {}  # in the order first seen
    warnings: list[str] = []
    for j in jobs:
        ident = (tuple(fmt_value(j.value(k)) for k in keys), fmt_value(j.seed))
        if j.seed is None:  # a job that crashed before writing its config: nothing to match it on
            ident = ("path", str(j.path))
        first = kept.setdefault(ident, j)
        if first is j:
            continue
        keep, drop = (j, first) if (j.finished and not first.finished) else (first, j)
        kept[ident] = keep
        setting = ", ".join(f"{k}={fmt_value(j.value(k))}" for k in keys) or "the same setting"
        warnings.append(
            f"{drop.path} and {keep.path} are two folders of the same job ({setting}, seed {fmt_value(j.seed)}): "
            f"counted once, from {keep.path}. Fix: report only one of them (a copy or a rerun with the same "
            f"seed adds no information; a rerun needs another seed to count)"
        )
        log.warning("%s", warnings[-1])
    return list(kept.values()), warnings


def aggregate(dirs: list[Path | str]) -> Sweep:
    """Find, load and group every job below ``dirs`` (pooled into one sweep).

    Raises:
        NoJobsError: a folder does not exist or holds no job (the message names it).
    """
    paths = [Path(d) for d in dirs]
    return aggregate_jobs(load_dirs(paths), paths)


def load_dirs(dirs: list[Path], without_jobs: Callable[[Path], list[Job] | None] = lambda _d: None) -> list[Job]:
    """The jobs below ``dirs``, each job folder read once however many given paths reach it (``sweep`` and
    ``sweep/3``, a symlink); ``without_jobs(d)`` gives the jobs of a folder with no job folder below it
    (``None``: it holds none).

    Raises:
        NoJobsError: a folder does not exist or holds no job (the message names it).
    """
    jobs: list[Job] = []
    seen: set[Path] = set()
    for d in dirs:
        if not d.is_dir():
            raise NoJobsError(f"{d}: no such directory")
        found = find_job_dirs(d)
        other = None if found else without_jobs(d)
        if not found and other is None:
            raise NoJobsError(
                f"{d}: no jobs found (no metrics.json or .hydra/overrides.yaml below it, "
                f"and not a report folder with jobs.json)"
            )
        jobs += other or []
        for p in found:
            if (real := p.resolve()) not in seen:
                seen.add(real)
                jobs.append(load_job(p))
    return jobs


# -- logged history -----------------------------------------------------------------------------
#: Added to the ``step`` of Lightning's CSV rows to count optimizer steps done (see :func:`read_curves`).
LIGHTNING_STEP_OFFSET = 1


def read_curves(
    job: Job, keys: Iterable[str] | None = ("train/loss", "val/loss")
) -> dict[str, tuple[list[float], list[float]]]:
    """``{metric: (steps, values)}`` for ``keys`` (``None``: every column) from the job's ``csv/metrics.csv``
    (Lightning's CSVLogger: sparse rows, empty cells skipped; non-finite values kept). Missing file → ``{}``.

    Steps are optimizer steps done: Lightning labels the rows logged after the k-th update ``k - 1``, shifted
    by one here, so the validation after 250 updates is at step 250, as ``trainer.max_steps`` counts."""
    wanted = None if keys is None else list(keys)
    if job.curves is not None:
        return {k: v for k, v in job.curves.items() if wanted is None or k in wanted}
    out: dict[str, tuple[list[float], list[float]]] = {}
    try:
        with (job.path / "csv" / "metrics.csv").open(newline="") as fh:
            reader = csv.DictReader(fh)
            for row in reader:
                for k in reader.fieldnames if wanted is None else wanted:
                    try:  # an empty cell (Lightning's CSV rows are sparse) is no point
                        s, v = float(row.get("step") or ""), float(row.get(k) or "")
                    except ValueError:
                        continue
                    xs, ys = out.setdefault(k, ([], []))
                    xs.append(s + LIGHTNING_STEP_OFFSET)
                    ys.append(v)
    except (OSError, csv.Error, UnicodeDecodeError):
        return {}
    return out


MAIN_METRICS = tuple("val/loss val/ppl val/acc val/bleu val/exact_match test/loss test/bleu test/exact_match".split())


def main_metrics(sweep: Sweep, first: str | None = None, limit: int = 10) -> list[str]:
    """The metrics worth a table column: ``first`` (if present), then :data:`MAIN_METRICS`, then the
    ``test/bleu@*`` / ``test/exact_match@*`` length splits; at most ``limit``, in that order."""
    keys = [first] if first and first in sweep.metric_keys else []
    keys += [m for m in MAIN_METRICS if m in sweep.metric_keys]
    keys += [m for m in sweep.metric_keys if m.startswith(("test/bleu@", "test/exact_match@"))]
    return list(dict.fromkeys(keys))[:limit]
