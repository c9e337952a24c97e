"""Multi-process training under Hydra: who creates a job's ranks, and the FSDP strategy (docs/scaling.md).

Lightning starts the ranks of a single run; in a ``-m`` job whose trainer would re-run the script (that
would start the whole sweep again in every rank) :func:`run_job` spawns them; under an external launcher
(``torchrun``, ``srun``) every rank runs ``run.py`` and :func:`external_rank_argv` keeps ranks > 0 from
writing Hydra output. Only global rank 0 writes ``metrics.json`` and owns the W&B run."""

from __future__ import annotations

import copy
import importlib
import logging
import os
import pickle
import signal
import sys
import tempfile
import threading
import traceback
from typing import Any, Callable

from .overrides import key_of, quoted

CHILD_GRACE_S = 60.0  # after one rank fails, how long the others get to leave before they are killed


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
    """Command line for this process when ranks are created externally: ranks > 0 save no ``.hydra/``, log to
    ``<name>_rank<r>``, and without ``hydra.run.dir`` into a fresh temporary folder (their timestamps differ
    from rank 0's). Rank 0 and ``-m`` are unchanged."""
    rank = env_rank()
    if rank == 0 or any(a in ("-m", "--multirun") for a in argv[1:]):
        return list(argv)
    out = list(argv)
    keys = {key_of(a) for a in argv[1:] if "=" in a}
    if "hydra.run.dir" not in keys:
        out.append("hydra.run.dir=" + quoted(tempfile.mkdtemp(prefix=f"xformer-rank{rank}-")))
    if "hydra.output_subdir" not in keys:
        out.append("hydra.output_subdir=null")
    if "hydra.job.name" not in keys:
        out.append(f"hydra.job.name=run_rank{rank}")
    return out


def ranks_to_start(trainer_cfg: Any) -> int:
    """How many processes :func:`run_job` starts for a ``-m`` job: the trainer's devices when Lightning's
    launcher would re-run the script to start them, else 0 (also for a config Lightning refuses: the job
    reports it). Lightning decides: a ``Trainer`` is built from ``trainer_cfg`` and asked for its launcher."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    keys = [k for k in ("accelerator", "devices", "num_nodes", "strategy", "plugins") if k in trainer_cfg]
    kwargs = OmegaConf.to_container(OmegaConf.masked_copy(trainer_cfg, keys), resolve=True)
    quiet = [logging.getLogger(f"lightning.{p}.utilities.rank_zero") for p in ("pytorch", "fabric")]
    for lg in quiet:  # the device summary is printed once, by the job's trainer
        lg.disabled = True
    try:
        trainer = instantiate({"_target_": "lightning.Trainer", **kwargs}, logger=False, enable_checkpointing=False)
    except Exception:
        return 0
    finally:
        for lg in quiet:
            lg.disabled = False
    # only Lightning's script launcher holds a cluster environment (ddp_spawn forks, which works in a sweep)
    env = getattr(trainer.strategy.launcher, "cluster_environment", None)
    return trainer.num_devices if trainer.num_devices > 1 and env and not env.creates_processes_externally else 0


def run_job(fn: Callable[..., Any], cfg: Any, **kwargs: Any) -> Any:
    """``fn(cfg, **kwargs)`` for one Hydra job; in a ``-m`` job that needs :func:`ranks_to_start` processes, in
    that many spawned ranks (with Lightning's launch variables, this job's Hydra config and logging), returning
    rank 0's value.

    Raises:
        rank 0's exception (its traceback as a note); ``ProcessRaisedException`` when another rank failed and
        rank 0 reported nothing."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    n = ranks_to_start(cfg.trainer) if multirun else 0
    if n <= 1:
        return fn(cfg, **kwargs)

    import torch.multiprocessing as mp
    from lightning.fabric.plugins.environments.lightning import find_free_network_port
    from omegaconf import OmegaConf

    env = {
        "MASTER_ADDR": os.environ.get("MASTER_ADDR", "127.0.0.1"),
        "MASTER_PORT": os.environ.get("MASTER_PORT") or str(find_free_network_port()),
        "NODE_RANK": os.environ.get("NODE_RANK", "0"),
        "WORLD_SIZE": str(n * int(cfg.trainer.get("num_nodes") or 1)),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // n)),
    }
    hydra_cfg = copy.deepcopy(HydraConfig.instance().cfg)
    OmegaConf.set_readonly(hydra_cfg.hydra, False)
    hydra_cfg.hydra.launcher = hydra_cfg.hydra.sweeper = None  # plugin classes a new process cannot unpickle
    result = mp.get_context("spawn").SimpleQueue()
    target = f"{fn.__module__}:{fn.__qualname__}"
    args = (target, cfg, kwargs, hydra_cfg, logging_spec(), env, result)
    ranks = mp.start_processes(_rank_main, args=args, nprocs=n, join=False, start_method="spawn")

    def forward(signum: int, _frame: Any) -> None:  # SIGTERM to this process: the ranks stop and save
        for p in ranks.processes:
            if p.is_alive():
                os.kill(p.pid, signum)

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C reaches every rank from the terminal: this process waits for rank 0 to save and report
        handlers = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
        handlers[signal.SIGTERM] = signal.signal(signal.SIGTERM, forward)
    failure: BaseException | None = None
    try:
        while not ranks.join(grace_period=CHILD_GRACE_S):
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as err:
        failure = err
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    if result.empty():
        raise failure or RuntimeError("rank 0 of the job ended without a result")
    ok, value = result.get()
    if not ok:
        raise value
    return value


