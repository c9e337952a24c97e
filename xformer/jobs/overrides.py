"""The commands that continue a job or a sweep (:func:`resume_command`), the keys a sweep varies
(:func:`swept_keys`), and the facts a ``-m`` job hands the ranks it starts (:data:`SWEEP_JOB_ENV`)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from xformer.config.overrides import key_of, sweep_override_keys
from xformer.hydra_job import sweep_dir

#: Set by a ``-m`` job for the ranks it runs under ``torchrun`` (xformer.jobs.distributed.run_job): JSON with
#: the job's ``info`` (``metrics.json``'s ``job``) and the sweep's ``resume`` command.
SWEEP_JOB_ENV = "XFORMER_SWEEP_JOB"


def sweep_job_facts() -> dict:
    """What :data:`SWEEP_JOB_ENV` holds (``{"info", "resume"}``); ``{}`` outside the ranks of a ``-m`` job."""
    return json.loads(os.environ.get(SWEEP_JOB_ENV) or "{}")


def resume_command(job_dir: Path) -> str:
    """The shell command that continues the current Hydra job from its ``last.ckpt`` (``ckpt_path=last
    hydra.run.dir=<job_dir>``); for a ``-m`` job and the ranks it runs, :func:`sweep_resume_command`."""
    if sweep_job := sweep_job_facts():
        return sweep_job["resume"]
    overrides: list[str] = []
    if HydraConfig.initialized():  # else (outside Hydra, or no sweep folder to read) the job's own command below
        hydra = HydraConfig.get()
        given = [*hydra.overrides.hydra, *hydra.overrides.task]
        overrides = [o for o in given if key_of(o) not in ("ckpt_path", "hydra.run.dir", "hydra.mode")]
        if sweep_dir(hydra) is not None:
            with contextlib.suppress(Exception):
                return sweep_resume_command(HydraConfig.instance().cfg)
    command = [*overrides, "ckpt_path=last", f"hydra.run.dir={job_dir}"]
    return " ".join(["python", *map(shlex.quote, [_script(), *command])])


def sweep_resume_command(config: DictConfig) -> str:
    """The sweep's own command (its ``multirun.yaml`` overrides, ``-m``) into the same ``hydra.sweep.dir``, which
    skips finished jobs and resumes interrupted ones; ``config``: the job's config with its ``hydra`` node."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    try:
        recorded = OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides
    except Exception:  # no multirun.yaml (yet): this job's own overrides
        recorded = config.hydra.overrides
    overrides = [str(o) for o in [*(recorded.get("hydra") or []), *(recorded.get("task") or [])]]
    overrides = [o for o in overrides if key_of(o) not in ("hydra.sweep.dir", "hydra.mode")]
    return " ".join(["python", *map(shlex.quote, [_script(), *overrides, f"hydra.sweep.dir={sweep_dir}"]), "-m"])


def _script() -> str:
    """The script the user ran: ``sys.argv[0]``, else (a launcher's worker, no script) ``run.py``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith(".py") and "site-packages" not in Path(argv0).parts:
        return argv0
    return "run.py"


def swept_keys(sweep_dir: str | Path | None) -> list[str]:
    """Keys that vary across the jobs of the sweep in ``sweep_dir`` (empty for a single run), from the overrides
    and ``hydra.sweeper.params`` in its ``multirun.yaml``."""
    if not sweep_dir or not (path := Path(sweep_dir) / "multirun.yaml").is_file():
        return []
    cfg = OmegaConf.load(path)
    keys = sweep_override_keys(OmegaConf.select(cfg, "hydra.overrides.task", default=[]) or [])
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}
    keys += sweep_override_keys([f"{key}={value}" for key, value in params.items()])
    return list(dict.fromkeys(keys))
