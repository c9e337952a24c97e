"""Multi-process training under Hydra (docs/scaling.md): who creates a job's ranks (:func:`run_job`,
:func:`external_rank_argv`), the DDP/FSDP strategies with their collective timeout, and a lost peer's line."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable
from uuid import uuid4

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from xformer.config.overrides import key_of, quoted
from xformer.errors import ConfigError

from .checkpoints import checkpoint_step, last_checkpoint
from .context import JobContext, Outcome, outcome_of_record
from .overrides import SWEEP_JOB_ENV, sweep_job_facts, sweep_resume_command
from .record import FILE, RunRecord, Status, read_record

CHILD_GRACE_S = 60  # after a stop or a failed rank, how long the ranks get to leave before they are killed
#: Seconds a rank waits in a collective for the others before it fails (``trainer.strategy.timeout_s``): a peer
#: lost without closing its connections (a node gone; NCCL) is noticed after this, not torch's 30 minutes.
COLLECTIVE_TIMEOUT_S = 600


def env_rank() -> int:
    """Global rank from the environment of an externally launched process (0 when unknown)."""
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        value = os.environ.get(key)
        if value and value.isdigit():
            if key == "SLURM_PROCID" and int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
                continue
            return int(value)
    return 0


def external_rank_argv(argv: list[str]) -> list[str]:
    """``argv`` for an externally launched rank: ranks > 0 write no Hydra output of their own (a temporary folder
    unless ``hydra.run.dir`` is given outside a sweep job); rank 0 of a sweep job's ``torchrun`` writes into the
    job's folder; other rank 0s and ``-m`` are unchanged."""
    rank = env_rank()
    sweep_job = sweep_job_facts()
    if any(a in ("-m", "--multirun") for a in argv[1:]) or (rank == 0 and not sweep_job):
        return list(argv)
    if rank == 0:
        return [*argv, "hydra.run.dir=" + quoted(sweep_job["info"]["output_dir"]), "hydra.output_subdir=null"]
    out = list(argv)
    keys = {key_of(a) for a in argv[1:] if "=" in a}
    if "hydra.run.dir" not in keys or sweep_job:
        out.append("hydra.run.dir=" + quoted(tempfile.mkdtemp(prefix=f"xformer-rank{rank}-")))
    if "hydra.output_subdir" not in keys:
        out.append("hydra.output_subdir=null")
    if "hydra.job.name" not in keys:
        out.append(f"hydra.job.name=run_rank{rank}")
    return out


def ranks_to_start(trainer_cfg: Any) -> int:
    """How many processes :func:`run_job` starts for a ``-m`` job: the devices when the launcher of a ``Trainer``
    built from ``trainer_cfg`` would re-run the script, else 0 (also for a config Lightning refuses)."""
    from xformer.config.trainer import bare_trainer

    keys = [k for k in ("accelerator", "devices", "num_nodes", "strategy", "plugins") if k in trainer_cfg]
    kwargs = OmegaConf.to_container(OmegaConf.masked_copy(trainer_cfg, keys), resolve=True)
    try:
        trainer = bare_trainer("lightning.Trainer", kwargs)
    except Exception:  # the job's own trainer reports it
        return 0
    # only Lightning's script launcher holds a cluster environment (ddp_spawn forks, which works in a sweep)
    env = getattr(trainer.strategy.launcher, "cluster_environment", None)
    return trainer.num_devices if trainer.num_devices > 1 and env and not env.creates_processes_externally else 0


def run_job(fn: Callable[..., Any], cfg: Any, ctx: JobContext, script: str | Path) -> tuple[Outcome, RunRecord | None]:
    """``fn(cfg, ctx=ctx)`` for one Hydra job; a ``-m`` job that needs :func:`ranks_to_start` processes runs as
    ``torchrun --standalone`` would (``elastic_launch`` here, the job's facts in :data:`SWEEP_JOB_ENV`) and
    returns rank 0's record. Signals reach every rank (``CHILD_GRACE_S`` to leave); a failed rank fails the job."""
    n = ranks_to_start(cfg.trainer) if ctx.multirun else 0
    if n <= 1:
        return fn(cfg, ctx=ctx)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    hc = HydraConfig.get()
    given = [o for o in [*hc.overrides.hydra, *hc.overrides.task] if key_of(o) not in ("hydra.mode", "hydra.sweep.dir")]
    ckpt = "ckpt_path=" + (quoted(str(Path(ctx.ckpt).resolve())) if ctx.ckpt else "null")  # the job's resume plan
    facts = {"info": ctx.info(), "resume": sweep_resume_command(HydraConfig.instance().cfg)}
    env = {SWEEP_JOB_ENV: json.dumps(facts)}
    if not os.environ.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n))
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=n,
        run_id=str(uuid4()),
        rdzv_backend="c10d",  # torchrun --standalone: a store on a free local port
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        signals_to_handle="SIGTERM,SIGINT",
        shutdown_timeout=CHILD_GRACE_S,
    )
    saved_env = {k: os.environ.get(k) for k in env}
    saved_handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    started, failure, stopped_by = time.time(), None, None
    os.environ.update(env)  # the ranks' environment is this process's
    try:
        elastic_launch(config, sys.executable)(str(script), *given, ckpt)
    except ChildFailedError as err:  # a rank failed; the others were stopped
        rank, first = err.get_first_failure()
        failure = f"rank {rank} of {n} ended with exit code {first.exitcode} ({first.signal_name() or 'no signal'})"
    except SignalException as err:  # Ctrl-C or SIGTERM: the ranks saved and left; rank 0's record says so
        stopped_by = signal.Signals(err.sigval).name
    finally:
        for key, value in saved_env.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
    path = ctx.out_dir / FILE
    record = read_record(ctx.out_dir) if path.is_file() and path.stat().st_mtime >= started else None
    if failure is not None and record is not None:  # rank 0 stopped because another rank failed
        record.status, record.error = Status.FAILED, failure
        record.write(path)
    return outcome_of_record(record, failure, stopped_by, n), record


