"""A run never finishes without its objective. Training that ends off a validation
step validates once more (max_steps below val_check_interval, a last step between two intervals,
under accumulation, at the end of max_epochs), and an objective that could never be logged is
rejected before training with one ``error:`` line."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import metrics, run_py
from tests.train.step_probe import events
from xformer import verdict_needs

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
PROBE = "+callbacks.probe._target_=tests.train.step_probe.Probe"


@pytest.mark.parametrize(
    "extra, val_steps, final",
    [
        (["trainer.max_steps=5"], [5], 5),  # the report: below the default val_check_interval=500
        pytest.param(["trainer.max_steps=6", "trainer.val_check_interval=4"], [4, 6], 6, marks=pytest.mark.slow),
        pytest.param(
            ["trainer.max_steps=5", "trainer.val_check_interval=4", "trainer.accumulate_grad_batches=2"],
            [4, 5],
            5,
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["trainer.max_steps=-1", "trainer.max_epochs=2"], [6], 6, marks=pytest.mark.slow
        ),  # 3 batches an epoch
    ],
)
def test_training_ending_off_a_validation_step_validates_once_more(tmp_path, extra, val_steps, final):
    job, probe = tmp_path / "job", tmp_path / "probe.json"
    res = run_py([*T, *extra, f"hydra.run.dir={job}", PROBE, f"+callbacks.probe.path={probe}"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [e["step"] for e in events(probe) if e["kind"] == "val"] == val_steps
    interval = next((int(e.split("=")[1]) for e in extra if e.startswith("trainer.val_check_interval=")), 500)
    assert verdict_needs.validation_steps(final, interval) == val_steps  # what a sweep's start line predicts
    m = metrics(job)
    assert m["global_step"] == final
    assert isinstance(m["objective"]["value"], float)  # was None
    assert m["best"]["checkpoint"].endswith(f"best-{final}.ckpt") or len(val_steps) > 1


@pytest.mark.parametrize(
    "overrides, key",
    [
        pytest.param(  # numbers has no BLEU
            ["objective.metric=val/bleu", "objective.mode=max"], "objective.metric=val/bleu", marks=pytest.mark.slow
        ),
        (["objective.metric=val/los"], "objective.metric=val/los"),  # typo
        (["objective.metric=val/exact_match", "objective.mode=max", "decode.val_batches=0"], "decode.val_batches=0"),
        (["trainer.limit_val_batches=0"], "trainer.limit_val_batches=0"),
        pytest.param(  # dry runs check it too
            ["objective.metric=val/bleu", "sweep.dry_run=true"], "objective.metric=val/bleu", marks=pytest.mark.slow
        ),
    ],
)
def test_objective_that_is_never_logged_is_rejected_before_training(tmp_path, overrides, key):
    job = tmp_path / "job"
    res = run_py([*T, "trainer.max_steps=2", *overrides, f"hydra.run.dir={job}"], tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {key}:"), res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert not (job / "metrics.json").exists() and not (job / "checkpoints").exists()


@pytest.mark.parametrize("metric", ["train/los", "loss", "test/exact_match", "val/bleu", "perf/tokens_per_s"])
def test_check_objective_names_the_key_and_the_choices(metric):
    from omegaconf import OmegaConf

    from xformer.config.check import check_objective
    from xformer.model import ConfigError

    with pytest.raises(
        ConfigError,
        match=f"^objective.metric={metric}: .*use one of val/loss, val/ppl, val/acc, val/exact_match, train/loss$",
    ):
        check_objective(OmegaConf.create({"objective": {"metric": metric}}), ["exact_match"], "NumbersDataModule")


def test_valid_objectives_of_the_data_are_accepted():
    from omegaconf import OmegaConf

    from xformer.config.check import check_objective

    for metric in ["val/loss", "val/ppl", "val/acc", "val/bleu", "train/loss"]:  # logged at every validation
        check_objective(OmegaConf.create({"objective": {"metric": metric}, "decode": {"val_batches": None}}), ["bleu"])
