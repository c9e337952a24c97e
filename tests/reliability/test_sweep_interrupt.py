"""Ctrl-C during a ``-m`` sweep stops it cleanly. The interrupted job is recorded with
a readable status ("interrupted: stopped by Ctrl-C at step N"), ``sweep_summary.json`` is written for
what ran, and the printed resume command is the sweep's own (which skips finished jobs and resumes the
interrupted one from its ``last.ckpt``)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.reliability.conftest import RESUMABLE, SLOW_STEPS, env_for, metrics, start_py, wait_for


@pytest.mark.slow  # ~40 s: a 2-job sweep stopped in its first job, then resumed by the printed command
def test_ctrl_c_in_a_sweep_records_the_job_writes_the_summary_and_prints_the_sweeps_command(tmp_path):
    sweep = tmp_path / "sweep"
    args = [*RESUMABLE, "logger=csv", "seed=1,2", f"hydra.sweep.dir={sweep}", "-m"]
    proc = start_py([*args[:-1], *SLOW_STEPS, "-m"], tmp_path)
    wait_for(sweep / "0" / "checkpoints" / "last.ckpt", proc)
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 130, proc.log_path.read_text()[-3000:]
    log = proc.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    m = metrics(sweep / "0")
    assert m["status"] == "interrupted"
    assert m["error"] == f"interrupted: stopped by Ctrl-C at step {m['global_step']}; last.ckpt was saved"
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [(j["num"], j["status"]) for j in summary["jobs"]] == [(0, "interrupted")]
    assert summary["jobs"][0]["error"] == m["error"]
    assert "error" not in summary and "no job produced" not in log  # a stopped job has not ended
    hints = [
        line.split("resume the whole sweep with: ", 1)[1] for line in log.splitlines() if "whole sweep with" in line
    ]
    assert len(hints) == 1
    cmd = shlex.split(hints[0])
    assert cmd[-1] == "-m" and f"hydra.sweep.dir={sweep}" in cmd and "seed=1,2" in cmd
    saved = next(line for line in log.splitlines() if "resume with: " in line)
    assert saved.split("resume with: ", 1)[1] == hints[0]  # the checkpoint line says the same
    res = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *cmd[2:]],
        cwd=tmp_path,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    done = json.loads((sweep / "sweep_summary.json").read_text())
    assert [(j["num"], j["status"]) for j in done["jobs"]] == [(0, "finished"), (1, "finished")]
    assert done["jobs"][0]["resume"] == "resumed" and done["jobs"][1]["resume"] == "new"
