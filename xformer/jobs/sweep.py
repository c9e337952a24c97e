"""Sweep-level behaviour of ``run.py -m`` (docs/scaling.md): every job's config checked before the first starts
(:func:`check_sweep`), each job's entry in ``<sweep dir>/.xformer/jobs/<num>.json``, ``sweep_summary.json`` at
the end, and a sweep stopped by Ctrl-C or SIGTERM ended with the command that continues it."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from xformer.config.checkpoint import runtime_keys
from xformer.config.overrides import key_of, override_values
from xformer.errors import ConfigError

from .distributed import env_rank
from .overrides import sweep_resume_command
from .record import RunRecord, Status, finite_or_none, write_json
from .sweep_resume import config_diff

if TYPE_CHECKING:
    from .context import JobContext, Outcome

log = logging.getLogger("xformer")

JOBS_DIR = ".xformer/jobs"
SUMMARY_FILE = "sweep_summary.json"


def record_job(cfg: DictConfig, ctx: JobContext, end: Outcome, record: RunRecord | None) -> None:
    """Write the sweep's entry for the job that just ended (rank 0), from its run record when it trained."""
    if env_rank() != 0:  # submitit/srun with several tasks per job: rank 0 reports
        return
    status = record.status if record is not None else end.status
    error = record.error if record is not None else (end.message if end.error is not None else None)
    value = record.objective.get("value") if record is not None else None
    value = value if value is None or finite_or_none(value) is not None else str(value)  # NaN as text
    rec: dict[str, Any] = {
        "num": ctx.num,
        "overrides": list(ctx.overrides),
        "status": str(status),
        "objective": {"metric": OmegaConf.select(cfg, "objective.metric"), "value": value},
        "output_dir": str(ctx.out_dir),
        "error": error,
    }
    if ctx.plan is not None and ctx.plan.action != "refuse":
        rec["resume"] = {"skip": "skipped", "resume": "resumed"}.get(ctx.plan.action, "new")
    if record is not None and (wandb := record.job.get("wandb")):
        rec["wandb"] = {k: wandb.get(k) for k in ("id", "name", "group")}
    write_json(ctx.sweep_dir / JOBS_DIR / f"{ctx.num}.json", rec, indent=2)


def stop_sweep(cfg: DictConfig, ctx: JobContext, end: Outcome) -> None:
    """End the sweep after a job stopped by Ctrl-C or SIGTERM (Hydra's ``on_multirun_end`` does not run): write
    ``sweep_summary.json`` and log the command that continues it; SLURM's requeue signal ends nothing."""
    if getattr(end.error, "stop_signal", None) not in (None, "SIGTERM", "SIGINT"):  # SLURM's requeue signal
        return
    try:
        write_sweep_summary(ctx.sweep_dir, cfg, HydraConfig.get().sweeper, exit_on_failure=False)
    except Exception as err:  # never let the summary keep the sweep from stopping
        log.warning("could not write the sweep summary: %s", err)
    command = sweep_resume_command(HydraConfig.instance().cfg)
    log.warning("sweep stopped (exit %d); resume the whole sweep with: %s", end.exit_code, command)


def write_sweep_summary(sweep_dir: Path, cfg: DictConfig, sweeper: Any, exit_on_failure: bool = True) -> None:
    """Write ``<sweep_dir>/sweep_summary.json`` from the job records and print it; exit 1 (``exit_on_failure``)
    when a job failed or, outside a dry run, no job that ended produced an objective value (docs/scaling.md,
    "Failing jobs and the sweep summary"). ``sweeper``: ``hydra.sweeper``, which may name an Optuna study."""
    jobs = []
    for f in sorted((sweep_dir / JOBS_DIR).glob("*.json"), key=lambda p: int(p.stem)):
        with contextlib.suppress(OSError, ValueError):
            jobs.append(json.loads(f.read_text()))
    failed = [j for j in jobs if j["status"] == Status.FAILED]
    dry = bool(OmegaConf.select(cfg, "sweep.dry_run", default=False))
    valued = [j for j in jobs if finite_or_none(j["objective"]["value"]) is not None]
    # nothing for a sweeper to pick from; a job stopped by a signal has not ended and resumes
    ended = any(j["status"] not in (Status.INTERRUPTED, Status.PREEMPTED) for j in jobs)
    no_value = ended and not dry and not valued
    summary: dict[str, Any] = {
        "sweep_dir": str(sweep_dir),
        "n_jobs": len(jobs),
        "n_failed": len(failed),
        "n_diverged": sum(j["status"] == Status.DIVERGED for j in jobs),  # an outcome (NaN loss), not a crash
        "n_with_objective": len(valued),
        "objective": {k: OmegaConf.select(cfg, f"objective.{k}") for k in ("metric", "mode")},
        "jobs": jobs,
    }
    if sweeper is not None and "storage" in sweeper:
        summary["optuna"] = {"study_name": sweeper.get("study_name"), "storage": None if dry else sweeper["storage"]}
    if no_value:
        summary["error"] = (
            f"no job produced a value of {summary['objective']['metric']}: every job failed "
            f"or its objective was NaN/missing (see the jobs' status and error)"
        )
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str))
    print(format_summary(summary), flush=True)
    if (failed or no_value) and exit_on_failure:
        sys.exit(1)


