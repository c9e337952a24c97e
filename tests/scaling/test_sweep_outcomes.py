"""Every sweep writes its summary. A dry run exits 0 (Optuna included, and its
study stays out of the database); a sweep in which no job produced an objective value -- every job
failed, or every Optuna trial was NaN -- names the failures and exits 1 (docs/scaling.md: "Failing jobs")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scaling.common import TINY, fail_msg, run_py

OPTUNA = ["hparams_search=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.storage=null"]


def _summary(sweep: Path) -> dict:
    return json.loads((sweep / "sweep_summary.json").read_text())


@pytest.mark.parametrize("storage", [pytest.param(None, marks=pytest.mark.slow), "db"])  # in-memory: slow set
def test_optuna_dry_run_exits_0_with_summary_and_leaves_the_study_alone(tmp_path, storage):
    sweep = tmp_path / "sweep"
    db = tmp_path / "study.db"
    extra = [f"hydra.sweeper.storage=sqlite:///{db}", "hydra.sweeper.study_name=t"] if storage else []
    res = run_py(
        [*OPTUNA, *extra, "hydra.sweeper.n_trials=3", "sweep.dry_run=true", f"hydra.sweep.dir={sweep}", "-m"],
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    assert res.returncode == 0, fail_msg(res)  # not Optuna's "No trials are completed yet."
    s = _summary(sweep)
    assert [j["status"] for j in s["jobs"]] == ["validated"] * 3 and "error" not in s
    assert not db.exists() or not _trials(db), "a dry run must not record trials in the stored study"


def _trials(db: Path) -> list:
    import optuna

    try:
        return optuna.load_study(study_name="t", storage=f"sqlite:///{db}").trials
    except KeyError:  # no such study
        return []


@pytest.mark.parametrize(
    "case, extra, status",
    [
        # the loss is NaN from step 2: NonFiniteLossGuard stops every job, recorded as diverged (an outcome)
        ("diverged", ["trainer.max_steps=3", "trainer.val_check_interval=3"], "diverged"),
        # one step, then a NaN validation loss: no objective value, and a non-finite validation loss is divergence
        ("nan", ["trainer.max_steps=1", "trainer.val_check_interval=1"], "diverged"),
    ],
)
def test_optuna_sweep_whose_trials_all_fail_writes_summary_and_exits_1(tmp_path, case, extra, status):
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            *TINY,
            *OPTUNA,
            *extra,
            "logger=none",
            "optim.warmup_steps=0",
            "hydra.sweeper.params=null",
            "optim.lr=choice(1e30)",
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    assert res.returncode == 1, fail_msg(res)
    assert "No trials are completed yet" not in res.stderr + res.stdout
    s = _summary(sweep)
    assert [j["status"] for j in s["jobs"]] == [status] * 2
    assert s["n_with_objective"] == 0 and "no job produced a value of val/loss" in s["error"]
    assert "error: no job produced a value" in res.stdout
    if case == "diverged":
        assert all("train/loss is nan at step 2" in j["error"] for j in s["jobs"]), [j["error"] for j in s["jobs"]]
        assert s["n_failed"] == 0 and s["n_diverged"] == 2 and "train/loss is nan at step 2" in res.stdout
        assert "0 failed, 2 diverged" in res.stdout


def test_basic_sweep_whose_jobs_all_fail_writes_summary_and_exits_1(tmp_path):
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            *TINY,
            "trainer.max_steps=3",
            "trainer.val_check_interval=3",
            "logger=none",
            "optim.warmup_steps=0",
            "optim.lr=1e30,1e31",
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    assert res.returncode == 1, fail_msg(res)
    s = _summary(sweep)
    assert [j["status"] for j in s["jobs"]] == ["diverged", "diverged"]  # NaN loss: an outcome, not a crash
    assert s["n_failed"] == 0 and s["n_diverged"] == 2


@pytest.mark.parametrize(
    "err, ended",
    [(KeyboardInterrupt(), False), ("sigterm", False), (RuntimeError("a crash"), True)],
    ids=["ctrl-c", "sigterm", "crash"],
)
def test_a_sweep_summary_says_no_job_produced_a_value_only_of_jobs_that_ended(tmp_path, err, ended):
    """A job stopped by a signal resumes with the sweep's command: the summary of a sweep stopped in its first
    job does not say that no job produced a value; a crashed job did end without one."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException
    from omegaconf import OmegaConf

    from xformer.jobs.context import JobContext, outcome_of
    from xformer.jobs.sweep import SUMMARY_FILE, record_job, write_sweep_summary

    cfg = OmegaConf.create({"objective": {"metric": "val/loss", "mode": "min"}})
    ctx = JobContext(tmp_path / "0", sweep_dir=tmp_path, num=0, in_hydra=True)
    end = outcome_of(SIGTERMException() if err == "sigterm" else err, step=3)
    record_job(cfg, ctx, end, None)
    write_sweep_summary(tmp_path, cfg, None, exit_on_failure=False)
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert summary["jobs"][0]["status"] == str(end.status)
    assert ("error" in summary) == ended
