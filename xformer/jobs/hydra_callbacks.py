"""Every Hydra callback of xformer (``conf/hydra/default.yaml``), each a thin shell over the module that does the
work (the sweep modules imported under ``-m`` only). Imports neither torch nor Lightning."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from typing_extensions import override

from xformer.config.check import check_resolves
from xformer.errors import ConfigError

from .record import write_json

log = logging.getLogger("xformer")


def refuse(text: str, err: BaseException | None = None) -> NoReturn:
    """Print ``text`` (its ``error:`` lines) on stderr, not logged (it would show twice), and exit 2; with
    ``HYDRA_FULL_ERROR=1`` raise ``err`` instead, when given."""
    if err is not None and os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(text, file=sys.stderr, flush=True)
    sys.exit(2)


def check_output_dir(path: str | os.PathLike, key: str = "hydra.run.dir", keep: bool = True) -> list[Path]:
    """Make the output folder and write a probe file in it, so an unwritable folder fails here with its name;
    ``keep=False`` removes the folders it created. Returns those folders, deepest first. Raises: ConfigError."""
    folder = Path(str(path)).expanduser()
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"{key}={path}: cannot create the folder ({err.strerror or err}). Fix: set {key} "
            f"to a writable folder, e.g. {key}=outputs/my_run"
        ) from None
    probe = folder / f".xformer-write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise ConfigError(
            f"{key}={path}: cannot write into the folder ({err.strerror or err}). Fix: free space "
            f"there or set {key} to a writable folder, e.g. {key}=outputs/my_run"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
        for made in created if not keep else []:  # deepest first
            try:
                made.rmdir()
            except OSError:
                break
    return created


#: The folders :class:`OutputDirCheck` created for this process's single run (``hydra.run.dir`` and the parents
#: that did not exist), deepest first: what :func:`forget_refused_run` may remove.
_MADE_FOR_RUN: list[Path] = []


def forget_refused_run(out_dir: str | os.PathLike) -> bool:
    """Remove the folder of a single run refused before it trained, with the empty parents made for it, when this
    process created it (:class:`OutputDirCheck`) and it holds no checkpoint. Returns whether it was removed."""
    folder = Path(out_dir).resolve()
    made = [p.resolve() for p in _MADE_FOR_RUN]
    if not made or made[0] != folder or any(folder.rglob("*.ckpt")):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    for parent in made[1:]:
        try:
            parent.rmdir()
        except OSError:  # holds other runs
            break
    return not folder.exists()


class OutputDirCheck(Callback):
    """:func:`check_output_dir` on ``hydra.run.dir`` or ``hydra.sweep.dir`` before Hydra creates it."""

    def _check(self, config: DictConfig, key: str, keep: bool = True) -> list[Path]:
        try:
            return check_output_dir(OmegaConf.select(config, key), key, keep)
        except ConfigError as err:
            refuse(f"error: {err}")

    @override
    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        _MADE_FOR_RUN[:] = self._check(config, "hydra.run.dir")

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config, "hydra.sweep.dir", keep=False)  # the launcher makes it when the first job starts


class _Switch(Callback):
    """A callback that ``enabled=false`` turns off."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled


class EngineCheck(_Switch):
    """Refuse a command whose sweeper, launcher or logger cannot run here (:func:`.engines.engine_problem`) with
    one ``error:`` line and exit 2, before any folder is made."""

    def _check(self, config: DictConfig, multirun: bool) -> None:
        from .engines import engine_problem

        if self.enabled and (problem := engine_problem(config, multirun)) is not None:
            refuse(f"error: {problem}", ConfigError(problem))

    @override
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, multirun=False)

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, multirun=True)


class ValidateSweep(_Switch):
    """Fail a ``-m`` sweep before its first job when any job's config is invalid (at most ``max_listed`` shown)."""

    def __init__(self, enabled: bool = True, max_listed: int = 20) -> None:
        super().__init__(enabled)
        self.max_listed = max_listed

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not self.enabled:
            return
        t0 = time.perf_counter()
        try:  # what every job shares (an environment variable not set): one line, before composing each job
            check_resolves(config)
        except ConfigError as err:
            refuse(f"error: {err} (every job of the sweep; nothing was run)", err)
        from .sweep import check_sweep, error_lines

        n_jobs, bad = check_sweep(config)
        if bad:
            refuse("\n".join(error_lines(n_jobs, bad, self.max_listed)), bad[0][2])
        log.info("sweep: the configs of all %d jobs are valid (checked in %.1f s)", n_jobs, time.perf_counter() - t0)


class ReportNeeds(_Switch):
    """Log at a sweep's start what ``xformer report`` will need to decide it (:func:`.sweep.report_needs`)."""

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from .sweep import report_needs

        if self.enabled and (line := report_needs(config)) is not None:
            log.info("%s", line)


