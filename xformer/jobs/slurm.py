"""Running under SLURM: a job stopped by its requeue signal saves at the step boundary, requeues itself by
the engine's own means, and, requeued, continues from its own ``last.ckpt`` (which checkpoint:
:func:`xformer.jobs.checkpoints.requeued_checkpoint`; the signal: :class:`xformer.jobs.callbacks.StopCheckpoint`).
Before a ``hydra/launcher=slurm`` sweep queues anything, a request SLURM would refuse is one ``error:`` line."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from typing import Any

log = logging.getLogger("xformer")

__all__ = [
    "global_rank",
    "is_slurm_sweep",
    "quiet_sacct_warnings",
    "sbatch_request",
    "sweep_problem",
    "lightning_requeue_signal",
    "requeue",
    "submitit_signal",
]


def submitit_signal() -> int | None:
    """submitit's requeue signal when this process is a submitit SLURM job, else None."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return None
    return int(getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")))


def lightning_requeue_signal(trainer: Any) -> int | None:
    """The ``requeue_signal`` of Lightning's SLURM environment for ``trainer``; None when ``auto_requeue`` is off or
    this is not a SLURM job."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    env = getattr(trainer.strategy, "cluster_environment", None)
    if isinstance(env, SLURMEnvironment):
        return int(env.requeue_signal) if env.auto_requeue and env.requeue_signal is not None else None
    # one process (no cluster environment on the strategy): Lightning's default, when this is a SLURM job
    return int(signal.SIGUSR1) if SLURMEnvironment.detect() else None


def global_rank() -> int:
    for key in ("SLURM_PROCID", "RANK"):
        value = os.environ.get(key, "")
        if value.isdigit():
            return int(value)
    return 0


def requeue(signum: int, engine_handler: Any) -> None:
    """Requeue this SLURM job after signal ``signum``: under submitit through its own handler ``engine_handler``,
    else ``scontrol requeue`` as Lightning's SLURM handler does."""
    if submitit_signal() is not None and callable(engine_handler):
        try:
            engine_handler(signum, None)  # requeues, then exits the process
        except SystemExit:
            pass
        except Exception as err:  # submitit declines: timed out too often, or not checkpointable
            log.warning("not requeued: %s", err)
        return
    job = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if result.returncode == 0:
        log.warning("requeued SLURM job %s; it resumes from last.ckpt when it starts again", job)
    else:
        log.warning("scontrol requeue %s failed: %s", job, (result.stderr or result.stdout).strip()[:300])


# -- hydra/launcher=slurm: before anything is queued ----------------------------------------------
#: Keys that size every job of a SLURM sweep: the launcher reads them once, so they cannot vary.
SIZE_KEYS = ("trainer.devices", "trainer.num_nodes", "trainer")


def is_slurm_sweep(config: Any) -> bool:
    """Whether multirun ``config`` launches its jobs with hydra-submitit's SLURM launcher."""
    from omegaconf import OmegaConf

    return str(OmegaConf.select(config, "hydra.launcher._target_", default="")).endswith(".SlurmLauncher")


def sbatch_request(launcher: dict) -> list[str]:
    """The ``sbatch`` options submitit derives from the resolved ``hydra.launcher`` settings for each job."""
    opts = {
        "partition": launcher.get("partition"),
        "nodes": launcher.get("nodes"),
        "ntasks-per-node": launcher.get("tasks_per_node"),
        "cpus-per-task": launcher.get("cpus_per_task"),
        "gpus-per-node": launcher.get("gpus_per_node") or None,
        "time": launcher.get("timeout_min"),
        "mem": f"{launcher['mem_gb']}G" if launcher.get("mem_gb") else None,
        "account": launcher.get("account"),
        "qos": launcher.get("qos"),
        "constraint": launcher.get("constraint"),
    }
    for key, value in (launcher.get("additional_parameters") or {}).items():
        opts[str(key).replace("_", "-")] = value
    return [f"--{k}={v}" for k, v in opts.items() if v is not None and v != ""]


def sweep_problem(config: Any, jobs: list[list[str]]) -> str | None:
    """Why SLURM would not run the jobs (``jobs``: each job's overrides) of sweep ``config``, as one line, or
    ``None``: a swept :data:`SIZE_KEYS` key, or ``sbatch --test-only``'s refusal (queues nothing; skipped
    without ``sbatch`` on PATH)."""
    import shutil

    from omegaconf import OmegaConf

    for key in SIZE_KEYS:
        values = sorted({o.split("=", 1)[1] for job in jobs for o in job if o.split("=", 1)[0] == key})
        if len(values) > 1:
            return (
                f"hydra/launcher=slurm: {key} is swept ({','.join(values)}), but the launcher requests "
                f"one job size (nodes, tasks, GPUs from trainer.num_nodes and trainer.devices) for the whole "
                f"sweep. Fix: one value per sweep; run a separate -m command for each {key}"
            )
    if shutil.which("sbatch") is None:
        return None
    launcher = OmegaConf.to_container(config.hydra.launcher, resolve=True)
    request = sbatch_request(launcher)
    try:
        res = subprocess.run(
            ["sbatch", "--test-only", *request, "--wrap=true"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"hydra/launcher=slurm: sbatch --test-only did not answer ({err}). Fix: check that SLURM is reachable"
    if res.returncode == 0:
        return None
    lines = [ln.strip() for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
    why = (lines[-1] if lines else f"exit status {res.returncode}").removeprefix("sbatch: error: ")
    return (
        f"hydra/launcher=slurm: SLURM refuses the job request ({' '.join(request)}): {why}. Fix: set "
        f"hydra.launcher.partition / tasks_per_node / cpus_per_task / gpus_per_node / mem_gb to what the "
        f"cluster has (sinfo -o '%P %c %m %G' lists them)"
    )


class _SacctNotice:
    """Logging filter for ``submitit``: its "Bypassing sacct error" warning, repeated on every status poll,
    becomes one line saying what it means."""

    def __init__(self) -> None:
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "Bypassing sacct error" not in record.getMessage():
            return True
        if not self.said:
            self.said = True
            log.warning(
                "submitit: this cluster keeps no job accounting (sacct fails), so job states come from each "
                "job's result file only: a job killed before writing one (scancel, a lost node) keeps this "
                "sweep waiting; stop it with Ctrl-C and run the same command again to resume"
            )
        return False


def quiet_sacct_warnings() -> None:
    logger = logging.getLogger("submitit")
    if not any(isinstance(f, _SacctNotice) for f in logger.filters):
        logger.addFilter(_SacctNotice())