def format_summary(summary: dict) -> str:
    """The summary as a text table (one line per job)."""
    metric = summary["objective"]["metric"]
    diverged = f", {summary['n_diverged']} diverged" if summary.get("n_diverged") else ""
    path = Path(summary["sweep_dir"]) / SUMMARY_FILE
    common = set.intersection(*(set(j["overrides"]) for j in summary["jobs"])) if len(summary["jobs"]) > 1 else set()
    lines = [f"sweep summary: {summary['n_jobs']} jobs, {summary['n_failed']} failed{diverged} -> {path}"]
    lines.append(
        f"  {'#':>3}  {'status':<9}  {metric:>12}  overrides" + (" (beyond the shared ones)" if common else "")
    )
    for j in summary["jobs"]:
        value = j["objective"]["value"]
        shown = f"{value:.4g}" if isinstance(value, (int, float)) else ("-" if value is None else str(value))
        extra = f"  [{j['error']}]" if j.get("error") else ""
        if j.get("resume") in ("skipped", "resumed"):
            extra += "  (finished earlier, skipped)" if j["resume"] == "skipped" else "  (resumed from last.ckpt)"
        own = " ".join(o for o in j["overrides"] if o not in common)
        lines.append(f"  {j['num']:>3}  {j['status']:<9}  {shown:>12}  {own}{extra}")
    if summary.get("error"):
        lines.append(f"error: {summary['error']}")
    return "\n".join(lines)


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The overrides of every job of multirun ``config`` in Hydra's ``BasicSweeper`` order, so job numbers match;
    an ``interval(a, b)`` gives both ends."""
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    lines = [f"{k}={v}" for k, v in params.items()] if isinstance(params, DictConfig) else []
    lines += list(config.hydra.overrides.task)
    per_key: dict[str, list[str]] = {}
    for ov in OverridesParser.create().parse_overrides(lines):
        key = ov.get_key_element()
        if ov.is_delete() and ov.value() is None:  # ~key
            per_key[key] = [key]
            continue
        if ov.is_discrete_sweep():
            values = list(ov.sweep_string_iterator())
        elif ov.is_interval_sweep():
            ends = [ov.value().start, ov.value().end]
            values = [str(v) if all(isinstance(e, int) for e in ends) else repr(float(v)) for v in ends]
        else:
            values = [ov.get_value_element_as_str()]
        per_key[key] = [f"{key}={v}" for v in values]  # a later override of a key replaces it in place
    return [list(job) for job in itertools.product(*per_key.values())]


def _swept(jobs: list[list[str]]) -> list[list[str]]:
    """Each job's overrides of the keys that vary across the sweep (all of them for one job)."""
    if len(jobs) < 2:
        return jobs
    varying = [i for i in range(len(jobs[0])) if len({job[i] for job in jobs}) > 1]
    return [[job[i] for i in varying] for job in jobs]


def check_sweep(config: DictConfig) -> tuple[int, list[tuple[int, list[str], BaseException]]]:
    """Compose and check every job; return ``(number of jobs, [(job number, swept overrides, error)])``."""
    from xformer.config.check import check_config
    from xformer.data.errors import DataError

    loader = GlobalHydra.instance().config_loader()
    jobs = sweep_jobs(config)
    shown = _swept(jobs)
    bad, level = [], log.level
    log.setLevel(logging.WARNING)  # the data's and the conversion's lines: each job says its own when it runs
    try:
        for num, overrides in enumerate(jobs):
            try:
                check_config(loader.load_sweep_config(config, overrides))
            except Exception as err:  # also Hydra's and OmegaConf's composition errors (bad group option, missing key)
                if not isinstance(err, (ConfigError, DataError)) and not type(err).__module__.startswith(
                    ("hydra", "omegaconf")
                ):
                    raise
                bad.append((num, shown[num], err))
    finally:
        log.setLevel(level)
    return len(jobs), bad


def sweep_mismatches(config: DictConfig, recorded: dict) -> tuple[int, list] | None:
    """``(number of jobs, [(num, overrides, diff)])`` for the jobs whose folder records another config, or None
    when the sweeper's jobs cannot be listed in advance (Optuna: each job checks itself)."""
    if "BasicSweeper" not in str(OmegaConf.select(config, "hydra.sweeper._target_", default="")):
        return None
    loader = GlobalHydra.instance().config_loader()
    bad, jobs = [], sweep_jobs(config)
    shown = _swept(jobs)
    for num, overrides in enumerate(jobs):
        rec = recorded.get(str(num))
        if rec is None:
            continue
        job_cfg = loader.load_sweep_config(config, list(overrides))
        if diff := config_diff(rec, job_cfg, runtime_keys(job_cfg)):
            bad.append((num, shown[num], diff))
    return len(jobs), bad


