"""Running under SLURM (docs/scaling.md, "SLURM"): the requeue signal and requeueing (the stop itself:
:class:`xformer.jobs.callbacks.StopCheckpoint`), and, before a ``hydra/launcher=slurm`` sweep queues anything, a
request SLURM would refuse as one ``error:`` line."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

log = logging.getLogger("xformer")


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
    job = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    if submitit_signal() is not None and callable(engine_handler):
        try:
            engine_handler(signum, None)  # requeues, then exits the process
        except SystemExit:
            log.warning(REQUEUED, job, job)
        except Exception as err:  # submitit declines: timed out too often, or not checkpointable
            log.warning("SLURM job %s not requeued (%s); resume it with: %s", job, err, _resume_command())
        return
    result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if result.returncode == 0:
        log.warning(REQUEUED, job, job)
    else:
        why = (result.stderr or result.stdout).strip()[:300]
        log.warning("scontrol requeue %s failed (%s); resume it with: %s", job, why, _resume_command())


#: What a requeued job's log says (the job id twice): it resumes by itself, and where to watch it wait.
REQUEUED = (
    "requeued SLURM job %s: it resumes from its last.ckpt by itself when SLURM starts it again (nothing to run "
    "by hand; SLURM first holds it for its credential lifetime, AuthInfo cred_expire, 2-3 minutes by default: "
    "squeue -j %s shows it PENDING (BeginTime))"
)


def _resume_command() -> str:
    """The command that resumes this job by hand (the sweep's, for a sweep job)."""
    from .overrides import resume_command

    try:
        return resume_command(Path(HydraConfig.get().runtime.output_dir))
    except Exception:  # no Hydra config left at exit
        return "the same command with ckpt_path=last hydra.run.dir=<its folder>"


# -- hydra/launcher=slurm: before anything is queued ----------------------------------------------
#: Keys that size every job of a SLURM sweep: the launcher reads them once, so they cannot vary.
SIZE_KEYS = ("trainer.devices", "trainer.num_nodes", "trainer")


def is_slurm_sweep(config: Any) -> bool:
    """Whether multirun ``config`` launches its jobs with hydra-submitit's SLURM launcher."""
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
    """Why SLURM would not run the jobs (each job's overrides) of sweep ``config``, as one line, or ``None``: a
    swept :data:`SIZE_KEYS` key, or ``sbatch --test-only``'s refusal (skipped without ``sbatch``)."""
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
    if why.startswith("sbatch: fatal:"):  # no cluster answers (no slurm.conf, controller down): not the request
        return (
            f"hydra/launcher=slurm: sbatch cannot reach a SLURM cluster from here ({why}); nothing was queued. "
            f"Fix: run the command on the cluster's login node, or drop hydra/launcher=slurm to run the jobs here"
        )
    if (nodes := int(launcher.get("nodes") or 1)) > 1:
        have = partition_nodes(launcher.get("partition"))
        if have is not None and have[1] < nodes:
            part, count = have
            return (
                f"hydra/launcher=slurm: trainer.num_nodes={nodes} asks SLURM for {nodes} nodes, but partition "
                f"{part} has {count} (sbatch --test-only --nodes={nodes}: {why}). Fix: trainer.num_nodes="
                f"{count}, or hydra.launcher.partition=<a partition with {nodes} nodes> (sinfo -o '%P %D' lists "
                f"them)"
            )
    return (
        f"hydra/launcher=slurm: SLURM refuses the job request ({' '.join(request)}): {why}. Fix: set "
        f"hydra.launcher.partition / tasks_per_node / cpus_per_task / gpus_per_node / mem_gb to what the "
        f"cluster has (sinfo -o '%P %c %m %G' lists them)"
    )


def partition_nodes(partition: str | None) -> tuple[str, int] | None:
    """``(name, node count)`` of ``partition`` (None: the default one) from ``sinfo``, or None when unknown."""
    try:
        res = subprocess.run(["sinfo", "-h", "-o", "%P %D"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts: dict[str, int] = {}
    default = None
    for line in res.stdout.splitlines():
        name, _, count = line.strip().partition(" ")
        if not count.strip().isdigit():
            continue
        if name.endswith("*"):  # sinfo marks the default partition
            name = default = name[:-1]
        counts[name] = counts.get(name, 0) + int(count)  # one line per node state
    name = partition or default
    return (name, counts[name]) if name in counts else None


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
