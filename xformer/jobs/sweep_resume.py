"""Resumable ``-m`` sweeps: the same command run again into the same ``hydra.sweep.dir`` continues
the sweep instead of starting it over.

Per job (its folder ``<sweep dir>/<hydra.job.num>``), decided by :func:`plan_job`:

* ``skip``: ``metrics.json`` says ``"status": "finished"`` -- nothing is trained; the job hands the
  recorded objective back to the sweeper and its record stays in the sweep summary and the report.
* ``resume``: the folder holds ``checkpoints/last.ckpt`` (a job killed, preempted or failed
  earlier) -- the job runs with ``ckpt_path=last``, which is exactly a resumed single run
  (:mod:`xformer.jobs.resume`: weights, optimizer, data position, CSV history, the same W&B run id).
* ``run``: the grid point never started (or stopped before its first checkpoint): trained from scratch.

Mixing configurations is refused where a job ran (:func:`ran`; a folder left by a job stopped before
training is reused). :class:`~xformer.jobs.hydra_callbacks.ResumeSweep` (a Hydra callback, registered in
``conf/hydra/default.yaml``) runs in ``on_multirun_start``, before any job starts and before Hydra
rewrites a job's ``.hydra/config.yaml``: it reads the config recorded in every existing job folder
(:data:`RECORDED_FILE` keeps a copy for the jobs), composes the config each job of this command gets
(the basic sweeper's grid order, :func:`xformer.jobs.sweep_check.sweep_jobs`), and exits 2 with one
``error:`` line when any job would land in a folder whose recorded config differs in anything but
the run-time keys (``sweep.runtime_keys``: checkpoint path, data root, loggers, ...). Sweepers that
cannot be enumerated (Optuna) are checked job by job in :func:`plan_job` against the same record.
``sweep.resume=false`` turns all of this off (every job runs again from scratch).

Job numbers are positions in the grid, so the same command maps each job to the same folder; a
changed grid (another value, another key) changes the numbers and is refused as a changed config.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .checkpoints import last_checkpoint

log = logging.getLogger("xformer")

#: The configs recorded in the job folders when this invocation started (``{num: config}``).
RECORDED_FILE = ".xformer/recorded_configs.json"
#: Keys compared by default when ``sweep.runtime_keys`` is absent.
DEFAULT_RUNTIME_KEYS = (
    "ckpt_path",
    "sweep",
    "paths",
    "data.root",
    "data.num_workers",
    "logger",
    "tags",
    "trainer.enable_progress_bar",
)

#: This process's decision per job number (read by :func:`xformer.jobs.sweep.job_record`).
DECISIONS: dict[int, str] = {}


@dataclass
class Plan:
    """What a sweep job does: ``action`` is ``skip``, ``resume`` or ``run``; ``value`` the recorded
    objective of a skipped job; ``checkpoint`` the ``last.ckpt`` a resumed job continues from."""

    action: str
    value: float | None = None
    checkpoint: Path | None = None


def runtime_keys(cfg: DictConfig | dict) -> list[str]:
    """``sweep.runtime_keys`` of ``cfg`` (dotted keys that may change between invocations)."""
    node = (
        OmegaConf.select(cfg, "sweep.runtime_keys")
        if isinstance(cfg, DictConfig)
        else (cfg.get("sweep") or {}).get("runtime_keys")
    )
    return list(node) if node is not None else list(DEFAULT_RUNTIME_KEYS)


def comparable(cfg: DictConfig | dict, ignore: list[str]) -> dict:
    """The unresolved task config as a flat ``{dotted key: value}`` dict without ``hydra`` and the
    ``ignore`` keys (a key also drops everything below it)."""
    tree = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            flat[prefix] = node

    walk({k: v for k, v in tree.items() if k != "hydra"}, "")
    return {k: v for k, v in flat.items() if not any(k == i or k.startswith(i + ".") for i in ignore)}


def config_diff(recorded: dict, current: DictConfig | dict, ignore: list[str]) -> list[tuple[str, Any, Any]]:
    """``[(key, recorded value, current value)]`` for every non-run-time key that differs (a key
    missing on one side reads ``<absent>``), sorted by key. A key missing on one side and ``null`` on
    the other is no difference: an option added since with a ``null`` default ("not set", e.g.
    ``model.d_qk``) leaves the job as it ran."""
    a, b = comparable(recorded, ignore), comparable(current, ignore)
    absent = "<absent>"
    out = []
    for k in sorted(set(a) | set(b)):
        old, new = a.get(k, absent), b.get(k, absent)
        if old != new and not (old is None and new == absent) and not (old == absent and new is None):
            out.append((k, old, new))
    return out


def describe_diff(diff: list[tuple[str, Any, Any]], limit: int = 3) -> str:
    """``optim.lr: 0.001 (recorded) -> 0.002 (now), ...`` for the first ``limit`` differences."""
    parts = [f"{k}: {old!r} (recorded) -> {new!r} (now)" for k, old, new in diff[:limit]]
    more = f" and {len(diff) - limit} more keys" if len(diff) > limit else ""
    return ", ".join(parts) + more


def read_metrics(job_dir: Path) -> dict | None:
    """The job's ``metrics.json`` as a dict: None when there is none, ``{}`` when it cannot be read
    (a run killed while writing it)."""
    path = Path(job_dir) / "metrics.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def ran(job_dir: Path) -> bool:
    """A job trained in ``job_dir``: it holds ``metrics.json`` (written when training starts) or a
    checkpoint. A folder of a job that stopped earlier (its config refused, an environment variable not
    set) holds only Hydra's ``.hydra/`` and ``run.log``."""
    return (Path(job_dir) / "metrics.json").is_file() or any((Path(job_dir) / "checkpoints").glob("*.ckpt"))


