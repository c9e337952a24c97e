"""Multi-process training under Hydra: DDP/FSDP strategies that work inside ``-m`` sweeps, under any
Hydra launcher, and under ``torchrun`` / SLURM ``srun``.

Who creates the processes:

* **Lightning** (``trainer=ddp`` / ``fsdp`` on one node, no external launcher): the job's process is
  rank 0 and Lightning starts ranks 1..N-1 by re-running the script. Lightning's own re-run
  command repeats ``sys.argv``, which under ``-m`` would start a whole new sweep per rank (and put
  each in a fresh timestamped folder). :class:`~.hydra_callbacks.HydraJobGuard` (a Hydra callback, registered in
  ``conf/hydra/default.yaml``) replaces that command while a Hydra job runs: child ranks run
  ``python run.py <this job's overrides> hydra.run.dir=<this job's folder> hydra.output_subdir=null``
  in single-run mode, from the job's working directory, whatever launcher started the job
  (basic, joblib worker, submitit). After the job it waits for (or stops) the child ranks, destroys
  the process group and restores the environment variables Lightning set, so the next sweep job
  starts clean.
* **torch.multiprocessing** (``trainer=ddp_spawn``): children are forked from the job's process; no
  script is re-run, nothing to fix.
* **an external launcher** (``torchrun``, ``srun``, or submitit with ``tasks_per_node > 1``): every
  rank runs ``run.py`` itself and Lightning detects the environment. :func:`external_rank_argv`
  (called by ``run.py``) keeps ranks > 0 from writing Hydra output: they log into a private
  temporary folder unless ``hydra.run.dir`` is given, and never write ``.hydra/``.

Only global rank 0 writes ``metrics.json`` and owns the W&B run (the driver checks
``trainer.is_global_zero``; Lightning's ``WandbLogger`` is rank-zero only).
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .overrides import key_of

log = logging.getLogger("xformer")

# Variables Lightning's subprocess launcher writes into os.environ (and seed_everything); restored after
# each job so the next job of a sweep is not mistaken for an externally launched rank.
LAUNCH_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "PL_GLOBAL_SEED",
    "PL_SEED_WORKERS",
)
# Hydra overrides that belong to the sweep, not to the job; child ranks never get them.
_SWEEP_ONLY = (
    "hydra.mode",
    "hydra.sweep",
    "hydra.run.dir",
    "hydra.output_subdir",
    "hydra.job.name",
    "hydra/launcher",
    "hydra.launcher",
    "hydra/sweeper",
    "hydra.sweeper",
)
CHILD_GRACE_S = 60.0  # how long rank 0 may take to notice a failed child rank before it is killed


def env_rank() -> int:
    """Global rank from the environment of an externally launched process (0 when unknown)."""
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        value = os.environ.get(key)
        if value and value.isdigit():
            if key == "SLURM_PROCID" and int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
                continue
            return int(value)
    return 0


def _quote(value: str) -> str:
    """A Hydra override value that parses back to ``value`` (single-quoted, escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def external_rank_argv(argv: list[str]) -> list[str]:
    """Command line for this process when ranks are created externally (``torchrun``, ``srun``).

    Rank 0 is unchanged. Ranks > 0 get ``hydra.output_subdir=null`` (only rank 0 saves ``.hydra/``)
    and ``hydra.job.name=<name>_rank<r>`` (their own log file); without an explicit ``hydra.run.dir``
    they log into a fresh temporary folder, so timestamps that differ between ranks create no stray
    ``outputs/`` folders. Lightning's own child ranks already carry ``hydra.run.dir``.
    """
    rank = env_rank()
    if rank == 0 or any(a in ("-m", "--multirun") for a in argv[1:]):
        return list(argv)
    out = list(argv)
    keys = {key_of(a) for a in argv[1:] if "=" in a}
    if "hydra.run.dir" not in keys:
        out.append("hydra.run.dir=" + _quote(tempfile.mkdtemp(prefix=f"xformer-rank{rank}-")))
    if "hydra.output_subdir" not in keys:
        out.append("hydra.output_subdir=null")
    if "hydra.job.name" not in keys:
        out.append(f"hydra.job.name=run_rank{rank}")
    return out


def child_rank_command(local_rank: int, script: str | None = None) -> tuple[list[str], str]:
    """``(command, cwd)`` that runs rank ``local_rank`` of the current Hydra job in single-run mode.

    The command is ``python <script> [--config-path P --config-name N] <job overrides>
    <job-level hydra overrides> hydra.run.dir=<job dir> hydra.output_subdir=null
    hydra.job.name=train_ddp_process_<r>``; ``cwd`` is the directory the sweep was started from.
    """
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    script = script or _STATE.script or os.path.abspath(sys.argv[0])
    cmd = [sys.executable, script]
    for source in hc.runtime.config_sources:
        if source.provider == "main" and source.schema == "file":
            cmd += ["--config-path", source.path]
        elif source.provider == "command-line" and source.schema == "file":
            cmd += ["--config-dir", source.path]
    if hc.job.config_name:
        cmd += ["--config-name", hc.job.config_name]
    cmd += list(hc.overrides.task)
    cmd += [o for o in hc.overrides.hydra if not key_of(o).startswith(_SWEEP_ONLY)]
    cmd += [
        "hydra.run.dir=" + _quote(str(hc.runtime.output_dir)),
        "hydra.output_subdir=null",
        f"hydra.job.name=train_ddp_process_{local_rank}",
    ]
    return cmd, hc.runtime.cwd


class _State:
    """What the guard knows about the running job (one job at a time per process)."""

    def __init__(self) -> None:
        self.script: str | None = None
        self.active = False
        self.job = 0  # incremented per job: an observer of an earlier job never acts on a later one
        self.env: dict[str, str | None] = {}
        self.patched: dict[str, Any] = {}
        self.procs: list[subprocess.Popen] = []


_STATE = _State()


class _ChildObserver(threading.Thread):
    """Watches Lightning-launched child ranks (replaces Lightning's observer for Hydra jobs).

    Lightning's observer SIGKILLs the main process as soon as a child rank exits non-zero, which in a
    sweep kills the whole sweep even when rank 0 failed too and is merely finishing its W&B run. This
    one kills the remaining children at once, then gives rank 0 ``grace_s`` seconds to leave the job
    (a rank blocked in a collective gets a connection error when its peers die); only a rank 0 that
    is still in the job after that is killed, as Lightning would.
    """

    def __init__(self, procs: list[subprocess.Popen], main_pid: int, grace_s: float = CHILD_GRACE_S) -> None:
        super().__init__(daemon=True, name="xformer-child-observer")
        self.procs, self.main_pid, self.grace_s = procs, main_pid, grace_s
        self.job = _STATE.job

    def _in_job(self) -> bool:
        return _STATE.active and _STATE.job == self.job

    def run(self) -> None:
        while self._in_job():
            codes = [p.poll() for p in self.procs]
            if all(c == 0 for c in codes):
                return
            failed = [p for p, c in zip(self.procs, codes, strict=True) if c not in (None, 0)]
            if failed:
                log.error(
                    "child rank (pid %s) exited with %s; stopping the job's other ranks",
                    failed[0].pid,
                    failed[0].returncode,
                )
                _stop(self.procs, timeout=5.0)
                deadline = time.monotonic() + self.grace_s
                while self._in_job() and time.monotonic() < deadline:
                    time.sleep(0.5)
                if self._in_job():
                    log.error("rank 0 did not leave the failed job within %.0f s; killing it", self.grace_s)
                    os.kill(self.main_pid, signal.SIGKILL)
                return
            time.sleep(1.0)


def _stop(procs: list[subprocess.Popen], timeout: float) -> None:
    """Wait up to ``timeout`` s for ``procs`` to exit, then terminate and finally kill stragglers."""
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            p.send_signal(sig)
        for p in alive:
            try:
                p.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                pass


def _launch_observer(procs: list[subprocess.Popen]) -> None:
    _STATE.procs = procs
    _ChildObserver(procs, os.getpid()).start()


def _patch_lightning() -> None:
    """Point Lightning's subprocess launcher at :func:`child_rank_command` and :class:`_ChildObserver`."""
    if _STATE.patched:  # already installed (a job whose end was never signalled)
        return
    from xformer import lightning_compat

    def missing(name: str) -> None:  # a future Lightning renamed it: fall back to its behaviour, but say so
        log.warning("lightning subprocess launcher has no %s; DDP under Hydra -m may relaunch the sweep", name)

    _STATE.patched = lightning_compat.swap_launcher_functions(child_rank_command, _launch_observer, missing)


def _unpatch_lightning() -> None:
    if not _STATE.patched:
        return
    from xformer import lightning_compat

    lightning_compat.restore_launcher_functions(_STATE.patched)
    _STATE.patched = {}


def begin_job(script: str | None = None) -> None:
    """Prepare this process for one Hydra job that may start DDP child ranks."""
    _STATE.script = script
    _STATE.env = {k: os.environ.get(k) for k in LAUNCH_ENV}
    _STATE.procs = []
    _STATE.job += 1
    _STATE.active = True
    if "lightning.pytorch.strategies.launchers.subprocess_script" in sys.modules:
        _patch_lightning()  # else patch_lightning_for_job(), once the job imports Lightning


def patch_lightning_for_job() -> None:
    """Install the child-rank command of :func:`begin_job` (called by the driver before it builds
    the trainer): deferred so that ``run.py`` can check the config before Lightning is imported."""
    if _STATE.active:
        _patch_lightning()


def end_job(timeout: float = 60.0) -> None:
    """Clean up after one Hydra job: stop child ranks, destroy the process group, restore env vars."""
    _STATE.active = False
    if _STATE.procs:
        _stop(_STATE.procs, timeout=timeout)
        _STATE.procs = []
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception as err:  # pragma: no cover - best effort
        log.warning("could not destroy the process group: %s", err)
    for key, value in _STATE.env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _STATE.env = {}
    _unpatch_lightning()


def _script_of(task_function: Any) -> str | None:
    """Path of the file defining the Hydra task function (``run.py``), if it is a real file."""
    try:
        path = inspect.getsourcefile(inspect.unwrap(task_function))
    except (TypeError, OSError):
        return None
    return os.path.abspath(path) if path and Path(path).is_file() else None


def _main_script() -> str | None:
    """Absolute path of the script this process was started with (``run.py``), if it is a file."""
    import __main__

    path = getattr(__main__, "__file__", None)
    return os.path.abspath(path) if path and path.endswith(".py") and Path(path).is_file() else None


_FSDP_CLASS: type | None = None


def fsdp_strategy(save_distributed_checkpoint: bool = False, **kwargs: Any):
    """``trainer=fsdp``: fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``).

    Lightning's ``ModelParallelStrategy`` with every rank in one data-parallel group (no tensor
    parallelism); the module's ``configure_model`` shards each Transformer layer and then the root
    (embeddings, output head). Runs on GPUs (NCCL) and, unlike Lightning's FSDP1 strategy, on CPU
    (gloo). ``save_distributed_checkpoint=False`` writes ordinary single-file checkpoints (gathered
    on rank 0) that ``mode=eval``, ``xformer translate`` and non-FSDP runs can load.
    """
    global _FSDP_CLASS
    if _FSDP_CLASS is None:
        from lightning.pytorch.strategies import ModelParallelStrategy

        from xformer import lightning_compat

        class FullyShardedStrategy(ModelParallelStrategy):
            """ModelParallelStrategy whose data-parallel size defaults to the world size (pure FSDP)."""

            def setup_environment(self) -> None:
                if lightning_compat.data_parallel_size(self) == "auto":
                    lightning_compat.set_data_parallel_size(self, self.num_nodes * self.num_processes)
                super().setup_environment()

        _FSDP_CLASS = FullyShardedStrategy
    kwargs.setdefault("data_parallel_size", "auto")
    kwargs.setdefault("tensor_parallel_size", 1)
    return _FSDP_CLASS(save_distributed_checkpoint=save_distributed_checkpoint, **kwargs)


def refresh_csv_headers(trainer: Any) -> None:
    """Make each CSV logger of ``trainer`` know every column already in its ``metrics.csv``.

    Under ``ddp_spawn`` the loggers are copies pickled from the job's process, which never sees the
    keys the spawned ranks logged during ``fit``; without this, ``test`` would rewrite the file with
    the shorter header and fail. Called from ``TransformerLitModule.setup`` (rank 0; a no-op otherwise).
    """
    import csv

    from lightning.pytorch.loggers import CSVLogger

    from xformer import lightning_compat

    if not trainer.is_global_zero:
        return
    for lg in trainer.loggers:
        if not isinstance(lg, CSVLogger):
            continue
        exp = lg.experiment
        path = lightning_compat.csv_metrics_file(exp)
        if path and os.path.isfile(path):
            with open(path, newline="") as f:
                header = next(csv.reader(f), [])
            lightning_compat.add_csv_columns(exp, header)


def logging_spec() -> dict:
    """The root logger's level and its stream and file handlers (target, level, format), in a form
    that pickles: what :func:`replay_logging` rebuilds in a rank that ``trainer=ddp_spawn`` started."""
    root = logging.getLogger()
    handlers = []
    for h in root.handlers:
        fmt = h.formatter
        form = (getattr(fmt, "_fmt", None), getattr(fmt, "datefmt", None)) if fmt is not None else (None, None)
        if isinstance(h, logging.FileHandler):
            handlers.append(("file", h.baseFilename, h.level, *form))
        elif isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr):
            handlers.append(("stream", "stdout" if h.stream is sys.stdout else "stderr", h.level, *form))
    return {"level": root.level, "handlers": handlers}


def replay_logging(spec: dict | None) -> None:
    """Give this process the logging of the job's process (``spec`` from :func:`logging_spec`) when its
    root logger has no handler: a rank that ``trainer=ddp_spawn`` started imports xformer afresh, without
    Hydra's job logging, so its ``log.info`` lines (the validation lines) would go nowhere. The file
    handlers append to the job's log file. A process with handlers (Hydra's) is left as it is."""
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