def error_lines(n_jobs: int, bad: list[tuple[int, list[str], BaseException]], max_listed: int = 20) -> list[str]:
    """One ``error:`` line per distinct problem of the invalid jobs ``bad`` (a problem every job shares is one
    line), at most ``max_listed``, then a count."""
    by_problem: dict[str, list[tuple[int, list[str]]]] = {}
    for num, overrides, err in bad:
        by_problem.setdefault(" ".join(str(err).replace("\nerror: ", "; ").split()), []).append((num, overrides))
    if len(by_problem) == 1 and len(bad) == n_jobs:
        return [f"error: {next(iter(by_problem))} (all {n_jobs} sweep jobs; nothing was run)"]
    lines = []
    for msg, jobs in list(by_problem.items())[:max_listed]:
        num, overrides = jobs[0]
        more = f" and {len(jobs) - 1} more job{'s' if len(jobs) > 2 else ''}" if len(jobs) > 1 else ""
        lines.append(f"error: sweep job {num} ({' '.join(overrides) or 'defaults'}){more}: {msg}")
    if len(by_problem) > max_listed:
        lines.append(f"error: ... and {len(by_problem) - max_listed} more problems")
    lines.append(
        f"error: {len(bad)} of {n_jobs} sweep jobs have an invalid config; nothing was run. "
        "Fix the overrides above (HYDRA_FULL_ERROR=1 shows a stack trace)"
    )
    return lines


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def report_needs(config: DictConfig) -> str | None:
    """One line saying what ``xformer report`` needs to decide multirun ``config`` (:mod:`xformer.verdict_needs`)
    when its jobs have fewer seeds or second-half validations, with the overrides that give them; ``None`` when
    they have enough, compare no settings, or cannot be listed up front (Optuna); a job whose budget or interval
    counts the data's epochs adds no validation count (its steps come with its data)."""
    from xformer import verdict_needs as need

    if "BasicSweeper" not in str(OmegaConf.select(config, "hydra.sweeper._target_", default="")):
        return None
    if OmegaConf.select(config, "mode", default="train") != "train":
        return None
    base_seed = OmegaConf.select(config, "seed", default=0)
    settings: dict[tuple[str, ...], list[Any]] = {}  # the seeds of each setting
    late_counts = []
    for job in sweep_jobs(config):
        values = override_values(job)
        settings.setdefault(tuple(o for o in job if key_of(o) != "seed"), []).append(values.get("seed", base_seed))

        def get(key: str, values: dict = values) -> Any:
            return values[key] if key in values else OmegaConf.select(config, key, default=None)

        max_steps, interval = _int(get("trainer.max_steps")), _int(get("trainer.val_check_interval"))
        if max_steps is None or interval is None or max_steps <= 0:
            continue
        if (_int(get("trainer.max_epochs")) or 0) > 0 or get("trainer.check_val_every_n_epoch") is not None:
            continue  # counted in the data's epochs: its steps are known once its data is (xformer.config.steps)
        dense = (_int(get("val_dense.every")), _int(get("val_dense.until")) or 0)
        late = need.late_validations(need.validation_steps(max_steps, interval, *dense))
        late_counts.append((len(late), late, max_steps, dense))
    if len(settings) < 2:
        return None
    seeds = min(len(set(s)) for s in settings.values())
    fix, has = [], [f"{seeds} seed{'s' if seeds != 1 else ''} per setting"]
    if seeds < need.MIN_SEEDS:
        used = list(dict.fromkeys(s for ss in settings.values() for s in ss))
        start = max((s for s in used if isinstance(s, int)), default=-1) + 1
        fix.append(f"seed={','.join(map(str, [*used, *range(start, start + need.MIN_SEEDS - len(used))]))}")
    if late_counts:
        n, late, max_steps, dense = min(late_counts, key=lambda c: c[0])
        has.append(f"{n} second-half validation{'s' if n != 1 else ''} ({', '.join(map(str, late)) or 'none'})")
        if n < need.MIN_LATE_VALIDATIONS and (interval := need.interval_for(max_steps, *dense)) is not None:
            fix.append(f"trainer.val_check_interval={interval}")
    if not fix:
        return None
    return (
        f"report: a verdict on this sweep needs ≥ {need.MIN_SEEDS} seeds per setting and ≥ "
        f"{need.MIN_LATE_VALIDATIONS} validations in the second half of training; it has {', '.join(has)}. For a "
        f"sweep `xformer report` can decide, add: {' '.join(fix)}"
    )