def _rank_main(
    local_rank: int, target: str, cfg: Any, kwargs: dict, hydra_cfg: Any, spec: dict, env: dict, result: Any
) -> None:
    """One rank of :func:`run_job`: launch variables set before Lightning is imported (it reads them on import),
    Hydra config and logging restored, ``target`` run. Rank 0 puts ``(ok, value or exception)`` in ``result``."""
    os.environ.update(env, LOCAL_RANK=str(local_rank))
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's resolvers (``${hydra:...}``, ``${now:...}``)
    HydraConfig.instance().set_config(hydra_cfg)
    if local_rank > 0:  # the job's log file is rank 0's
        spec = {**spec, "handlers": [h for h in spec["handlers"] if h[0] != "file"]}
    replay_logging(spec)
    module, name = target.split(":")
    fn = getattr(importlib.import_module(module), name)
    if local_rank > 0:
        fn(cfg, **kwargs)
        return
    try:
        value = fn(cfg, **kwargs)
    except BaseException as err:
        err.add_note(f"rank 0 of the job:\n{traceback.format_exc()[-8000:]}")
        try:
            pickle.loads(pickle.dumps(err))
        except Exception:
            err = RuntimeError(f"{type(err).__name__}: {err}")
        result.put((False, err))
        sys.exit(1)
    result.put((True, value))


def fsdp_strategy(devices: Any = 1, num_nodes: int = 1, save_distributed_checkpoint: bool = False, **kwargs: Any):
    """``trainer=fsdp``: FSDP2 through Lightning's ``ModelParallelStrategy`` with every rank in one data-parallel
    group (``devices`` x ``num_nodes``); runs on GPUs and, unlike Lightning's FSDP1, on CPU.
    ``save_distributed_checkpoint=False`` writes single-file checkpoints any run can load.

    Raises:
        ConfigError: ``devices`` is not a device count or list (``auto``, ``-1``)."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    from xformer.errors import ConfigError

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
        data_parallel_size=count * int(num_nodes), save_distributed_checkpoint=save_distributed_checkpoint, **kwargs
    )


def logging_spec() -> dict:
    """The root logger's level and stream/file handlers in a form that pickles, for :func:`replay_logging`."""
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
    """Give a spawned rank, which starts without Hydra's logging, the job process's handlers (``spec`` from
    :func:`logging_spec`); a process that has handlers is left as it is."""
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
