"""A resumed run's settings against its checkpoint's: model and data keys are refused in one line;
optimizer and schedule keys take effect from the resumed step (Lightning restores the checkpoint's
optimizer hyperparameters and LR-schedule state over the configured ones) and the console lists them.

Reference: the learning rate an uninterrupted run with the new settings logs at the same steps
(``LearningRateMonitor``'s ``lr-Adam`` column, read from the optimizer the step runs with).
"""

from __future__ import annotations

import csv

import pytest

from tests.reliability.conftest import TINY, metrics, run_py

BASE = [*TINY, "logger=csv", "trainer.val_check_interval=2", "optim.warmup_steps=2", "trainer.deterministic=true"]


def _lrs(job) -> dict[int, float]:
    """``step -> lr`` of the job's CSV history (the learning rate each optimizer step used)."""
    with open(job / "csv" / "metrics.csv") as f:
        return {int(r["step"]): float(r["lr-Adam"]) for r in csv.DictReader(f) if r.get("lr-Adam")}


def _run(tmp, job, args, status=0):
    res = run_py([*BASE, *args, f"hydra.run.dir={job}"], tmp)
    assert res.returncode == status, res.stderr[-3000:]
    return res


def _resume_with(tmp_path, first: list[str], then: list[str], reference: list[str]):
    """Train ``first`` for 4 steps, resume with ``then`` to 8; an uninterrupted ``reference`` run to 8."""
    ref = tmp_path / "ref"
    _run(tmp_path, ref, [*reference, "trainer.max_steps=8"])
    job = tmp_path / "job"
    _run(tmp_path, job, [*first, "trainer.max_steps=4"])
    res = _run(tmp_path, job, [*then, "trainer.max_steps=8", "ckpt_path=last"])
    return job, ref, res


@pytest.mark.slow  # suite time: ~50 s, three runs
def test_a_changed_learning_rate_takes_effect_and_model_keys_are_refused(tmp_path):
    """4 steps at ``optim.lr=0.01``, resumed with ``optim.lr=0.001``: steps 5-8 run at the 0.001
    schedule (was: 0.01, while metrics.json recorded 0.001), and the console says so. The same job
    resumed with another ``model.dropout`` or ``data.tokens_per_batch`` is refused in one line."""
    job, ref, res = _resume_with(tmp_path, ["optim.lr=0.01"], ["optim.lr=0.001"], ["optim.lr=0.001"])
    lrs, ref_lrs = _lrs(job), _lrs(ref)
    assert [lrs[s] for s in range(4)] == pytest.approx([10 * ref_lrs[s] for s in range(4)], rel=1e-12)
    assert {s: lrs[s] for s in range(4, 8)} == {s: ref_lrs[s] for s in range(4, 8)}
    out = res.stdout + res.stderr
    assert "optim.lr: 0.01 -> 0.001" in out and "take effect from step 4" in out, out[-3000:]
    m = metrics(job)
    assert m["config"]["optim"]["lr"] == 0.001
    assert m["changed_on_resume"]["optim.lr"] == {"checkpoint": 0.01, "now": 0.001}
    for key, value in (("model.dropout", "0.3"), ("data.tokens_per_batch", "512")):
        res = run_py(
            [*BASE, f"{key}={value}", "trainer.max_steps=10", "ckpt_path=last", f"hydra.run.dir={job}"], tmp_path
        )
        assert res.returncode == 2, res.stderr[-3000:]
        errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
        assert f"{key}: " in errors[0] and "(checkpoint)" in errors[0] and "Fix:" in errors[0], errors[0]
    assert metrics(job)["global_step"] == 8  # nothing was trained by the refused runs


@pytest.mark.slow  # suite time: three runs
def test_a_longer_budget_stretches_a_cosine_schedule(tmp_path):
    """``optim/scheduler=cosine`` decays over ``trainer.max_steps``: 4 steps, resumed to 8, runs
    steps 5-8 on the 8-step cosine, as an uninterrupted 8-step run (was: the restored schedule
    object kept ``total_steps=4``, so steps 5-8 ran at the floor)."""
    cos = ["optim/scheduler=cosine"]
    job, ref, _ = _resume_with(tmp_path, cos, cos, cos)
    lrs, ref_lrs = _lrs(job), _lrs(ref)
    assert {s: lrs[s] for s in range(4, 8)} == {s: ref_lrs[s] for s in range(4, 8)}


@pytest.mark.slow  # suite time: three runs
def test_unchanged_settings_resume_with_the_restored_optimizer_exactly(tmp_path):
    """Nothing changed but the budget: the resumed run's learning rates and losses are the
    uninterrupted run's, bit for bit (putting the configured settings back is a no-op)."""
    from tests.reliability.conftest import train_losses

    job, ref, res = _resume_with(tmp_path, [], [], [])
    assert _lrs(job) == _lrs(ref) and train_losses(job) == train_losses(ref)
    assert "settings changed" in res.stdout + res.stderr  # trainer.max_steps: 4 -> 8