def recorded_config(job_dir: Path) -> dict | None:
    """The task config Hydra saved in ``<job_dir>/.hydra/config.yaml`` (unresolved), or None when
    there is none or no job :func:`ran` there (such a folder is reused by any config)."""
    path = job_dir / ".hydra" / "config.yaml"
    if not path.is_file() or not ran(job_dir):
        return None
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # an unreadable record is treated as a changed config
        return {"<unreadable>": str(path)}


def plan_job(cfg: DictConfig, out_dir: Path, recorded: dict | None) -> Plan:
    """Decide what the job with config ``cfg`` and folder ``out_dir`` does (module docstring).

    Args:
        recorded: the config recorded in ``out_dir`` when this sweep invocation started (None: the
            folder did not exist or held no job: the job runs).

    Raises:
        ConfigError: ``recorded`` differs from ``cfg`` in a non-run-time key.
    """
    from xformer.model import ConfigError

    if recorded is None:
        return Plan("run")
    diff = config_diff(recorded, cfg, runtime_keys(cfg))
    if diff:
        raise ConfigError(
            f"hydra.sweep.dir: the folder {out_dir} holds a job with another config "
            f"({describe_diff(diff)}); give the sweep a new hydra.sweep.dir, or the recorded values"
        )
    metrics = read_metrics(out_dir)
    if metrics is not None:
        if metrics.get("status") == "finished":
            value = (metrics.get("objective") or {}).get("value")
            try:
                value = float(value) if value is not None else None
            except (TypeError, ValueError):
                value = None
            return Plan("skip", value=value)
    last = last_checkpoint(out_dir)
    if cfg.get("mode", "train") == "train" and last.is_file():
        return Plan("resume", checkpoint=last)
    return Plan("run")


_RECORDED_CACHE: dict[str, tuple[float, dict]] = {}


