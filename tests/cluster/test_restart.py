"""``scripts/slurm-localhost.sh start`` after a run of the cluster was killed (a session or CI stopped
mid-test): the cluster begins with an empty queue, so no job saved by the killed run holds its CPUs.

In ``make test-slow`` (one process), not in the ``cluster`` set that CI runs with two processes: while the
other localhost clusters launch jobs at the same time, this third cluster's launches fail ("launch failed
requeued held"); with them idle it runs as a real cluster does."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import SCRIPT, _cannot_start

pytestmark = pytest.mark.slow

PORT = 17110  # beside the one-node (6817) and two-node (17010..) clusters of the other tests
MARK = "600.17110"  # the jobs' `sleep` argument, so that only this test's tasks are killed


def _run(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=timeout)


def _kill_daemons(state: Path) -> None:
    """SIGKILL this cluster's slurmctld and slurmd (by their pid files) and its jobs' tasks, as a killed session
    leaves them: the saved state stays on disk."""
    for pidfile in state.glob("*.pid"):
        try:
            os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass
    subprocess.run(["pkill", "-9", "-f", f"sleep {MARK}"], capture_output=True)
    time.sleep(1)


def test_start_after_a_killed_run_begins_with_an_empty_queue(tmp_path):
    if (why := _cannot_start()) is not None:
        pytest.skip(why)
    state = tmp_path / "slurm"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
        "XFORMER_SLURM_DIR": str(state),
        "XFORMER_SLURM_PORT": str(PORT),
        "SLURM_CONF": str(state / "slurm.conf"),
    }
    script = tmp_path / "hold.sh"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --ntasks-per-node=2\n#SBATCH --output={tmp_path}/%j.out\nsrun sleep {MARK}\n"
    )
    try:
        res = _run(env, str(SCRIPT), "start", timeout=600)
        if res.returncode != 0:
            pytest.skip(f"cluster: {(res.stderr or res.stdout).strip().splitlines()[-1:]}")
        held = [_run(env, "sbatch", "--parsable", str(script)).stdout.strip() for _ in range(2)]
        deadline = time.monotonic() + 300  # the first holds both CPUs, the second waits; both saved to disk
        while time.monotonic() < deadline:
            states = _run(env, "squeue", "-h", "-o", "%T").stdout.split()
            if sorted(states) == ["PENDING", "RUNNING"]:
                break
            time.sleep(1)
        queue = _run(env, "squeue", "-h", "-o", "%i %T %r").stdout + _run(env, "sinfo", "-N", "-o", "%N %T %C").stdout
        assert sorted(states) == ["PENDING", "RUNNING"], queue
        time.sleep(10)  # slurmctld writes its job state a few seconds after a change
        _kill_daemons(state)

        res = _run(env, str(SCRIPT), "start", timeout=600)
        assert res.returncode == 0, res.stderr
        queue = _run(env, "squeue", "-h", "-o", "%i %T %r").stdout.strip()
        assert queue == "", f"jobs {held} of the killed run came back: {queue}"
        job = tmp_path / "two.sh"
        job.write_text(f"#!/bin/bash\n#SBATCH --ntasks-per-node=2\n#SBATCH --output={tmp_path}/two.out\nsrun true\n")
        jid = _run(env, "sbatch", "--parsable", str(job)).stdout.strip()
        deadline = time.monotonic() + 120  # a job asking for every CPU starts and ends
        while _run(env, "squeue", "-h", "-j", jid).stdout.strip() and time.monotonic() < deadline:
            time.sleep(1)
        assert not _run(env, "squeue", "-h", "-j", jid).stdout.strip(), f"job {jid} still queued after 120 s"
    finally:
        _run(env, str(SCRIPT), "stop")
        _kill_daemons(state)
