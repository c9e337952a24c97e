"""Sweep-level behaviour of ``run.py -m``: a summary of every job, failures that do not stop the
sweep, and dry runs.

* :class:`~.hydra_callbacks.SweepSummary` (a Hydra callback, registered in ``conf/hydra/default.yaml``) records each
  job when it ends -- job number, overrides, status, objective, output folder, W&B run, error -- in
  ``<sweep dir>/.xformer/jobs/<num>.json``, and at the end of the sweep writes
  ``<sweep dir>/sweep_summary.json`` and prints it as a table. A job that raised is logged with its
  traceback and handed back to the sweeper as a finished job without a value (``None``), so the
  remaining jobs and batches run and Optuna records a failed trial; after the summary is printed the
  sweep exits with status 1 if any job failed (crashed; a job whose loss diverged is an outcome, counted
  as ``n_diverged``, not a failure), or if no job produced an objective value (e.g. every
  Optuna trial failed or was NaN; a dry run is exempt). The summary is written in every case
  (:func:`guard_optuna_sweep` keeps Optuna from ending the sweep early when no trial completed).
* :func:`dry_run` (``sweep.dry_run=true``) validates one job's configuration and prints its overrides
  instead of training; with ``-m`` it covers every job of the sweep.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobStatus
from omegaconf import DictConfig, OmegaConf

from .overrides import key_of

log = logging.getLogger("xformer")

JOBS_DIR = ".xformer/jobs"
SUMMARY_FILE = "sweep_summary.json"


def _hydra_info() -> dict:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {"num": None, "overrides": [], "output_dir": None, "multirun": False}
    hc = HydraConfig.get()
    multirun = str(hc.mode) == "RunMode.MULTIRUN"
    return {
        "num": hc.job.num if multirun else None,
        "overrides": list(hc.overrides.task),
        "output_dir": hc.runtime.output_dir,
        "multirun": multirun,
    }


def dry_run(cfg: DictConfig) -> None:
    """Validate ``cfg`` without reading data or training, and print the job's overrides.

    Runs :func:`xformer.jobs.config_check.stages.check_config` (model built on the meta device, optimiser, loss,
    decoding, objective, checkpoint) and resolves the whole config.

    Raises:
        ConfigError: as ``check_config``; under ``-m`` the job is listed as failed in the summary.
    """
    from xformer.jobs.config_check.stages import check_config

    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    check_config(cfg)
    info = _hydra_info()
    label = f"job {info['num']}" if info["multirun"] else "run"
    print(f"[dry run] {label}: {' '.join(info['overrides']) or '(defaults)'} -> config ok", flush=True)
    return None


def _float_or_none(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def jobs_dir(config: DictConfig) -> Path:
    """The folder of the per-job records of the sweep ``config`` describes."""
    return Path(str(config.hydra.sweep.dir)) / JOBS_DIR


def record_interrupted(config: DictConfig, code: int) -> None:
    """A job stopped by Ctrl-C or SIGTERM ends the sweep without ``on_multirun_end``: record the job
    (status and error from its ``metrics.json``) and write ``sweep_summary.json`` for what ran."""
    from types import SimpleNamespace

    ret = SimpleNamespace(overrides=list(config.hydra.overrides.task), status=None, _return_value=None)
    rec = job_record(config, ret)
    jobs = jobs_dir(config)
    jobs.mkdir(parents=True, exist_ok=True)
    (jobs / f"{rec['num']}.json").write_text(json.dumps(rec, default=str))
    write_sweep_summary(config, exit_on_failure=False)
    log.warning("sweep stopped (exit %d); resume the whole sweep with: %s", code, sweep_resume_command(config))


def job_record(config: DictConfig, job_return: Any) -> dict:
    """The summary entry of one finished job (see :class:`~.hydra_callbacks.SweepSummary`)."""
    hc = config.hydra
    out_dir = Path(str(hc.runtime.output_dir))
    metric = OmegaConf.select(config, "objective.metric")
    rec: dict[str, Any] = {
        "num": int(hc.job.num),
        "overrides": list(job_return.overrides or []),
        "status": "finished",
        "objective": {"metric": metric, "value": None},
        "output_dir": str(out_dir),
        "error": None,
    }
    if job_return.status == JobStatus.FAILED:
        err = job_return._return_value
        rec["status"] = "failed"
        rec["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    else:
        rec["objective"]["value"] = _float_or_none(job_return._return_value)
        if OmegaConf.select(config, "sweep.dry_run"):
            rec["status"] = "validated"
    from .sweep_resume import DECISIONS, read_metrics

    if rec["num"] in DECISIONS:  # skipped (finished earlier), resumed (from last.ckpt) or new
        rec["resume"] = DECISIONS.pop(rec["num"])
    metrics = read_metrics(out_dir)
    if metrics is not None:
        if metrics.get("status") in ("failed", "preempted", "diverged", "interrupted"):
            rec["status"] = metrics["status"]
            rec["error"] = rec["error"] or metrics.get("error")
        wandb = (metrics.get("job") or {}).get("wandb")
        if wandb:
            rec["wandb"] = {k: wandb.get(k) for k in ("id", "name", "group")}
        value = (metrics.get("objective") or {}).get("value")
        if rec["objective"]["value"] is None and value is not None:
            rec["objective"]["value"] = value if _float_or_none(value) is not None else str(value)
    return rec


def sweep_resume_command(config: DictConfig) -> str:
    """The command that continues the sweep this job belongs to: the sweep's own overrides (from its
    ``multirun.yaml``, as typed) into the same ``hydra.sweep.dir``, with ``-m``: finished jobs are
    skipped and an interrupted one continues from its ``last.ckpt`` (:mod:`xformer.jobs.sweep_resume`)."""
    import shlex

    sweep_dir = Path(str(config.hydra.sweep.dir))
    overrides: list[str] = []
    try:
        recorded = OmegaConf.load(sweep_dir / "multirun.yaml")
        overrides = [str(o) for o in OmegaConf.select(recorded, "hydra.overrides.task", default=[]) or []]
    except Exception:  # no multirun.yaml (yet): this job's own overrides
        overrides = list(config.hydra.overrides.task)
    overrides = [o for o in overrides if key_of(o) != "hydra.sweep.dir"]
    script = sys.argv[0] if sys.argv and sys.argv[0].endswith(".py") else "run.py"
    sweep = shlex.quote(f"hydra.sweep.dir={sweep_dir}")
    return " ".join(["python", shlex.quote(script), *map(shlex.quote, overrides), sweep, "-m"])


def write_sweep_summary(config: DictConfig, exit_on_failure: bool = True) -> None:
    """Write ``<sweep dir>/sweep_summary.json`` from the job records and print it (see
    :class:`~.hydra_callbacks.SweepSummary`)."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    jobs = []
    for f in sorted(jobs_dir(config).glob("*.json"), key=lambda p: int(p.stem)):
        try:
            jobs.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    failed = [j for j in jobs if j["status"] == "failed"]
    diverged = [j for j in jobs if j["status"] == "diverged"]  # an outcome (NaN loss), not a crash
    dry = bool(OmegaConf.select(config, "sweep.dry_run", default=False))
    valued = [j for j in jobs if _float_or_none(j["objective"]["value"]) is not None]
    no_value = bool(jobs) and not dry and not valued  # nothing for a sweeper to pick from
    summary: dict[str, Any] = {
        "sweep_dir": str(sweep_dir),
        "n_jobs": len(jobs),
        "n_failed": len(failed),
        "n_diverged": len(diverged),
        "n_with_objective": len(valued),
        "objective": {
            "metric": OmegaConf.select(config, "objective.metric"),
            "mode": OmegaConf.select(config, "objective.mode"),
        },
        "jobs": jobs,
    }
    sweeper = OmegaConf.select(config, "hydra.sweeper")
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


