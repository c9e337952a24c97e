"""A NaN/Inf loss stops the run with one line naming the step, keeps the last good checkpoint,
fails the W&B run and records the job as diverged (with the step) in metrics.json; in a sweep the
other jobs go on. The trigger is real: a
learning rate of 1e30 blows the weights up after the first step."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

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


#: tiny runs that log no training step (log_every_n_steps beyond the run) and save checkpoints at validations
#: only (the default last_checkpoint's 100 steps are beyond it too), with a constant learning rate
SPARSE = [*TINY, "trainer.log_every_n_steps=25", "optim/scheduler=constant", "optim.warmup_steps=0"]
PROBE = "+callbacks.probe._target_=tests.reliability.divergence_probe.StepProbe"


def first_bad(probe: Path) -> tuple[int, str]:
    """The first optimizer step whose loss or gradient the probe saw non-finite, and which one went first."""
    rows = [json.loads(line) for line in probe.read_text().splitlines()]
    bad = next(r for r in rows if not r["finite"])
    return bad["step"], bad["what"]


def finite_checkpoints(job: Path) -> dict[str, int]:
    """``name -> global_step`` of every checkpoint in the job's folder; fails on one with a non-finite tensor."""
    steps = {}
    for path in sorted((job / "checkpoints").glob("*.ckpt")):
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        tensors = [t for t in ckpt["state_dict"].values() if t.is_floating_point()]
        assert tensors and all(torch.isfinite(t).all() for t in tensors), f"{path.name} has non-finite weights"
        steps[path.name] = ckpt["global_step"]
    return steps


@pytest.mark.parametrize(
    "name,extra,reason",
    [
        ("nan_loss", ["optim.lr=1e20"], "non-finite train/loss"),
        pytest.param(  # the siblings of nan_loss: in make test-slow (make test's 10-minute budget)
            "nan_loss_unclipped",
            ["optim.lr=1e20", "trainer.gradient_clip_val=0"],
            "non-finite train/loss",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "nan_loss_value_clip",
            ["optim.lr=1e20", "trainer.gradient_clip_algorithm=value"],
            "non-finite train/loss",
            marks=pytest.mark.slow,
        ),
        (
            "nan_gradient",
            [
                "+callbacks.poison._target_=tests.reliability.divergence_probe.PoisonGradient",
                "+callbacks.poison.step=3",
            ],
            "non-finite gradient norm",
        ),
        pytest.param(
            "nan_loss_accumulated",
            ["optim.lr=1e20", "trainer.accumulate_grad_batches=2"],
            "non-finite train/loss",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "anomaly",
            ["optim.lr=1e20", "+trainer.detect_anomaly=true"],
            "non-finite gradient (anomaly detection)",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_non_finite_step_stops_the_run_there_as_diverged_and_no_checkpoint_after_it_is_kept(
    name, extra, reason, tmp_path
):
    """However a training step goes non-finite (its loss, its gradient, anomaly mode's NaN in backward), whatever
    ``log_every_n_steps`` is, the run stops right after that step as diverged, naming it, and every checkpoint left
    is finite and from before it (the probe's record of each step is the reference)."""
    job, probe = tmp_path / name, tmp_path / "probe.jsonl"
    args = [
        *SPARSE,
        "trainer.max_steps=8",
        "trainer.val_check_interval=2",
        *extra,
        PROBE,
        f"+callbacks.probe.path={probe}",
    ]
    res = run_py([*args, f"hydra.run.dir={job}"], tmp_path)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback (most recent call last)" not in res.stderr
    step, what = first_bad(probe)
    assert what == ("grad" if reason == "non-finite gradient norm" else "loss")
    record = metrics(job)
    assert record["status"] == "diverged"
    assert record["diverged"] == {"step": step, "reason": reason}
    assert record["global_step"] <= step + 1, "it stopped right after the first bad step"
    assert f"at step {step}" in record["error"]
    saved = finite_checkpoints(job)
    assert all(s < step for s in saved.values()), saved


def test_a_validation_loss_that_rose_is_diverged_with_the_default_checkpoints(tmp_path):
    """A run whose last ``val/loss`` ends above its first is ``diverged`` (exit 0) although testing reloads the best
    checkpoint (an earlier validation's callback state): the reference is the job's own CSV of validations."""
    job, every = tmp_path / "rose", 5
    data = ["data.n_val=60", "data.n_long=20", "data.tokens_per_batch=512"]  # 6 steps an epoch
    args = [*SPARSE, *data, "trainer.max_steps=20", f"trainer.val_check_interval={every}", "optim.lr=1e4"]
    res = run_py([*args, "trainer.gradient_clip_val=0", "logger=csv", f"hydra.run.dir={job}"], tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    with open(job / "csv" / "metrics.csv") as f:
        vals = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]  # one row a validation
    assert len(vals) == 4 and vals[-1] > vals[0], f"the setting no longer diverges: {vals}"
    record = metrics(job)
    assert record["status"] == "diverged", record["status"]
    k = len(vals) - 1  # the first validation from which every later one stayed above the first
    while k > 0 and vals[k - 1] > vals[0]:
        k -= 1
    assert record["diverged"]["step"] == every * (k + 1)
    assert "rose above its first validation" in record["diverged"]["reason"]
    finite_checkpoints(job)


@pytest.mark.slow  # ~30 s: two CPU ranks
def test_a_non_finite_gradient_on_one_rank_stops_every_rank_naming_that_rank_and_its_step(tmp_path):
    """Under DDP a NaN put into rank 1's gradient only (after the all-reduce) stops both ranks right after that
    step; rank 0's record names rank 1 and the step the probe saw, and every checkpoint left is finite."""
    job, probe = tmp_path / "ddp", tmp_path / "probe.jsonl"
    poison = "+callbacks.poison._target_=tests.reliability.divergence_probe.PoisonGradient"
    ddp = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
    args = [*SPARSE, *ddp, "trainer.max_steps=8", "trainer.val_check_interval=2", poison, "+callbacks.poison.step=3"]
    args += ["+callbacks.poison.rank=1", PROBE, f"+callbacks.probe.path={probe}", f"hydra.run.dir={job}"]
    res = run_py(args, tmp_path)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    step, what = first_bad(probe)
    record = metrics(job)
    assert what == "grad" and record["diverged"] == {"step": step, "reason": "non-finite gradient norm"}
    assert f"at step {step} (" in record["error"] and ", rank 1)" in record["error"]
    assert record["global_step"] <= step + 1
    assert all(s < step for s in finite_checkpoints(job).values())
