"""What one job of ``run.py`` is (:class:`JobContext`, worked out once) and how it ended (:func:`outcome_of`,
the one mapping to a status and an exit code)."""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from xformer.errors import ConfigError
from xformer.hydra_job import sweep_dir as hydra_sweep_dir

from .checkpoints import checkpoint_step, resolve_ckpt_path
from .overrides import sweep_job_facts
from .record import Status

log = logging.getLogger("xformer")

if TYPE_CHECKING:
    from .record import RunRecord
    from .sweep_resume import Plan


@dataclass(frozen=True)
class JobContext:
    """One job's facts, passed down from ``run.py``."""

    out_dir: Path  # Hydra's output dir, else paths.output_dir
    ckpt: str | None = None  # the checkpoint loaded (resume in mode=train, the weights in mode=eval)
    overrides: tuple[str, ...] = ()
    choices: dict = field(default_factory=dict)  # Hydra's group choices
    sweep_dir: Path | None = None  # with num: the sweep folder and job number under -m
    num: int | None = None
    plan: Plan | None = None  # under -m with sweep.resume: skip, resume, run or refuse (.sweep_resume)
    dry_run: bool = False
    in_hydra: bool = False  # False when the driver is called directly, as tests do
    job: dict | None = None  # a -m job's own info() for the ranks it runs under torchrun
    resumed: Path | None = None  # ckpt when mode=train resumes one of this job's own checkpoints

    @property
    def multirun(self) -> bool:
        return self.sweep_dir is not None

    @cached_property
    def step(self) -> int | None:
        """The ``global_step`` stored in :attr:`ckpt` (None without one), read once."""
        return checkpoint_step(self.ckpt) if self.ckpt is not None else None

    def info(self) -> dict:
        """The ``job`` section of ``metrics.json``."""
        if self.job is not None:
            return dict(self.job)
        if not self.in_hydra:
            return {"overrides": [], "multirun": False}
        return {
            "output_dir": str(self.out_dir),
            "overrides": list(self.overrides),
            "multirun": self.multirun,
            "sweep_dir": str(self.sweep_dir) if self.multirun else None,
            "job_num": self.num,
            "choices": dict(self.choices),
        }


def _own(ckpt: str | None, out_dir: Path, mode: str) -> Path | None:
    """``ckpt`` when ``mode=train`` resumes it from inside the job's folder ``out_dir`` (:attr:`JobContext.resumed`)."""
    if ckpt is None or mode != "train":
        return None
    try:  # a name the file system refuses (too long) is no file of the job's: the config check names it
        path = Path(ckpt).resolve()
        return path if path.is_file() and path.is_relative_to(out_dir.resolve()) else None
    except OSError:
        return None


def job_context(cfg: DictConfig) -> JobContext:
    """The context of the job ``cfg`` describes, its checkpoint resolved once (a sweep job to resume gets
    ``cfg.ckpt_path=last``)."""
    dry, mode = bool(OmegaConf.select(cfg, "sweep.dry_run", default=False)), cfg.get("mode", "train")
    if not HydraConfig.initialized():
        out_dir = Path(cfg.paths.output_dir)
        ckpt = None if dry else resolve_ckpt_path(cfg, out_dir, warn=True)
        return JobContext(out_dir, ckpt, dry_run=dry, resumed=_own(ckpt, out_dir, mode))
    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)
    sweep_dir = hydra_sweep_dir(hc)
    num = int(hc.job.num) if sweep_dir is not None else None
    plan = None
    if sweep_dir is not None and not dry and OmegaConf.select(cfg, "sweep.resume", default=True):
        from .sweep_resume import plan_job, recorded_for

        plan = plan_job(cfg, out_dir, recorded_for(sweep_dir, num))
        if plan.action == "resume":
            cfg.ckpt_path = "last"
    ckpt = None if dry or (plan and plan.action == "skip") else resolve_ckpt_path(cfg, out_dir, warn=True)
    sweep_job = sweep_job_facts().get("info") if sweep_dir is None else None
    task, choices = tuple(hc.overrides.task), dict(hc.runtime.choices)
    ctx = JobContext(
        out_dir, ckpt, task, choices, sweep_dir, num, plan, dry, True, sweep_job, _own(ckpt, out_dir, mode)
    )
    if plan is not None and plan.action == "resume":  # a sweep job killed earlier
        log.info("sweep resume: job %d continues from %s (step %s)", num, plan.checkpoint, ctx.step)
    return ctx


#: The exit codes of a job stopped by a signal, after last.ckpt was saved (128 + the signal's number).
STOPPED_EXIT_CODES = {Status.INTERRUPTED: 130, Status.PREEMPTED: 143}

#: A write refused for lack of space or permission: the run says how to resume, not a traceback.
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass(frozen=True)
class Outcome:
    """How a job ended: ``status``, ``exit_code``, the exception (None: ran to the end), the ``error:`` ``line``
    to print (None for a crash: its traceback is shown), the record's ``message`` and ``diverged``."""

    status: Status
    exit_code: int
    error: BaseException | None = None
    line: str | None = None
    message: str | None = None
    diverged: dict | None = None


