"""A one-node SLURM cluster on this machine for the ``cluster`` tests (``scripts/slurm-localhost.sh``).

The session fixture starts it (installing slurm-wlm and munge with apt when absent), or skips the
tests with one line saying why (not root, no apt, the daemons did not start); it stops the cluster
at the end when it started it and no other test process still uses it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "slurm-localhost.sh"
STATE = Path(os.environ.get("XFORMER_SLURM_DIR", "/tmp/xformer-slurm"))
PYTHON = sys.executable


@dataclass
class Cluster:
    """The running cluster: its ``SLURM_CONF`` and default partition."""

    conf: str
    partition: str = "cpu"

    def env(self, tmp: Path, **extra: str) -> dict:
        """A job environment: this cluster, offline W&B, a private cache, one thread, the repository
        importable (launcher workers import xformer and the tests' callbacks)."""
        env = {
            **os.environ,
            "SLURM_CONF": self.conf,
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "XFORMER_CACHE": str(tmp / "cache"),
            "HYDRA_FULL_ERROR": "0",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONFAULTHANDLER": "1",  # a stuck job's stacks on SIGABRT (Cluster.diagnose)
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            **extra,
        }
        env.pop("WANDB_API_KEY", None)
        for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            env.pop(key)  # never look like a job of the SLURM allocation pytest may run in
        for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
            env.pop(key, None)
        return env

    def run(self, args: list[str], tmp: Path, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
        """A SLURM command (``sbatch``, ``squeue``, ...) against this cluster."""
        return subprocess.run(args, env=self.env(tmp, **extra), capture_output=True, text=True, timeout=timeout)

    def sbatch(self, script: Path, tmp: Path) -> str:
        """Submit ``script``; returns the job id."""
        res = self.run(["sbatch", "--parsable", str(script)], tmp)
        assert res.returncode == 0, res.stderr
        return res.stdout.strip().split(";")[0]

    def wait_gone(self, job: str, tmp: Path, timeout: float = 400) -> None:
        """Wait until ``job`` has left the queue (finished, failed or cancelled, requeues included)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.run(["squeue", "-h", "-j", job, "-o", "%T"], tmp)
            if not res.stdout.strip():
                return
            time.sleep(1)
        why = self.diagnose(job, tmp)
        self.run(["scancel", job], tmp)
        raise AssertionError(f"SLURM job {job} still queued after {timeout} s\n{why}")

    def diagnose(self, job: str, tmp: Path) -> str:
        """What a job stuck in the queue was doing: its state and reason, the nodes, the controller's and the
        nodes' log lines about it, the Python stacks of its processes (``SIGABRT`` under ``PYTHONFAULTHANDLER``,
        written to the job's output) and the end of every job output under ``tmp``."""
        parts = []
        for args in (
            ["squeue", "-h", "-o", "%i %T %r %M %j %N"],
            ["sinfo", "-N", "-o", "%N %T %C %E"],
            ["scontrol", "show", "job", job],
        ):
            res = self.run(args, tmp)
            parts.append(f"$ {' '.join(args)}\n{res.stdout}{res.stderr}")
        state = Path(self.conf).parent / "log"
        for log in sorted(state.glob("*.log")):
            lines = [
                ln
                for ln in log.read_text(errors="replace").splitlines()
                if re.search(rf"(JobId=|[Jj]ob |StepId=|\[){job}\b", ln)
            ]
            parts.append(f"--- {log.name} (lines naming job {job}, last 25)\n" + "\n".join(lines[-25:]))
        self.run(["scancel", "--signal=ABRT", job], tmp)  # its steps' processes (srun's tasks)
        time.sleep(5)
        for out in sorted(tmp.rglob("*.out")):
            lines = out.read_text(errors="replace").splitlines()
            parts.append(f"--- {out} (last 80 lines)\n" + "\n".join(lines[-80:]))
        return "\n".join(parts)

    def queued(self, tmp: Path, settle: float = 30) -> list[str]:
        """This test's jobs still in the queue (any state) after up to ``settle`` seconds: jobs whose
        batch script or work directory lies under ``tmp`` (other test processes share the cluster),
        given the time a job that has written its result needs to exit and leave the queue."""
        deadline = time.monotonic() + settle
        while True:
            lines = self.run(["squeue", "-h", "-o", "%i %T %j|%o|%Z"], tmp).stdout.splitlines()
            mine = [line.split("|")[0] for line in lines if str(tmp) in line]
            if not mine or time.monotonic() >= deadline:
                return mine
            time.sleep(1)


def _cannot_start() -> str | None:
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "cluster: not a POSIX system"
    if os.geteuid() != 0:
        return "cluster: not root (scripts/slurm-localhost.sh starts slurmctld, slurmd and munged as root)"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "cluster: no slurmctld and no apt-get to install slurm-wlm"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> Cluster:
    """The one-node cluster (started once per test process; skips with the reason when it cannot start)."""
    if (why := _cannot_start()) is not None:
        pytest.skip(why)
    was_up = subprocess.run([str(SCRIPT), "status"], capture_output=True).returncode == 0
    res = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        lines = (res.stderr or res.stdout).strip().splitlines()
        pytest.skip(f"cluster: {lines[-1] if lines else 'scripts/slurm-localhost.sh start failed'}")
    conf = res.stdout.strip().splitlines()[-1].split("=", 1)[1]
    users = STATE / "users"
    users.mkdir(parents=True, exist_ok=True)
    mine = users / str(os.getpid())
    mine.touch()
    yield Cluster(conf=conf)
    mine.unlink(missing_ok=True)
    others = [p for p in users.iterdir() if p.name.isdigit() and _alive(int(p.name))]
    if not was_up and not others:
        subprocess.run([str(SCRIPT), "stop"], capture_output=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def metrics(job_dir: Path) -> dict:
    return json.loads((job_dir / "metrics.json").read_text())


def records(path: Path) -> list[dict]:
    """The JSON lines ``tests.cluster.signals.SlurmSignalAt`` wrote."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