_OPTUNA_GUARD: dict[str, Any] = {}


def guard_optuna_sweep(dry_run: bool) -> None:
    """Make hydra-optuna-sweeper end a sweep normally when no trial completed, and keep dry runs out
    of the study's database.

    The plugin asks ``study.best_trial`` after the last trial, which raises ``ValueError`` ("No trials
    are completed yet.") when every trial failed or returned no value -- always the case for a dry run,
    whose jobs only validate. Hydra then skips ``on_multirun_end``: no ``sweep_summary.json``, exit 1
    with Optuna's message. The plugin has no option for this, so its ``sweep`` is wrapped (once per
    process): that one error is logged as a warning and the sweep returns, so :class:`~.hydra_callbacks.SweepSummary`
    writes the summary and sets the exit status. With ``dry_run`` the study is kept in memory
    (``storage=None``), so validating a search never adds FAILED trials to a stored study. With a
    stored study the job numbers start at its trial count (:func:`_stored_trials`): job folder ``n``
    is trial ``n`` also when a study is resumed into the same sweep folder.
    """
    _OPTUNA_GUARD["dry_run"] = dry_run
    try:
        from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl
    except ImportError:  # the plugin is not installed: Hydra reports that itself
        return
    if getattr(OptunaSweeperImpl.sweep, "_xformer_guarded", False):
        return
    plugin_sweep = OptunaSweeperImpl.sweep

    def sweep(self, arguments: list[str]) -> None:
        if _OPTUNA_GUARD.get("dry_run"):
            self.storage = None
        elif self.storage:
            self.job_idx = _stored_trials(self.study_name, self.storage)
            self.sampler = continued_sampler(self.sampler, _OPTUNA_GUARD.get("sampler"), self.job_idx)
        try:
            return plugin_sweep(self, arguments)
        except ValueError as err:
            if "No trials are completed yet" not in str(err):
                raise
            log.warning(
                "optuna: no trial completed (every trial failed or had no objective value), so "
                "the study has no best parameters; see the sweep summary"
            )
            return None

    sweep._xformer_guarded = True  # type: ignore[attr-defined]
    OptunaSweeperImpl.sweep = sweep