def _recorded_for(sweep_dir: Path, num: int) -> dict | None:
    path = sweep_dir / RECORDED_FILE
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    key = str(path)
    if key not in _RECORDED_CACHE or _RECORDED_CACHE[key][0] != mtime:
        try:
            _RECORDED_CACHE[key] = (mtime, json.loads(path.read_text()))
        except (OSError, ValueError):
            return None
    return _RECORDED_CACHE[key][1].get(str(num))


def prepare_job(cfg: DictConfig) -> Plan | None:
    """Called by ``run.py`` before a job trains: under ``-m`` with ``sweep.resume`` (the default),
    plan the job (:func:`plan_job`) and, for ``resume``, set ``cfg.ckpt_path=last``. Also applies
    ``OMP_NUM_THREADS`` to torch's intra-op pool (launcher workers that set it per job).

    Returns:
        The plan, or None outside a multirun or with ``sweep.resume=false``.

    Raises:
        ConfigError: as :func:`plan_job`.
    """
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        if torch.get_num_threads() != int(threads):
            torch.set_num_threads(int(threads))
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or not OmegaConf.select(cfg, "sweep.resume", default=True):
        return None
    hc = HydraConfig.get()
    if str(hc.mode) != "RunMode.MULTIRUN":
        return None
    num, out_dir = int(hc.job.num), Path(hc.runtime.output_dir)
    plan = plan_job(cfg, out_dir, _recorded_for(Path(str(hc.sweep.dir)), num))
    DECISIONS[num] = {"skip": "skipped", "resume": "resumed", "run": "new"}[plan.action]
    if plan.action == "skip":
        log.info("sweep resume: job %d finished earlier (%s), skipped", num, out_dir / "metrics.json")
        print(f"[resume] job {num}: finished earlier, skipped", flush=True)
    elif plan.action == "resume":
        from .resume import checkpoint_step

        step = checkpoint_step(plan.checkpoint)
        log.info("sweep resume: job %d continues from %s (step %s)", num, plan.checkpoint, step)
        print(f"[resume] job {num}: resuming from {plan.checkpoint} (step {step})", flush=True)
        cfg.ckpt_path = "last"
    return plan


def sweep_mismatches(config: DictConfig, recorded: dict) -> tuple[int, list] | None:
    """``(number of jobs, [(num, overrides, diff)])`` for the jobs whose folder records another
    config, or None when the sweeper's jobs cannot be listed in advance."""
    from hydra.core.global_hydra import GlobalHydra

    from .sweep_check import _swept, sweep_jobs

    sweeper = str(OmegaConf.select(config, "hydra.sweeper._target_", default=""))
    if "BasicSweeper" not in sweeper:
        return None
    loader = GlobalHydra.instance().config_loader()
    bad, jobs = [], sweep_jobs(config)
    shown = _swept(jobs)
    for num, overrides in enumerate(jobs):
        rec = recorded.get(str(num))
        if rec is None:
            continue
        job_cfg = loader.load_sweep_config(config, list(overrides))
        diff = config_diff(rec, job_cfg, runtime_keys(job_cfg))
        if diff:
            bad.append((num, shown[num], diff))
    return len(jobs), bad


def sweep_counts(sweep_dir: Path, recorded: dict, n_jobs: int) -> tuple[int, int, int]:
    """``(finished, resumable, new)`` among the ``n_jobs`` jobs of this command."""
    finished = resumable = 0
    for num in (n for n in recorded if int(n) < n_jobs):
        job = sweep_dir / num
        try:
            done = json.loads((job / "metrics.json").read_text()).get("status") == "finished"
        except (OSError, ValueError):
            done = False
        finished += done
        resumable += (not done) and last_checkpoint(job).is_file()
    return finished, resumable, n_jobs - finished - resumable


def __getattr__(name: str):
    """``ResumeSweep`` lives in :mod:`xformer.jobs.hydra_callbacks`; older imports from here still find it."""
    if name == "ResumeSweep":
        from .hydra_callbacks import ResumeSweep

        return ResumeSweep
    raise AttributeError(name)
