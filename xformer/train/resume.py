"""Resuming a job in its own folder, and W&B runs that never stop training.

A job resumes when it is started again with ``ckpt_path=last`` (or a checkpoint inside its folder)
and the same ``hydra.run.dir``; Lightning restores weights, optimizer, LR scheduler, step counters
and the data position from the checkpoint (see :mod:`xformer.train.callbacks` and
:class:`xformer.data.batching.ResumableDataLoader`). This module handles the job folder's logs:

* :class:`ResumableCSVLogger` keeps ``csv/metrics.csv`` rows logged before the checkpoint's step
  (Lightning's ``CSVLogger`` would delete the file) and drops the later ones, which the resumed run
  logs again -- so the history reads like one uninterrupted run.
* :func:`wandb_resume_kwargs` passes the job's previous W&B run id (stored in ``wandb_id.txt``)
  with ``resume="allow"``, so the resumed part continues the same W&B run.
* :func:`start_wandb` starts the W&B run as soon as the logger exists. If an online run cannot be
  started (no network, W&B down, bad key, ``WANDB_BASE_URL`` unreachable) it logs one warning and
  starts the run offline instead (``wandb sync <dir>`` uploads it later). The online attempt is
  bounded by W&B's ``init_timeout`` (``WANDB_INIT_TIMEOUT`` seconds; W&B's default is 90). Without
  an API key the driver never tries online (``driver.build_loggers``).

Secrets: the API key is read by W&B from the environment / ``~/.netrc`` only; xformer never puts it
in the config, ``metrics.json`` or its logs.
"""

from __future__ import annotations

import csv
import logging
import os
from pathlib import Path
from typing import Any, Callable

from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig

log = logging.getLogger("xformer")

WANDB_ID_FILE = "wandb_id.txt"


def own_checkpoint(cfg: DictConfig, out_dir: Path) -> Path | None:
    """The checkpoint this job resumes from when it is one of its own (``ckpt_path=last`` with an
    existing ``checkpoints/last.ckpt``, or a path inside ``out_dir``), else None."""
    ckpt = cfg.get("ckpt_path")
    if cfg.get("mode", "train") != "train" or not ckpt:
        return None
    if ckpt == "last":
        last = out_dir / "checkpoints" / "last.ckpt"
        return last if last.is_file() else None
    try:
        path = Path(str(ckpt)).resolve()
        return path if path.is_file() and path.is_relative_to(out_dir.resolve()) else None
    except OSError:
        return None


def checkpoint_step(path: Path) -> int | None:
    """``global_step`` stored in a Lightning checkpoint (memory-mapped: tensors are not read)."""
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception:  # unreadable: Lightning reports it when it loads the checkpoint
        return None
    step = ckpt.get("global_step") if isinstance(ckpt, dict) else None
    return int(step) if step is not None else None


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` that, when ``keep_before`` is set, keeps the rows of an existing
    ``metrics.csv`` whose ``step`` is below it (they are written back first) instead of deleting
    the file. Rows are flushed at every logged step (``flush_logs_every_n_steps=1`` by default), so
    a killed run's file holds everything up to its last step."""

    def __init__(self, *args: Any, keep_before: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("flush_logs_every_n_steps", 1)
        super().__init__(*args, **kwargs)
        self._keep_before = keep_before

    @property
    def experiment(self):
        from lightning.pytorch.utilities.rank_zero import rank_zero_only

        if self._experiment is not None or self._keep_before is None or getattr(rank_zero_only, "rank", 0):
            return super().experiment
        path = Path(self.log_dir) / "metrics.csv"
        rows: list[dict] = []
        if path.is_file():
            with open(path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if r.get("step", "").isdigit()
                        and int(r["step"]) < self._keep_before]
        writer = super().experiment  # deletes metrics.csv
        if rows:
            kept = [{k: (int(v) if k == "step" else v) for k, v in r.items() if v != ""} for r in rows]
            writer.metrics[:0] = kept
            writer.save()
        return writer


def wandb_resume_kwargs(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """``{"id": <previous run id>, "resume": "allow"}`` when this job resumes its own checkpoint and
    ``wandb_id.txt`` exists, else ``{}`` (a new run)."""
    id_file = out_dir / WANDB_ID_FILE
    if not id_file.is_file() or own_checkpoint(cfg, out_dir) is None:
        return {}
    run_id = id_file.read_text().strip()
    return {"id": run_id, "resume": "allow"} if run_id else {}


def _forget_failed_run() -> None:
    """Shut down this process's W&B service after a failed ``wandb.init``.

    The service keeps the run id of the failed online attempt registered, so an offline retry with
    the same id -- a resumed job passes its previous id -- fails with "run ID ... is in use". A fresh
    service (started by the next ``wandb.init``) knows no run.
    """
    try:
        import wandb

        wandb.teardown()
    except Exception as err:  # nothing to shut down, or already gone: the retry reports real problems
        log.debug("W&B teardown after a failed start: %s", err)


def start_wandb(make_logger: Callable[..., Any], out_dir: Path) -> Any:
    """Create a ``WandbLogger`` with ``make_logger(**extra)`` and start its run now (rank 0 only).

    Falls back to an offline run with one warning when the online run cannot start -- under the same
    run id when the job resumes one (the W&B service is restarted in between, see
    :func:`_forget_failed_run`); records the run id in ``<out_dir>/wandb_id.txt``.

    Raises:
        Exception: whatever W&B raises when the offline run cannot start either, or when an offline
            run (``WANDB_MODE=offline``) fails to start.
    """
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    logger = make_logger()
    if getattr(rank_zero_only, "rank", 0) != 0:
        return logger
    try:
        run = logger.experiment
    except Exception as err:
        if os.environ.get("WANDB_MODE") in ("offline", "dryrun", "disabled"):
            raise
        first = (str(err).splitlines() or [""])[0][:200]
        log.warning("W&B: could not start an online run (%s: %s); logging offline instead, upload later "
                    "with `wandb sync`", type(err).__name__, first)
        os.environ["WANDB_MODE"] = "offline"
        _forget_failed_run()
        logger = make_logger(mode="offline")
        run = logger.experiment
    run_id = getattr(run, "id", None)
    if isinstance(run_id, str) and run_id:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / WANDB_ID_FILE).write_text(run_id + "\n")
    return logger
