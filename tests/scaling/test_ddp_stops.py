"""Stopping a DDP job part-way: a signal that reaches the ranks at different moments, a rank that dies, and
Ctrl-C or SIGTERM to a ``-m`` job whose ranks run under ``torchrun`` (xformer.jobs.distributed.run_job)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.scaling.common import DDP_CPU, TINY, env, fail_msg, metrics, run_py

pytestmark = pytest.mark.slow  # each test trains 2-rank DDP jobs, some twice

LONG = [*TINY, *DDP_CPU, "trainer.max_steps=400", "logger=csv"]  # far longer than the test waits


def _start(args: list[str], tmp_path: Path) -> subprocess.Popen:
    cmd = [sys.executable, str(REPO / "run.py"), *args]
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a signal to the group reaches only this run, as Ctrl-C at its terminal
        # SIGINT as at a terminal, also when the test session runs in the background (its SIGINT is ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for(proc: subprocess.Popen, text: str) -> list[str]:
    """Read ``proc``'s output until a line holds ``text``; the lines read."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError("the run ended before printing " + repr(text) + ":\n" + "".join(lines)[-4000:])


def _finish(proc: subprocess.Popen, lines: list[str], timeout: float = 240) -> str:
    """The rest of ``proc``'s output once it ends; a run still going after ``timeout`` s is killed (ranks
    waiting for each other do not end by themselves)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in _descendants(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"still running {timeout} s after the signal (ranks waiting for each other)") from None
    return "".join(lines) + out


def _descendants(root: int) -> set[int]:
    """The processes started by ``root``, directly or not (the ranks run in sessions of their own)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])
    tree, grown = {root}, True
    while grown:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree, grown = tree | more, bool(more)
    return tree - {root}


def _rank_pid(root: int, rank: int) -> int:
    """The process of ``rank`` (``RANK`` or ``LOCAL_RANK`` in its environment) among ``root``'s descendants."""
    found = []
    for pid in _descendants(root):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if {f"RANK={rank}".encode(), f"LOCAL_RANK={rank}".encode()} & set(environ):
            found.append(pid)
    (pid,) = found
    return pid


def test_sigterm_to_rank_one_alone_stops_both_ranks_after_the_same_step(tmp_path):
    """A single DDP run (rank 1 started by Lightning's launcher) whose rank 1 alone gets SIGTERM: the ranks
    agree after each batch, so both stop after the same step and rank 0 saves ``last.ckpt``. Lightning's own
    handler lets rank 1 leave the loop a step before rank 0, which then waits in the next step forever."""
    out = tmp_path / "run"
    proc = _start([*LONG, f"hydra.run.dir={out}"], tmp_path)
    lines = _wait_for(proc, "validation at step 4/")
    os.kill(_rank_pid(proc.pid, 1), signal.SIGTERM)
    text = _finish(proc, lines, timeout=120)
    assert proc.returncode == 143, text[-4000:]
    m = metrics(out)
    assert m["status"] == "preempted"
    step = m["global_step"]
    assert step >= 4 and f"stopped by SIGTERM at step {step}" in m["error"]
    import torch

    ckpt = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == step


@pytest.mark.parametrize(
    ("signum", "status", "code"), [(signal.SIGTERM, "preempted", 143), (signal.SIGINT, "interrupted", 130)]
)
def test_a_stopped_ddp_sweep_job_resumes_by_the_printed_command_to_the_uninterrupted_numbers(
    signum, status, code, tmp_path
):
    """``trainer=ddp trainer.devices=2 -m``: SIGTERM to the sweep's process, or Ctrl-C to its terminal, while
    job 0 trains. The ranks stop after the same step, rank 0 saves ``last.ckpt``, the sweep exits 130/143 and
    prints the command that goes on; that command finishes the job equal to the same job run uninterrupted."""
    args = [*TINY, *DDP_CPU, "trainer.max_steps=30", "logger=csv", "seed=1"]
    sweep = tmp_path / "sweep"
    proc = _start([*args, f"hydra.sweep.dir={sweep}", "-m"], tmp_path)
    lines = _wait_for(proc, "validation at step 4/")
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    text = _finish(proc, lines)
    assert proc.returncode == code, text[-4000:]
    stopped = metrics(sweep / "0")
    assert stopped["status"] == status and 4 <= stopped["global_step"] < 30
    command = next(line for line in text.splitlines() if "resume the whole sweep with:" in line)
    resume = command.split("resume the whole sweep with: ", 1)[1].split()
    assert resume[1:2] == [str(REPO / "run.py")] and resume[-1] == "-m"
    res = run_py(resume[2:], cwd=tmp_path, tmp_path=tmp_path)
    assert res.returncode == 0, fail_msg(res)
    alone = tmp_path / "alone"
    ref = run_py([*args, f"hydra.run.dir={alone}"], cwd=tmp_path, tmp_path=tmp_path)
    assert ref.returncode == 0, fail_msg(ref)
    resumed, single = metrics(sweep / "0"), metrics(alone)
    assert resumed["status"] == single["status"] == "finished"
    for key in ("global_step", "tokens_seen"):
        assert resumed[key] == single[key], key
    keys = [k for k in single["metrics"] if not k.startswith("perf/")]
    assert {k: resumed["metrics"][k] for k in keys} == {k: single["metrics"][k] for k in keys}


def test_a_ddp_sweep_job_whose_rank_dies_fails_and_the_sweep_goes_on(tmp_path):
    """SIGKILL to rank 1 of job 0: the other rank is stopped, job 0 is ``failed`` with the rank and signal
    named, job 1 runs to the end, the sweep exits 1 after its summary."""
    sweep = tmp_path / "sweep"
    proc = _start(
        [*TINY, *DDP_CPU, "logger=csv", "trainer.max_steps=400,6", f"hydra.sweep.dir={sweep}", "-m"], tmp_path
    )
    lines = _wait_for(proc, "validation at step 4/400")
    time.sleep(0.2)
    os.kill(_rank_pid(proc.pid, 1), signal.SIGKILL)
    text = _finish(proc, lines)
    assert proc.returncode == 1, text[-4000:]
    failed, finished = metrics(sweep / "0"), metrics(sweep / "1")
    assert failed["status"] == "failed" and failed["error"] == "rank 1 of 2 ended with exit code -9 (SIGKILL)"
    assert finished["status"] == "finished" and finished["global_step"] == 6
    assert "sweep summary: 2 jobs, 1 failed" in text