def continued_sampler(sampler: Any, sampler_cfg: Any, n_stored: int) -> Any:
    """The sampler for an invocation that continues a stored study of ``n_stored`` trials.

    A seeded sampler rebuilt with the same seed replays its random draws, so a resumed study's
    start-up trials repeated the first invocation's bit for bit (optuna#3255). With trials already
    stored, the sampler is instantiated again from ``sampler_cfg`` (``hydra.sweeper.sampler``) with the
    seed ``SeedSequence([seed, n_stored])``: reproducible for the same command on the same study, and
    different for every invocation. A fresh study (``n_stored == 0``), an unseeded sampler or one made
    later from the search space (``_partial_``: the grid sampler, which skips visited points itself)
    is returned as it is.
    """
    import functools

    if not n_stored or sampler_cfg is None or isinstance(sampler, functools.partial):
        return sampler
    seed = OmegaConf.select(sampler_cfg, "seed", default=None)
    if seed is None:
        return sampler
    import numpy as np
    from hydra.utils import instantiate

    new_seed = int(np.random.SeedSequence([int(seed), int(n_stored)]).generate_state(1)[0])
    log.info("optuna: the study has %d trials; sampler seed %d -> %d for this invocation", n_stored, seed, new_seed)
    return instantiate(sampler_cfg, seed=new_seed)


def _stored_trials(study_name: str | None, storage: Any) -> int:
    """Number of trials already in the stored study (0 when it does not exist yet).

    The plugin numbers a sweep's jobs from 0 in every invocation, while a resumed study numbers its
    trials after the stored ones; starting the job numbers there makes job folder ``<n>`` hold trial
    ``n``, so running the same command into the same ``hydra.sweep.dir`` adds folders instead of
    writing new trials over the earlier ones (one study process at a time).
    """
    import optuna

    try:
        summaries = optuna.study.get_all_study_summaries(storage=storage)
    except Exception:  # no database yet: the plugin creates it
        return 0
    return next((s.n_trials for s in summaries if s.study_name == study_name), 0)


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
