"""A stop signal that meets a validation (it arrives while the validation runs, or during the optimizer step the
validation follows) stops the run after that whole validation: the resumed run's validations, training losses
and test results are those of the uninterrupted run. Lightning's evaluation loop, stopped inside, leaves a
checkpoint that its restart takes for a finished validation, so that validation was lost."""

from __future__ import annotations

import csv

import pytest

from tests.reliability.conftest import metrics, quality, run_py

T = [
    "data.n_train=300",
    "data.n_val=60",
    "data.n_test=20",
    "data.n_long=5",
    "data.tokens_per_batch=512",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1",
    "trainer.val_check_interval=3",
    "trainer.max_steps=8",
]
STOPPERS = "tests.reliability.stoppers"
_REFERENCES: dict[tuple, tuple] = {}


def _rows(job, key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of every CSV row that has ``key``, in file order."""
    with open(job / "csv" / "metrics.csv") as f:
        return [(int(r["step"]), float(r[key])) for r in csv.DictReader(f) if r.get(key)]


def _outcome(job) -> tuple:
    return _rows(job, "val/loss"), _rows(job, "train/loss"), quality(metrics(job))


def _reference(tmp_path_factory, extra: tuple) -> tuple:
    if extra not in _REFERENCES:
        job = tmp_path_factory.mktemp("ref") / "job"
        res = run_py([*T, *extra, f"hydra.run.dir={job}"], job.parent)
        assert res.returncode == 0, res.stderr[-3000:]
        _REFERENCES[extra] = _outcome(job)
    return _REFERENCES[extra]


@pytest.mark.parametrize(
    "stopper, extra, code",
    [
        # the signal arrives while the validation after step 3 runs
        (["SignalInValidation", "+callbacks.stop.step=3", "+callbacks.stop.sig=SIGTERM"], (), 143),
        pytest.param(
            ["SignalInValidation", "+callbacks.stop.step=3", "+callbacks.stop.sig=SIGINT"],
            (),
            130,
            marks=pytest.mark.slow,
        ),
        # the signal arrives during step 3, which a validation follows
        pytest.param(["SigtermAt", "+callbacks.stop.batches=3"], (), 143, marks=pytest.mark.slow),
        pytest.param(["SigintAt", "+callbacks.stop.batches=3"], (), 130, marks=pytest.mark.slow),
        # ... in the first micro-batch of step 3's window of 2
        pytest.param(
            ["SigtermAt", "+callbacks.stop.batches=5"],
            ("trainer.accumulate_grad_batches=2",),
            143,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["sigterm-in-validation", "sigint-in-validation", "sigterm-in-step", "sigint-in-step", "sigterm-in-window"],
)
def test_a_stop_that_meets_a_validation_keeps_it(tmp_path, tmp_path_factory, stopper, extra, code):
    ref = _reference(tmp_path_factory, extra)
    job = tmp_path / "job"
    name, *args = stopper
    first = run_py([*T, *extra, f"hydra.run.dir={job}", f"+callbacks.stop._target_={STOPPERS}.{name}", *args], tmp_path)
    assert first.returncode == code, first.stderr[-3000:]
    assert metrics(job)["global_step"] == 3  # stopped after the step the validation follows
    resumed = run_py([*T, *extra, f"hydra.run.dir={job}", "ckpt_path=last"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _outcome(job) == ref