class ResumeSweep(_Switch):
    """Record the configs of the existing job folders and refuse a sweep whose jobs would mix configs
    (:mod:`.sweep_resume`)."""

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from . import sweep_resume
        from .sweep import sweep_mismatches

        sweep_dir = Path(str(config.hydra.sweep.dir))
        record = sweep_dir / sweep_resume.RECORDED_FILE
        if not self.enabled or not OmegaConf.select(config, "sweep.resume", default=True):
            record.unlink(missing_ok=True)
            return
        jobs = [d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()] if sweep_dir.is_dir() else []
        recorded = {d.name: rec for d in jobs if (rec := sweep_resume.recorded_config(d)) is not None}
        write_json(record, recorded)
        if not recorded:
            return
        checked = sweep_mismatches(config, recorded)
        if checked is None:  # a sweeper that cannot be enumerated: every job checks itself
            return
        n_jobs, bad = checked
        counts = sweep_resume.sweep_counts(sweep_dir, recorded, n_jobs)
        if not bad:
            line = "sweep resume: %s: %d finished jobs skipped, %d resumed from last.ckpt, %d to run"
            log.info(line, sweep_dir, *counts)
            return
        num, overrides, diff = bad[0]
        more = f" (and {len(bad) - 1} more jobs)" if len(bad) > 1 else ""
        refuse(
            f"error: hydra.sweep.dir={sweep_dir}: job {num} ({' '.join(overrides) or 'defaults'}) was run "
            f"there with another config: {sweep_resume.describe_diff(diff)}{more}; nothing was run. Give this sweep a "
            f"new hydra.sweep.dir, or restore the recorded values (sweep.resume=false reruns every job from scratch)"
        )


class FreezeClaims(_Switch):
    """Freeze the declarations that read this sweep into ``<sweep dir>/preregistration.json`` before its first
    job (:mod:`.preregister`)."""

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from . import preregister
        from .sweep import sweep_jobs

        experiment = OmegaConf.select(config, "hydra.runtime.choices.experiment", default=None)
        if not self.enabled or not experiment or OmegaConf.select(config, "sweep.dry_run", default=False):
            return
        declarations = preregister.declarations_reading(str(experiment).rsplit("/", 1)[-1])
        if not declarations:
            return
        try:
            n_jobs: int | None = len(sweep_jobs(config))
        except Exception:  # a sweeper whose jobs cannot be listed up front (Optuna): the count stays unknown
            n_jobs = None
        sweep_dir = Path(str(config.hydra.sweep.dir))
        record = preregister.freeze(sweep_dir, declarations, n_jobs)
        for name in declarations:
            sha, done = record["claims"][name]["sha256"][:12], record["claims"][name]["jobs_finished"]
            line = "preregistration: %s frozen into %s (sha256 %s, %s jobs finished then)"
            log.info(line, name, sweep_dir / preregister.FILE, sha, done)


class SweepSummary(Callback):
    """Write ``<sweep dir>/sweep_summary.json`` (:func:`.sweep.write_sweep_summary`)."""

    def __init__(self, exit_on_failure: bool = True) -> None:
        self.exit_on_failure = exit_on_failure

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from .sweep import JOBS_DIR

        storage = OmegaConf.select(config, "hydra.sweeper.storage", default=None)
        if isinstance(storage, str) and storage.startswith("sqlite:///"):  # SQLite does not create folders
            Path(storage[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        jobs = Path(str(config.hydra.sweep.dir)) / JOBS_DIR
        # every job records itself again; a stored Optuna study numbers new trials after the earlier ones
        if jobs.is_dir() and "optuna" not in str(OmegaConf.select(config, "hydra.sweeper._target_", default="")):
            for f in jobs.glob("*.json"):
                f.unlink()

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from . import sweep

        sweeper = OmegaConf.select(config, "hydra.sweeper")
        sweep.write_sweep_summary(Path(str(config.hydra.sweep.dir)), config, sweeper, self.exit_on_failure)


class SlurmSweepCheck(Callback):
    """Under ``hydra/launcher=slurm``: refuse the sweep before anything is queued when SLURM would refuse its jobs,
    quiet submitit's sacct warnings, and end a dry run here (one line per job, exit 0, nothing queued)."""

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from . import slurm
        from .sweep import sweep_jobs

        if not slurm.is_slurm_sweep(config):
            return
        slurm.quiet_sacct_warnings()
        if (problem := slurm.sweep_problem(config, jobs := sweep_jobs(config))) is not None:
            refuse(f"error: {problem}", ConfigError(problem))
        if OmegaConf.select(config, "sweep.dry_run", default=False):
            for num, overrides in enumerate(jobs):
                print(f"[dry run] job {num}: {' '.join(overrides) or '(defaults)'} -> config ok", flush=True)
            print(f"[dry run] hydra/launcher=slurm: {len(jobs)} jobs checked here; nothing was queued", flush=True)
            sys.exit(0)
