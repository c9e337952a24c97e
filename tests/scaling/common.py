"""Shared settings of the scaling tests: tiny jobs of run.py in subprocesses (CPU, gloo, 1 thread)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.conftest import TINY as BASE_TINY

# a 2x32 Transformer on 300 number pairs; tokens_per_batch=72 gives odd batch counts for val (5) and
# test@long (5), so 2-rank evaluation pads a duplicate batch that must not be counted twice
TINY = [
    *BASE_TINY,
    "data.tokens_per_batch=72",
    "model.dropout=0.0",
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
]
DDP_CPU = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


def env(tmp_path: Path, **extra: str) -> dict:
    """Subprocess environment: offline W&B, a private cache, one thread per process."""
    out = {
        **os.environ,
        "WANDB_MODE": "offline",
        "XFORMER_CACHE": str(tmp_path / "cache"),
        "HYDRA_FULL_ERROR": "0",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "WANDB_SILENT": "true",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        **extra,
    }  # PYTHONPATH: launcher workers (submitit) import xformer even without `pip install -e .`
    out.pop("WANDB_API_KEY", None)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
        out.pop(key, None)  # never inherit a distributed environment
    return out


def run_py(
    args: list[str], cwd: Path, tmp_path: Path, timeout: float = 240, prefix: list[str] | None = None, **extra: str
) -> subprocess.CompletedProcess:
    """``python run.py *args`` in ``cwd`` (``prefix`` replaces ``[python, run.py]``, e.g. for torchrun)."""
    cmd = (prefix or [sys.executable, str(REPO / "run.py")]) + list(args)
    return subprocess.run(cmd, cwd=cwd, env=env(tmp_path, **extra), capture_output=True, text=True, timeout=timeout)


def fail_msg(res: subprocess.CompletedProcess) -> str:
    return f"rc={res.returncode}\nSTDOUT:\n{res.stdout[-3000:]}\nSTDERR:\n{res.stderr[-5000:]}"


def metrics(job_dir: Path) -> dict:
    return json.loads((job_dir / "metrics.json").read_text())


def wandb_run_files(job_dir: Path) -> list[Path]:
    """The offline W&B run files (``run-<id>.wandb``) under a job folder."""
    return sorted(job_dir.glob("wandb/offline-run-*/run-*.wandb"))
