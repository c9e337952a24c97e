"""W&B never blocks training (no key: offline; a server that takes the connection but does not answer: one
warning, then offline; one that refuses it is one ``error:`` line before the run, tests/scaling/
test_missing_engines.py), no secret reaches the job folder, and runs are deterministic on CPU (same seed →
identical metrics, other seed → different ones)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.reliability.conftest import RESUMABLE, metrics, quality, run_py, train_losses

SECRET = "secret-xyz-" + "0123456789" * 4  # W&B wants keys of 40+ characters


@pytest.fixture(scope="module")
def silent_port():
    """A local port that takes TCP connections (the kernel completes them: it listens) and never answers, as a
    proxy or an overloaded server does: the start-up check passes, W&B's own start times out."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


@pytest.fixture(scope="module")
def offline_with_key(tmp_path_factory) -> tuple[Path, str]:
    """Seed 0 again, WANDB_MODE=offline with an API key in the environment."""
    tmp = tmp_path_factory.mktemp("offline_key")
    res = run_py([*RESUMABLE, f"hydra.run.dir={tmp / 'job'}"], tmp, WANDB_API_KEY=SECRET)
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp / "job", res.stdout + res.stderr


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory, silent_port) -> tuple[Path, str, float]:
    """Seed 1, an API key and a W&B server that does not answer, WANDB_MODE unset."""
    tmp = tmp_path_factory.mktemp("unreachable")
    t0 = time.monotonic()
    res = run_py(
        [*RESUMABLE, "seed=1", f"hydra.run.dir={tmp / 'job'}"],
        tmp,
        WANDB_MODE=None,
        WANDB_API_KEY=SECRET,
        WANDB_BASE_URL=f"http://127.0.0.1:{silent_port}",
        WANDB_INIT_TIMEOUT="3",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp / "job", res.stdout + res.stderr, time.monotonic() - t0


def test_without_api_key_training_runs_offline(reference_run):
    m = metrics(reference_run)  # WANDB_MODE unset, no key, HOME without .netrc
    assert m["status"] == "finished" and m["job"]["wandb"]["mode"] == "offline"
    assert len(list((reference_run / "wandb").glob("offline-run-*"))) == 1


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_unreachable_wandb_falls_back_to_offline_with_one_warning(unreachable):
    job, output, elapsed = unreachable
    assert metrics(job)["status"] == "finished"
    assert output.count("W&B: could not start an online run") == 1, output[-3000:]
    assert metrics(job)["job"]["wandb"]["mode"] == "offline"
    assert len(list((job / "wandb").glob("offline-run-*"))) == 1
    assert elapsed < 150


def test_api_key_is_never_written(offline_with_key, unreachable):
    for job, output in (offline_with_key[:2], unreachable[:2]):
        assert SECRET not in output
        leaks = [p for p in job.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
        assert leaks == []


def test_same_seed_same_metrics_other_seed_differs(reference_run, offline_with_key, unreachable):
    same, other = offline_with_key[0], unreachable[0]
    assert train_losses(same) == train_losses(reference_run)
    assert quality(metrics(same)) == quality(metrics(reference_run))
    assert train_losses(other) != train_losses(reference_run)
    assert quality(metrics(other)) != quality(metrics(reference_run))


@pytest.mark.parametrize(
    "stop", [pytest.param("finished", marks=pytest.mark.slow), pytest.param("sigkill", marks=pytest.mark.slow)]
)
def test_resume_with_unreachable_wandb_continues_offline_under_the_same_run_id(tmp_path, stop, silent_port):
    """The online attempt of a resumed job fails; the offline retry keeps the run id (without W&B's
    "run ID ... is in use" error) and training continues to the end."""
    import os
    import signal

    from tests.reliability.conftest import start_py, wait_for

    job = tmp_path / "job"
    base = [*RESUMABLE, f"hydra.run.dir={job}"]
    if stop == "finished":  # a finished job resumed with more steps
        res = run_py([*base, "trainer.max_steps=4"], tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
    else:  # killed after its first periodic last.ckpt, as in the report
        proc = start_py(base, tmp_path)
        wait_for(job / "checkpoints" / "last.ckpt", proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    first_id = (job / "wandb_id.txt").read_text().strip()
    res = run_py(
        [*base, "ckpt_path=last"],
        tmp_path,
        WANDB_MODE=None,
        WANDB_API_KEY=SECRET,
        WANDB_BASE_URL=f"http://127.0.0.1:{silent_port}",
        WANDB_INIT_TIMEOUT="2",
    )
    output = res.stdout + res.stderr
    assert res.returncode == 0, output[-3000:]
    assert output.count("W&B: could not start an online run") == 1, output[-3000:]
    m = metrics(job)
    assert m["status"] == "finished" and m["global_step"] == 16
    assert m["job"]["wandb"]["id"] == first_id and m["job"]["wandb"]["mode"] == "offline"
    assert {p.name.rsplit("-", 1)[-1] for p in (job / "wandb").glob("offline-run-*")} == {first_id}
