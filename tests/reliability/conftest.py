"""Helpers for the reliability tests: run ``run.py`` in subprocesses with tiny settings, read its
outputs, serve files over a local HTTP server, and one shared uninterrupted reference run."""

from __future__ import annotations

import csv
import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.conftest import TINY as BASE_TINY

TINY = BASE_TINY
# 12 training batches per epoch; 16 steps cross an epoch boundary; last.ckpt every 4 steps
RESUMABLE = [
    *TINY,
    "data.tokens_per_batch=256",
    "trainer.max_steps=16",
    "trainer.val_check_interval=8",
    "callbacks.last_checkpoint.every_n_train_steps=4",
    "trainer.deterministic=true",
]

#: for runs stopped by a signal once their first ``last.ckpt`` exists: 0.3 s after each training batch,
#: so that the signal lands during training on a fast idle machine too (numbers are unchanged)
SLOW_STEPS = ["+callbacks.slow._target_=tests.reliability.first_contact_probe.SlowSteps", "+callbacks.slow.seconds=0.3"]


def env_for(tmp: Path, **extra: str | None) -> dict:
    """A clean environment: offline W&B, private cache and HOME, one thread, no API key."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "XFORMER_CACHE": str(tmp / "cache"),
        "HOME": str(tmp / "home"),
        "HYDRA_FULL_ERROR": "0",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "PYTHONPATH": str(REPO),
    }
    # WANDB_SERVICE: a W&B service an in-process test started; each job starts (and owns) its own
    for key in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_INIT_TIMEOUT", "WANDB_SERVICE"):
        env.pop(key, None)
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    (tmp / "home").mkdir(parents=True, exist_ok=True)
    return env


def run_py(args: list[str], tmp: Path, timeout: float = 300, **env: str | None) -> subprocess.CompletedProcess:
    """``python run.py *args`` in ``tmp``; returns the finished process (text output captured)."""
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=tmp,
        env=env_for(tmp, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_py(args: list[str], tmp: Path, **env: str | None) -> subprocess.Popen:
    """Start ``python run.py *args`` in ``tmp`` without waiting; output goes to ``proc.log_path``."""
    log_path = tmp / f"run-{time.monotonic_ns()}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "run.py"), *args],
            cwd=tmp,
            env=env_for(tmp, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            # the run gets Ctrl-C as from a terminal even when the test session itself was started in
            # the background (nohup, `&`), whose SIGINT is ignored and would be inherited
            preexec_fn=_default_sigint,
        )
    proc.log_path = log_path
    return proc


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Poll (every 5 ms) until ``path`` exists; fail if ``proc`` ends first."""
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(
                f"run ended (status {proc.returncode}) before {path} appeared:\n" + proc.log_path.read_text()[-3000:]
            )
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail(f"{path} did not appear within {timeout} s")
        time.sleep(0.005)


def train_losses(job: Path) -> dict[int, float]:
    """``step -> train/loss`` from the job's CSV history (the last row wins for a repeated step)."""
    out = {}
    with open(job / "csv" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row.get("train/loss"):
                out[int(row["step"])] = float(row["train/loss"])
    return out


def metrics(job: Path) -> dict:
    return json.loads((job / "metrics.json").read_text())


def quality(m: dict) -> dict:
    """The model-quality metrics of a metrics.json (no timings)."""
    return {k: v for k, v in m["metrics"].items() if k.startswith(("val/", "test/", "train/"))}


class FileServer:
    """``http.server`` on 127.0.0.1 serving one folder, in a thread."""

    def __init__(self, directory: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D102
        pass


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """One uninterrupted :data:`RESUMABLE` run (seed 0) with WANDB_MODE unset and no API key."""
    tmp = tmp_path_factory.mktemp("reference")
    job = tmp / "job"
    res = run_py([*RESUMABLE, f"hydra.run.dir={job}"], tmp, WANDB_MODE=None)
    assert res.returncode == 0, res.stderr[-3000:]
    return job


def wandb_records(run_dir: Path) -> list:
    """The protobuf records of the offline W&B run ``run_dir``'s ``.wandb`` file."""
    from tests.scaling.wandb_records import records

    return records(next(run_dir.glob("*.wandb")))


def wandb_exit_code(job: Path) -> int | None:
    """Exit code recorded by the job's (last) offline W&B run, None if it has no exit record."""
    runs = sorted((job / "wandb").glob("offline-run-*"))
    codes = [r.exit.exit_code for r in wandb_records(runs[-1]) if r.WhichOneof("record_type") == "exit"]
    return codes[-1] if codes else None
