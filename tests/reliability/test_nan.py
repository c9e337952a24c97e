"""A NaN/Inf loss stops the run with one line naming the step, keeps the last good checkpoint,
fails the W&B run and records the job as diverged (with the step) in metrics.json; in a sweep the
other jobs go on. The trigger is real: a
learning rate of 1e30 blows the weights up after the first step."""

from __future__ import annotations

import re

import pytest
import torch

from tests.reliability.conftest import TINY, metrics, run_py, wandb_exit_code


def test_nan_loss_fails_its_job_only_and_keeps_the_last_good_checkpoint(tmp_path):
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            "-m",
            *TINY,
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
            "callbacks.last_checkpoint.every_n_train_steps=1",
            "optim.lr=1e-3,1e30",
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    # a diverged job is an outcome, not a crash: the sweep ends 0 and its summary counts it apart
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "0 failed, 1 diverged" in res.stdout
    good, bad = metrics(sweep / "0"), metrics(sweep / "1")
    assert good["status"] == "finished" and good["global_step"] == 4, "the other job went on"
    assert bad["status"] == "diverged"  # an outcome of the setting, not a crash
    match = re.search(
        r"train/loss is (nan|inf|-inf) at step (\d+) \(epoch 0, batch \d+\); training stopped", bad["error"]
    )
    assert match, bad["error"]
    nan_step = int(match.group(2))
    assert nan_step == bad["global_step"] == bad["diverged"]["step"]
    assert bad["diverged"]["reason"] == "non-finite train/loss"
    assert "last good checkpoint" in bad["error"] and "Fix: lower optim.lr" in bad["error"]
    assert match.group(0) in res.stdout + res.stderr  # the one-line message is printed

    ckpt = torch.load(sweep / "1" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] < nan_step, "the failed step was not saved as last.ckpt"
    assert all(torch.isfinite(t).all() for t in ckpt["state_dict"].values())

    assert wandb_exit_code(sweep / "0") == 0
    assert wandb_exit_code(sweep / "1") not in (None, 0), "the W&B run is marked failed"


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_a_run_diverged_in_anomaly_mode_is_recorded_as_diverged_as_a_nan_loss_is(tmp_path):
    """``+trainer.detect_anomaly=true`` turns the same blow-up into torch's NaN-in-backward error: the job is
    ``diverged`` with the same record keys, exit code and reason kind as the NaN-loss run, not ``failed`` with a
    traceback (issue 51, row 7)."""
    runs = {}
    for name, extra in (("loss", []), ("anomaly", ["+trainer.detect_anomaly=true"])):
        job = tmp_path / name
        res = run_py([*TINY, "trainer.max_steps=4", "optim.lr=1e30", f"hydra.run.dir={job}", *extra], tmp_path)
        assert res.returncode == 1, res.stderr[-2000:]
        assert "Traceback (most recent call last)" not in res.stderr and "error: " in res.stderr  # one line, no crash
        runs[name] = metrics(job)
    for record in runs.values():
        assert record["status"] == "diverged"
        assert set(record["diverged"]) == {"step", "reason"} and record["diverged"]["reason"].startswith("non-finite")
        assert 1 <= record["diverged"]["step"] <= 4
