"""Which checkpoint a job loads: ``ckpt_path`` as given, the job's own ``last.ckpt``, or a requeued SLURM
job's own. Imports neither torch nor Lightning: ``run.py`` resolves ``ckpt_path`` first."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from xformer.train.checkpoint_file import UnreadableCheckpoint, read_checkpoint

log = logging.getLogger("xformer")


def slurm_job_key() -> str | None:
    """``"<cluster>/<job id>"`` of this SLURM job (kept across requeues), None outside SLURM."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"{os.environ.get('SLURM_CLUSTER_NAME', '')}/{job}" if job else None


def last_checkpoint(out_dir: str | Path) -> Path:
    """Where a job in ``out_dir`` keeps the checkpoint it resumes from."""
    return Path(out_dir) / "checkpoints" / "last.ckpt"


def resolve_ckpt_path(cfg: DictConfig, out_dir: str | Path | None, warn: bool = False) -> str | None:
    """The checkpoint file a run loads: in ``mode=train`` a requeued SLURM job's own ``last.ckpt`` first, else
    ``ckpt_path``; ``last``: :func:`last_checkpoint` if it exists (else ``None``, warned when ``warn``)."""
    ckpt = cfg.get("ckpt_path")
    if cfg.get("mode", "train") == "train" and (own := requeued_checkpoint(out_dir, announce=warn)) is not None:
        return str(own)
    if not ckpt:
        return None
    if ckpt != "last":
        return str(ckpt)
    last = last_checkpoint(out_dir or ".")
    if out_dir is not None and last.is_file():
        return str(last)
    if warn:
        fix = "to resume a job, pass its folder: hydra.run.dir=<job dir>"
        log.warning("ckpt_path=last: no %s yet, starting from scratch (%s)", last, fix)
    return None


def requeued_checkpoint(out_dir: str | Path | None, announce: bool = False) -> Path | None:
    """``<out_dir>/checkpoints/last.ckpt`` when this process is a requeued SLURM job and this same job wrote that
    checkpoint (its ``xformer.slurm_job``), else None. ``announce``: global rank 0 logs the resume."""
    key = slurm_job_key()
    restarts = os.environ.get("SLURM_RESTART_COUNT", "")  # how often SLURM requeued and restarted this job
    if out_dir is None or key is None or not restarts.isdigit() or int(restarts) < 1:
        return None
    last = last_checkpoint(out_dir)
    if not last.is_file():
        return None
    try:
        ckpt = read_checkpoint(last) or {}
        meta = ckpt.get("xformer") or {}
    except UnreadableCheckpoint as err:
        log.warning("requeued SLURM job %s: %s is unreadable (%s); starting from scratch", key, last, err)
        return None
    if (writer := meta.get("slurm_job")) != key:
        why = f"was written by {writer or 'a run outside SLURM'}, not by this job"
        log.warning("requeued SLURM job %s: %s %s; starting from scratch", key, last, why)
        return None
    if announce and os.environ.get("SLURM_PROCID", "0") == "0":
        line = "requeued SLURM job %s (restart %s): resuming by itself from %s at step %s"
        log.warning(line, key.split("/", 1)[1], restarts, last, ckpt.get("global_step"))
    return last


def checkpoint_step(path: str | Path) -> int | None:
    """``global_step`` stored in a Lightning checkpoint (memory-mapped: tensors are not read)."""
    try:
        ckpt = read_checkpoint(path)
    except UnreadableCheckpoint:  # Lightning reports it when it loads the checkpoint
        return None
    step = ckpt.get("global_step") if isinstance(ckpt, dict) else None
    return int(step) if step is not None else None