def ddp_strategy(timeout_s: float = COLLECTIVE_TIMEOUT_S, **kwargs: Any):
    """``trainer=ddp``: Lightning's ``DDPStrategy`` (``kwargs``: its own) with :func:`collective_timeout`."""
    from lightning.pytorch.strategies import DDPStrategy

    return DDPStrategy(timeout=collective_timeout(timeout_s), **kwargs)


def collective_timeout(timeout_s: Any):
    """``timeout_s`` seconds as the strategies' ``timedelta``. Raises: ConfigError: not a positive number."""
    try:
        seconds = float(timeout_s)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(
            f"trainer.strategy.timeout_s={timeout_s}: the collective timeout must be a positive number of seconds. "
            f"Fix: trainer.strategy.timeout_s={COLLECTIVE_TIMEOUT_S}"
        )
    return timedelta(seconds=seconds)


def fsdp_strategy(
    devices: Any = 1,
    num_nodes: int = 1,
    save_distributed_checkpoint: bool = False,
    timeout_s: float = COLLECTIVE_TIMEOUT_S,
    **kwargs: Any,
):
    """``trainer=fsdp``: FSDP2 through Lightning's ``ModelParallelStrategy``, every rank (``devices`` x
    ``num_nodes``) in one data-parallel group, on GPUs and CPU. Raises: ConfigError: ``devices`` is no count."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    text = str(devices).strip("[]() ")
    if not isinstance(devices, (int, str)):  # a list of device ids
        count = len(devices)
    elif "," in text:
        count = len([d for d in text.split(",") if d.strip()])
    else:
        count = int(text) if text.isdigit() and int(text) > 0 else 0
    if count < 1:
        raise ConfigError(
            f"trainer.devices={devices}: trainer=fsdp needs the number of devices to shard over. "
            "Fix: trainer.devices=<n> (e.g. trainer.devices=4)"
        )
    kwargs.setdefault("tensor_parallel_size", 1)
    return ModelParallelStrategy(
        data_parallel_size=count * int(num_nodes),
        save_distributed_checkpoint=save_distributed_checkpoint,
        timeout=collective_timeout(timeout_s),
        **kwargs,
    )


def peer_lost_line(err: BaseException, step: int | None, out_dir: Path | None) -> str | None:
    """The ``error:`` line of a rank whose collective failed because another rank was lost (which rank, where,
    the checkpoint kept, how to resume), or None when no error in ``err``'s chain is torch's ``DistError`` family
    or gloo's transport error (a plain ``RuntimeError`` naming gloo's ``transport`` source file)."""
    import torch.distributed as dist

    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, dist.DistError) or (isinstance(cause, RuntimeError) and "gloo/transport" in str(cause)):
            break
        cause = cause.__cause__ or cause.__context__
    else:
        return None
    rank, world = env_rank(), os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or "?"
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    what = " ".join(str(cause).split())
    what = what.split("] ", 1)[-1].split(" This is typically caused", 1)[0][:200]  # gloo's source location, advice
    last = last_checkpoint(out_dir) if out_dir is not None else None
    saved = checkpoint_step(last) if last is not None and last.is_file() else None
    kept = f"{last} (step {saved}) is kept" if saved is not None else "no checkpoint was saved yet"
    folder = out_dir if out_dir is not None else "<the job's folder>"
    return (
        f"rank {rank} of {world}: a peer rank was lost at step {step} ({type(cause).__name__}: {what}); its node "
        f"or process stopped. {kept}. Fix: start the job again on every node with the same command and "
        f"ckpt_path=last hydra.run.dir={folder} (a requeued SLURM job resumes by itself)"
    )


def logging_spec() -> dict:
    """The root logger's level and stream/file handlers in a form that pickles, for :func:`replay_logging`."""
    root = logging.getLogger()
    handlers = []
    for h in root.handlers:
        form = (getattr(h.formatter, "_fmt", None), getattr(h.formatter, "datefmt", None))  # None: no formatter
        if isinstance(h, logging.FileHandler):
            handlers.append(("file", h.baseFilename, h.level, *form))
        elif isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr):
            handlers.append(("stream", "stdout" if h.stream is sys.stdout else "stderr", h.level, *form))
    return {"level": root.level, "handlers": handlers}


def replay_logging(spec: dict | None) -> None:
    """Give a spawned rank without handlers the job process's (``spec``: :func:`logging_spec`)."""
    root = logging.getLogger()
    if not spec or root.handlers:
        return
    for kind, target, level, fmt, datefmt in spec["handlers"]:
        handler = (
            logging.FileHandler(target, mode="a") if kind == "file" else logging.StreamHandler(getattr(sys, target))
        )
        handler.setLevel(level)
        handler.setFormatter(logging.Formatter(fmt, datefmt))
        root.addHandler(handler)
    root.setLevel(spec["level"])
