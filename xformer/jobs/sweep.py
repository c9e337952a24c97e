"""Sweep-level behaviour of ``run.py -m``: each job records itself in ``<sweep dir>/.xformer/jobs/<num>.json``
when it ends, :class:`~.hydra_callbacks.SweepSummary` writes and prints ``sweep_summary.json`` at the end,
and a job stopped by Ctrl-C or SIGTERM ends the sweep with the command that continues it."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from .overrides import sweep_resume_command
from .record import RunRecord, Status, finite_or_none

if TYPE_CHECKING:
    from .context import JobContext, Outcome

log = logging.getLogger("xformer")

JOBS_DIR = ".xformer/jobs"
SUMMARY_FILE = "sweep_summary.json"


def record_job(cfg: DictConfig, ctx: JobContext, end: Outcome, record: RunRecord | None) -> None:
    """Write the sweep's entry for the job that just ended (rank 0): status and error from its run record when
    it trained, else from ``end``."""
    from .distributed import env_rank

    if env_rank() != 0:  # submitit/srun with several tasks per job: rank 0 reports
        return
    status = record.status if record is not None else end.status
    error = record.error if record is not None else (end.message if end.error is not None else None)
    value = record.objective.get("value") if record is not None else None
    rec: dict[str, Any] = {
        "num": ctx.num,
        "overrides": list(ctx.overrides),
        "status": str(status),
        "objective": {
            "metric": OmegaConf.select(cfg, "objective.metric"),
            "value": value if value is None or finite_or_none(value) is not None else str(value),
        },
        "output_dir": str(ctx.out_dir),
        "error": error,
    }
    if ctx.plan is not None and ctx.plan.action != "refuse":
        rec["resume"] = ctx.plan.decision
    if record is not None and (wandb := record.job.get("wandb")):
        rec["wandb"] = {k: wandb.get(k) for k in ("id", "name", "group")}
    jobs = ctx.sweep_dir / JOBS_DIR
    jobs.mkdir(parents=True, exist_ok=True)
    tmp = jobs / f".{ctx.num}.json.{os.getpid()}"
    tmp.write_text(json.dumps(rec, indent=2, default=str))
    tmp.replace(jobs / f"{ctx.num}.json")


def stop_sweep(cfg: DictConfig, ctx: JobContext, code: int) -> None:
    """End the sweep after a job stopped by Ctrl-C or SIGTERM (Hydra's ``on_multirun_end`` does not run): write
    ``sweep_summary.json`` for what ran and log the command that continues the sweep."""
    from hydra.core.hydra_config import HydraConfig

    try:
        write_sweep_summary(ctx.sweep_dir, cfg, HydraConfig.get().sweeper, exit_on_failure=False)
    except Exception as err:  # never let the summary keep the sweep from stopping
        log.warning("could not write the sweep summary: %s", err)
    command = sweep_resume_command(HydraConfig.instance().cfg)
    log.warning("sweep stopped (exit %d); resume the whole sweep with: %s", code, command)


def write_sweep_summary(sweep_dir: Path, cfg: DictConfig, sweeper: Any, exit_on_failure: bool = True) -> None:
    """Write ``<sweep_dir>/sweep_summary.json`` from the job records and print it; exit 1 (``exit_on_failure``)
    when a job failed (a diverged job is an outcome, not a failure) or, outside a dry run, no job produced an
    objective value. ``sweeper`` (``hydra.sweeper``) names an Optuna study."""
    jobs = []
    for f in sorted((sweep_dir / JOBS_DIR).glob("*.json"), key=lambda p: int(p.stem)):
        try:
            jobs.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    failed = [j for j in jobs if j["status"] == Status.FAILED]
    diverged = [j for j in jobs if j["status"] == Status.DIVERGED]  # an outcome (NaN loss), not a crash
    dry = bool(OmegaConf.select(cfg, "sweep.dry_run", default=False))
    valued = [j for j in jobs if finite_or_none(j["objective"]["value"]) is not None]
    no_value = bool(jobs) and not dry and not valued  # nothing for a sweeper to pick from
    summary: dict[str, Any] = {
        "sweep_dir": str(sweep_dir),
        "n_jobs": len(jobs),
        "n_failed": len(failed),
        "n_diverged": len(diverged),
        "n_with_objective": len(valued),
        "objective": {
            "metric": OmegaConf.select(cfg, "objective.metric"),
            "mode": OmegaConf.select(cfg, "objective.mode"),
        },
        "jobs": jobs,
    }
    if sweeper is not None and "storage" in sweeper:
        summary["optuna"] = {
            "study_name": sweeper.get("study_name"),
            "storage": None if dry else sweeper.get("storage"),
        }
    if no_value:
        summary["error"] = (
            f"no job produced a value of {summary['objective']['metric']}: every job failed "
            f"or its objective was NaN/missing (see the jobs' status and error)"
        )
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str))
    print(format_summary(summary), flush=True)
    if (failed or no_value) and exit_on_failure:
        sys.stdout.flush()
        sys.exit(1)


def format_summary(summary: dict) -> str:
    """The summary as a text table (one line per job)."""
    metric = summary["objective"]["metric"]
    diverged = f", {summary['n_diverged']} diverged" if summary.get("n_diverged") else ""
    head = (
        f"sweep summary: {summary['n_jobs']} jobs, {summary['n_failed']} failed{diverged} -> "
        f"{Path(summary['sweep_dir']) / SUMMARY_FILE}"
    )
    common = set.intersection(*(set(j["overrides"]) for j in summary["jobs"])) if len(summary["jobs"]) > 1 else set()
    lines = [
        head,
        f"  {'#':>3}  {'status':<9}  {metric:>12}  overrides" + (" (beyond the shared ones)" if common else ""),
    ]
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
