"""Settings of the form "every N steps" count optimizer steps under gradient accumulation --
validation (``trainer.val_check_interval``), logging (``trainer.log_every_n_steps``), the periodic
checkpoint (``callbacks.last_checkpoint.every_n_train_steps``) and the objective's step (the CSV step
of ``val/*`` and the ``best-<step>.ckpt`` name)."""

from __future__ import annotations

import csv

import pytest

from tests.reliability.conftest import metrics, run_py
from tests.train.step_probe import events

# 3 training batches per epoch: with accumulation, Lightning also steps on an epoch's last batch, so
# accumulate=2 gives 2 steps per epoch and accumulate=3 one step
T = [
    "data.n_train=500",
    "data.n_val=20",
    "data.n_test=10",
    "data.n_long=5",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "logger=csv",
    "trainer.enable_progress_bar=false",
]


def _csv_rows(job, key):
    with open(job / "csv" / "metrics.csv") as f:
        return [(int(r["step"]), float(r[key])) for r in csv.DictReader(f) if r.get(key)]


@pytest.mark.parametrize(
    "accumulate", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(3, marks=pytest.mark.slow)]
)
def test_every_n_steps_settings_count_optimizer_steps(tmp_path, accumulate):
    job = tmp_path / "job"
    probe = tmp_path / "probe.json"
    res = run_py(
        [
            *T,
            "trainer.max_steps=8",
            "trainer.val_check_interval=4",
            f"trainer.accumulate_grad_batches={accumulate}",
            "trainer.log_every_n_steps=1",
            "callbacks.last_checkpoint.every_n_train_steps=3",
            f"hydra.run.dir={job}",
            "+callbacks.probe._target_=tests.train.step_probe.Probe",
            f"+callbacks.probe.path={probe}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    ev = events(probe)
    batches = [e for e in ev if e["kind"] == "batch"]
    assert len(batches) > 8 or accumulate == 1  # the run did accumulate
    assert [e["step"] for e in ev if e["kind"] == "val"] == [4, 8]  # was [2, 5, 8] for accumulate=2
    saves = sorted({e["step"] for e in ev if e["kind"] == "save"})
    assert saves == [3, 4, 6, 8], saves  # periodic at 3 and 6, best at the validations 4 and 8
    # one train/loss row per optimizer step (not one per micro-batch), labelled 0..7 like accumulate=1
    assert [s for s, _ in _csv_rows(job, "train/loss")] == list(range(8))
    # the objective is logged at the step its validation followed, and names the best checkpoint
    assert [s for s, _ in _csv_rows(job, "val/loss")] == [3, 7]
    assert metrics(job)["best"]["checkpoint"].endswith("best-8.ckpt")


def test_log_every_n_steps_counts_optimizer_steps_with_accumulation(tmp_path):
    job = tmp_path / "job"
    res = run_py(
        [
            *T,
            "trainer.max_steps=6",
            "trainer.val_check_interval=6",
            "trainer.accumulate_grad_batches=2",
            "trainer.log_every_n_steps=2",
            f"hydra.run.dir={job}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert [s for s, _ in _csv_rows(job, "train/loss")] == [1, 3, 5]


@pytest.mark.parametrize(
    "interval, epochs",
    [("0.5", "1"), pytest.param("'00:00:00:00'", "null", marks=pytest.mark.slow)],
    ids=["fraction", "time"],
)
def test_a_fraction_or_a_time_interval_validates_at_the_end_of_an_optimizer_step(tmp_path, interval, epochs):
    """3 batches per epoch, accumulation 2 (2 steps per epoch, the second filled with a copy that weighs
    nothing). Half an epoch is 1 of its 2 steps (in
    Lightning's count, 1 of 3 batches: a validation inside the first step's window), and a zero time is
    due after every micro-batch: both validate once after each optimizer step and never between the
    micro-batches of one, so no best checkpoint falls inside an accumulation window."""
    probe = tmp_path / "probe.json"
    res = run_py(
        [
            *T,
            "trainer.max_steps=4",
            f"trainer.val_check_interval={interval}",
            f"trainer.check_val_every_n_epoch={epochs}",
            "trainer.accumulate_grad_batches=2",
            f"hydra.run.dir={tmp_path / 'job'}",
            "+callbacks.probe._target_=tests.train.step_probe.Probe",
            f"+callbacks.probe.path={probe}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    ev = [e for e in events(probe) if e["kind"] in ("batch", "val")]
    assert [e["step"] for e in ev if e["kind"] == "val"] == [1, 2, 3, 4]
    stepped = [e["step"] for e in ev if e["kind"] == "batch"]
    assert len(stepped) == 8  # 2 micro-batches a step: an epoch's 3 batches and a weightless copy of its last
    for i, e in enumerate(ev):
        if e["kind"] == "val":  # the micro-batch before it ended an optimizer step
            before = [b["step"] for b in ev[:i] if b["kind"] == "batch"]
            assert before[-1] > (before[-2] if len(before) > 1 else 0)


@pytest.mark.parametrize("interval", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_an_interval_of_an_epoch_or_more_counted_in_epochs_validates_at_each_epochs_end(tmp_path, interval):
    """3 batches per epoch, accumulation 2: an epoch has 2 optimizer steps, so an interval of 3 or 4 counted
    inside each epoch (``check_val_every_n_epoch=1``) cannot fall inside one: it is the epoch's end, every 2
    steps, and the conversion line says so."""
    probe = tmp_path / "probe.json"
    res = run_py(
        [
            *T,
            "trainer.max_steps=6",
            f"trainer.val_check_interval={interval}",
            "trainer.check_val_every_n_epoch=1",
            "trainer.accumulate_grad_batches=2",
            f"hydra.run.dir={tmp_path / 'job'}",
            "+callbacks.probe._target_=tests.train.step_probe.Probe",
            f"+callbacks.probe.path={probe}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert [e["step"] for e in events(probe) if e["kind"] == "val"] == [2, 4, 6]
    line = (
        f"trainer.val_check_interval={interval}, trainer.check_val_every_n_epoch=1 -> trainer.val_check_interval=2 "
        f"({interval} optimizer steps are an epoch or more: at the end of every epoch; 2 optimizer steps an epoch "
        "of 3 batches)"
    )
    assert (res.stdout + res.stderr).count(line) == 1, (res.stdout + res.stderr)[-3000:]


def test_an_interval_inside_one_epoch_in_two_is_refused_before_training(tmp_path):
    """3 batches per epoch, accumulation 2 (2 optimizer steps): ``val_check_interval=1`` with
    ``check_val_every_n_epoch=2`` validates after both steps of one epoch in two, and never in the other: no
    interval in steps, so one ``error:`` line naming the key, the epoch's steps and the step-counted fix."""
    res = run_py(
        [
            *T,
            "trainer.max_steps=6",
            "trainer.val_check_interval=1",
            "trainer.check_val_every_n_epoch=2",
            "trainer.accumulate_grad_batches=2",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        tmp_path,
    )
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert errors[0].startswith("error: trainer.check_val_every_n_epoch=2: ") and "of 2 optimizer steps" in errors[0]
    assert "Fix: trainer.check_val_every_n_epoch=null and trainer.val_check_interval=<optimizer steps>" in errors[0]
    assert errors[0].endswith("(e.g. 1, or 4 for every 2 epochs)"), errors[0]


def test_a_limit_that_takes_no_batch_of_an_epoch_is_refused_before_training(tmp_path):
    """3 batches per epoch: ``limit_train_batches=0.1`` takes int(0.3) = 0 of them (Lightning's rounding), so
    the stream would have nothing to train: one ``error:`` line with the smallest fraction that takes one."""
    res = run_py(
        [*T, "trainer.max_steps=6", "+trainer.limit_train_batches=0.1", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path
    )
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert errors[0] == (
        "error: trainer.limit_train_batches=0.1: takes none of an epoch's 3 batches. "
        "Fix: trainer.limit_train_batches=0.333 or more, or an int >= 1"
    )