def first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:1000]


def outcome_of(
    err: BaseException | None = None,
    rose: dict | None = None,
    ctrl_c: bool = False,
    step: int | None = None,
    out_dir: Path | None = None,
    peer_lost: str | None = None,
) -> Outcome:
    """The outcome of a job that ended with ``err`` (None: ran to the end; ``rose``: its validation loss ended
    above the first; ``ctrl_c``: Lightning's ``SystemExit`` after a KeyboardInterrupt; ``peer_lost``:
    :func:`~xformer.jobs.distributed.peer_lost_line`). Exit codes: docs/troubleshooting.md."""
    if err is None:
        return Outcome(Status.DIVERGED, 0, diverged=rose) if rose else Outcome(Status.FINISHED, 0)
    if isinstance(err, ConfigError):
        return Outcome(Status.FAILED, 2, err, str(err), first_line(err))
    from xformer.data.errors import DataError  # imports the data package (Lightning): only past a config error

    if isinstance(err, DataError):
        return Outcome(Status.FAILED, 2, err, str(err), first_line(err))
    if isinstance(err, OSError) and err.errno in DISK_ERRNOS:  # a full disk, a folder made read-only, ...
        line = (
            f"{err.filename or 'the output folder'}: {err.strerror}. Fix: free space or make it "
            f"writable, then resume with ckpt_path=last hydra.run.dir={out_dir}"
        )
        return Outcome(Status.FAILED, 1, err, line, first_line(err))
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from .callbacks import FIX, NonFiniteLossError

    # a non-finite training value: an outcome of the setting, not a crash
    if isinstance(err, NonFiniteLossError):
        diverged = {"step": err.step, "reason": err.reason}
        return Outcome(Status.DIVERGED, 1, err, str(err), str(err).splitlines()[0], diverged)
    if isinstance(err, RuntimeError) and (reason := next((w for t, w in _NON_FINITE.items() if t in str(err)), None)):
        at = None if step is None else step + 1  # the step in flight
        line = f"{reason} at step {at}; training stopped. {FIX}"
        return Outcome(Status.DIVERGED, 1, err, line, line, {"step": at, "reason": reason})
    if isinstance(err, (SIGTERMException, KeyboardInterrupt)) or ctrl_c:  # last.ckpt was saved (StopCheckpoint)
        sigint = not isinstance(err, SIGTERMException) or getattr(err, "stop_signal", None) == "SIGINT"
        status, how = (Status.INTERRUPTED, "Ctrl-C") if sigint else (Status.PREEMPTED, "SIGTERM")
        message = f"{status}: stopped by {how} at step {step}; last.ckpt was saved"
        return Outcome(status, STOPPED_EXIT_CODES[status], err, None, message)
    if peer_lost is not None:  # another rank was lost: the line, no traceback
        return Outcome(Status.FAILED, 1, err, peer_lost, peer_lost)
    return Outcome(Status.FAILED, 1, err, None, first_line(err))


#: torch's errors for non-finite training values: anomaly mode's NaN in backward (a non-finite loss or gradient
#: norm is NonFiniteLossGuard's NonFiniteLossError)
_NON_FINITE = {
    "returned nan values": "non-finite gradient (anomaly detection)",
    "returned inf values": "non-finite gradient (anomaly detection)",
}


def outcome_of_record(record: RunRecord | None, failure: str | None, stopped_by: str | None, n: int) -> Outcome:
    """The outcome of a ``-m`` job whose ``n`` ranks ran under ``torchrun``: from rank 0's ``record``, else from
    the signal that stopped it (``stopped_by``) or the rank that ``failure`` names."""
    if record is None:
        err = RuntimeError(failure or f"the job's {n} ranks ended before rank 0 wrote metrics.json")
        if stopped_by is not None and failure is None:  # stopped before rank 0 had a record: the sweep stops
            status = Status.INTERRUPTED if stopped_by == "SIGINT" else Status.PREEMPTED
            return Outcome(status, STOPPED_EXIT_CODES[status], err, None, f"{status}: stopped by {stopped_by}")
        return Outcome(Status.FAILED, 1, err, None, first_line(err))
    code = STOPPED_EXIT_CODES.get(record.status, 0 if record.status in (Status.FINISHED, Status.DIVERGED) else 1)
    code = code or (1 if record.error else 0)  # a non-finite loss: diverged, with an error
    err = RuntimeError(record.error or f"the job ended {record.status}") if code else None
    return Outcome(record.status, code, err, None, record.error, record.diverged)


def fallback(cfg: DictConfig) -> float:
    """The worst objective for ``objective.mode``, which a sweep job without one hands its sweeper."""
    return float("inf") if OmegaConf.select(cfg, "objective.mode", default="min") == "min" else float("-inf")
