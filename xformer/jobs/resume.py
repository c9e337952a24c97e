"""Resuming a job in its own folder: the checkpoint it resumes from and its CSV history.

A job resumes when it is started again with ``ckpt_path=last`` (or a checkpoint inside its folder)
and the same ``hydra.run.dir``; Lightning restores weights, optimizer, LR scheduler, step counters
and the data position from the checkpoint (see :mod:`xformer.jobs.callbacks` and
:class:`xformer.data.batching.ResumableDataLoader`). This module handles the job folder's logs:

* :class:`ResumableCSVLogger` keeps ``csv/metrics.csv`` rows logged before the checkpoint's step
  (Lightning's ``CSVLogger`` would delete the file) and drops the later ones, which the resumed run
  logs again -- so the history reads like one uninterrupted run.

The job's W&B run continues too (:func:`xformer.jobs.wandb_run.wandb_resume_kwargs`).
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig

from xformer.jobs.lightning_compat import logger_started


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

        if logger_started(self) or self._keep_before is None or getattr(rank_zero_only, "rank", 0):
            return super().experiment
        path = Path(self.log_dir) / "metrics.csv"
        rows: list[dict] = []
        if path.is_file():
            with open(path, newline="") as f:
                rows = [
                    r for r in csv.DictReader(f) if r.get("step", "").isdigit() and int(r["step"]) < self._keep_before
                ]
        with warnings.catch_warnings():  # "Previous log files ... will be deleted": false, they are kept
            warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
            writer = super().experiment  # deletes metrics.csv (its rows before the checkpoint come back below)
        if rows:
            kept = [{k: (int(v) if k == "step" else v) for k, v in r.items() if v != ""} for r in rows]
            writer.metrics[:0] = kept
            writer.save()
        return writer
