"""Resumable sweeps: the same ``-m`` command run again into the same ``hydra.sweep.dir``
skips finished jobs, resumes the interrupted one from its own last.ckpt (same W&B run), runs the
rest, and refuses a changed config with one ``error:`` line before anything runs."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.conftest import REPO, TINY
from tests.reliability.conftest import RESUMABLE, metrics, quality, run_py, start_py, wait_for
from xformer.jobs.record import read_record
from xformer.jobs.sweep_resume import Plan, config_diff, plan_job

SEEDS = "seed=1,2,3,4"


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides)


def _record(job: Path, cfg) -> dict:
    """Write ``cfg`` as the job folder's Hydra record and return it as the resume callback reads it."""
    (job / ".hydra").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, job / ".hydra" / "config.yaml")
    return OmegaConf.to_container(OmegaConf.load(job / ".hydra" / "config.yaml"), resolve=False)


def _summary(sweep: Path) -> dict:
    return json.loads((sweep / "sweep_summary.json").read_text())


# --- the decision (fast, no training) ---------------------------------------------------------------


def test_plan_skips_finished_resumes_checkpointed_runs_new_and_refuses_changed(tmp_path):
    cfg = _compose(["optim.lr=0.001"])
    fresh = tmp_path / "0"
    assert plan_job(cfg, fresh, None) == Plan("run")  # a grid point that never started

    started = tmp_path / "1"  # started, killed before its first checkpoint
    rec = _record(started, cfg)
    assert plan_job(cfg, started, rec).action == "run"

    killed = tmp_path / "2"
    rec = _record(killed, cfg)
    (killed / "checkpoints").mkdir()
    (killed / "checkpoints" / "last.ckpt").write_bytes(b"x")
    plan = plan_job(cfg, killed, rec)
    assert plan.action == "resume" and plan.checkpoint == killed / "checkpoints" / "last.ckpt"
    (killed / "metrics.json").write_text(json.dumps({"status": "preempted"}))  # SIGTERM: still resumed
    assert plan_job(cfg, killed, rec).action == "resume"

    done = tmp_path / "3"
    rec = _record(done, cfg)
    (done / "checkpoints").mkdir()
    (done / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (done / "metrics.json").write_text(json.dumps({"status": "finished", "objective": {"value": 2.5}}))
    assert plan_job(cfg, done, rec) == Plan("skip")
    assert read_record(done).objective_value == 2.5  # what the skipped job hands its sweeper

    changed = _compose(["optim.lr=0.002"])
    refused = plan_job(changed, done, rec)
    assert refused.action == "refuse" and "optim.lr: 0.001 (recorded) -> 0.002 (now)" in refused.reason
    # a changed group option is a changed config too
    refused = plan_job(_compose(["optim.lr=0.001", "model/norm=pre"]), done, rec)
    assert refused.action == "refuse" and "model.norm" in refused.reason


def test_runtime_keys_may_change_but_nothing_else():
    old = OmegaConf.to_container(_compose(["optim.lr=0.001"]), resolve=False)
    same = _compose(
        [
            "optim.lr=0.001",
            "ckpt_path=last",
            "data.root=/elsewhere",
            "logger=csv",
            "trainer.enable_progress_bar=false",
            "sweep.dry_run=true",
        ]
    )
    keys = list(same.sweep.runtime_keys)
    assert config_diff(old, same, keys) == []
    diff = config_diff(old, _compose(["optim.lr=0.001", "seed=7", "trainer.max_steps=9"]), keys)
    assert [d[0] for d in diff] == ["seed", "trainer.max_steps"]
    # the run-time keys are configurable: without them every key counts
    assert [d[0] for d in config_diff(old, same, [])][:1] == ["ckpt_path"]


def test_an_option_added_since_with_a_null_default_leaves_a_recorded_job_as_it_ran():
    """A sweep recorded before model.d_qk existed resumes: absent (recorded) vs null (now) is no
    difference; absent vs a value is one, both ways."""
    recorded = {"model": {"d_model": 32}, "seed": 1}
    assert config_diff(recorded, {"model": {"d_model": 32, "d_qk": None}, "seed": 1}, []) == []
    now = {"model": {"d_model": 32, "d_qk": 4}, "seed": 1}
    assert config_diff(recorded, now, []) == [("model.d_qk", "<absent>", 4)]
    assert config_diff({"model": {"d_model": 32, "d_qk": 8}}, {"model": {"d_model": 32}}, []) == [
        ("model.d_qk", 8, "<absent>")
    ]


# --- whole sweeps (subprocesses) ------------------------------------------------------------------


def test_changed_lr_is_refused_before_any_job_runs(tmp_path):
    """A job that trained with lr 0.001; the same sweep with lr 0.002 exits 2 with one error line,
    trains nothing and leaves the folder's record as it was."""
    sweep = tmp_path / "sweep"
    args = [*RESUMABLE, "logger=csv", "seed=1,2"]
    recorded = _compose([*args[:-1], "seed=1", "optim.lr=0.001"])
    _record(sweep / "0", recorded)
    (sweep / "0" / "checkpoints").mkdir()
    (sweep / "0" / "checkpoints" / "last.ckpt").write_bytes(b"")  # a job trained there: its config is binding
    before = (sweep / "0" / ".hydra" / "config.yaml").read_text()
    res = run_py([*args, "optim.lr=0.002", f"hydra.sweep.dir={sweep}", "-m"], tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr[-3000:]
    assert "job 0 (seed=1)" in errors[0] and "optim.lr: 0.001 (recorded) -> 0.002 (now)" in errors[0]
    assert "hydra.sweep.dir" in errors[0]
    assert (res.stdout + res.stderr).count("optim.lr: 0.001 (recorded)") == 1  # not also as a log line
    assert not (sweep / "1").exists() and not (sweep / "0" / "metrics.json").exists()
    assert (sweep / "0" / ".hydra" / "config.yaml").read_text() == before


@pytest.mark.slow
def test_sigkilled_sweep_continues_where_it_stopped_and_matches_uninterrupted(tmp_path):
    """4 jobs; SIGKILL during job 3 (num 2); the same command again (here on 2 joblib workers): jobs
    1-2 skipped, job 3 resumed from its last.ckpt in the same W&B run, job 4 run; every job's final
    metrics equal those of an uninterrupted sweep (CPU, deterministic). ~60 s."""
    args = [*RESUMABLE, SEEDS]
    ref = tmp_path / "reference"
    res = run_py([*args, f"hydra.sweep.dir={ref}", "-m"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]

    sweep = tmp_path / "sweep"
    proc = start_py([*args, f"hydra.sweep.dir={sweep}", "-m"], tmp_path)
    wait_for(sweep / "2" / "checkpoints" / "last.ckpt", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (sweep / "2" / "metrics.json").exists(), "job 3 finished before it could be killed"
    assert not (sweep / "3").exists()
    stopped_at = torch.load(sweep / "2" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)[
        "global_step"
    ]
    assert 0 < stopped_at < 16
    first = {n: (sweep / n / "metrics.json").read_text() for n in ("0", "1")}
    wandb_id = (sweep / "2" / "wandb_id.txt").read_text().strip()

    res = run_py(
        [*args, f"hydra.sweep.dir={sweep}", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "-m"], tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    s = _summary(sweep)
    assert [j.get("resume") for j in s["jobs"]] == ["skipped", "skipped", "resumed", "new"]
    assert [j["status"] for j in s["jobs"]] == ["finished"] * 4
    assert {n: (sweep / n / "metrics.json").read_text() for n in ("0", "1")} == first  # not rerun
    out = res.stdout + res.stderr  # each job's plan is said once on the console
    assert out.count(f"job 2 continues from {sweep / '2' / 'checkpoints' / 'last.ckpt'} (step {stopped_at})") == 1
    assert [out.count(f"job {n} finished earlier") for n in (0, 1)] == [1, 1]
    assert out.count("2 finished jobs skipped, 1 resumed from last.ckpt, 1 to run") == 1
    for n in ("0", "1", "2", "3"):
        got, want = metrics(sweep / n), metrics(ref / n)
        assert got["status"] == "finished" and got["global_step"] == 16
        assert quality(got) == quality(want), n
        assert got["tokens_seen"] == want["tokens_seen"], n
    assert metrics(sweep / "2")["job"]["wandb"]["id"] == wandb_id  # the same W&B run continues
    assert [j["objective"]["value"] for j in s["jobs"]] == [j["objective"]["value"] for j in _summary(ref)["jobs"]]


@pytest.mark.slow
def test_optuna_resumed_into_the_same_sweep_dir_adds_trial_folders(tmp_path):
    """Optuna resumes its study from SQLite; run twice into one sweep dir, the second invocation's
    trials go to folders 2 and 3 (folder n = trial n), none is written over, and the summary lists
    all four. ~60 s."""
    import optuna

    db, sweep = tmp_path / "study.db", tmp_path / "sweep"
    args = [
        *TINY,
        "trainer.max_steps=1",
        "trainer.val_check_interval=1",
        "logger=none",
        "hparams_search=optuna",
        "hydra.sweeper.params=null",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.study_name=t",
        f"hydra.sweeper.storage=sqlite:///{db}",
        "optim.lr=choice(0.001,0.002,0.003,0.004)",
        f"hydra.sweep.dir={sweep}",
        "-m",
    ]
    res = run_py(args, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    first = {n: (sweep / n / "metrics.json").read_text() for n in ("0", "1")}
    res = run_py(args, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    trials = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").trials
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert sorted(p.name for p in sweep.iterdir() if p.name.isdigit()) == ["0", "1", "2", "3"]
    assert {n: (sweep / n / "metrics.json").read_text() for n in ("0", "1")} == first
    for t in trials:
        assert metrics(sweep / str(t.number))["config"]["optim"]["lr"] == t.params["optim.lr"]
    assert [j["num"] for j in _summary(sweep)["jobs"]] == [0, 1, 2, 3]


def test_job_start_applies_omp_num_threads_to_torch(monkeypatch):
    """A reused launcher worker (joblib_cpu sets OMP_NUM_THREADS=1 per job) gets torch's intra-op
    pool set from the variable when the job starts, whatever it was before."""
    from xformer.jobs.driver import apply_omp_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        apply_omp_threads()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_a_resumed_optuna_study_proposes_new_points_reproducibly(tmp_path):
    """The same command twice on one storage proposes new points, not trials 0 and 1 again (a seeded
    sampler replays its start-up draws, optuna#3255): two invocations of 2 trials give 4 distinct
    points, and a third with ``n_trials=0`` changes nothing. ~60 s."""
    import optuna

    db = tmp_path / "study.db"

    def args(n: int, k: int) -> list[str]:
        return [
            *TINY,
            "trainer.max_steps=1",
            "trainer.val_check_interval=1",
            "logger=none",
            "hparams_search=optuna",
            "hydra.sweeper.params=null",
            f"hydra.sweeper.n_trials={n}",
            "hydra.sweeper.study_name=t",
            f"hydra.sweeper.storage=sqlite:///{db}",
            "optim.lr=tag(log,interval(1e-4,3e-3))",
            "model.dropout=interval(0.0,0.3)",
            f"hydra.sweep.dir={tmp_path / f'sweep{k}'}",
            "-m",
        ]

    for k in (1, 2):
        res = run_py(args(2, k), tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
    trials = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").trials
    points = [tuple(sorted(t.params.items())) for t in trials]
    assert len(points) == 4 and len(set(points)) == 4, points
    res = run_py(args(0, 3), tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    again = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").trials
    assert [tuple(sorted(t.params.items())) for t in again] == points


def test_the_continued_sampler_is_reseeded_from_the_seed_and_the_stored_trials():
    """The sampler reseeding alone: a fresh study keeps the sampler; a study with n trials gets the seed
    SeedSequence([seed, n]) (the same command twice gives the same seed), an unseeded one is kept."""
    import functools

    import optuna

    from hydra_plugins.xformer_optuna import continued_sampler

    cfg = OmegaConf.create({"_target_": "optuna.samplers.TPESampler", "seed": 3, "n_startup_trials": 10})
    base = optuna.samplers.TPESampler(seed=3)
    assert continued_sampler(base, cfg, 0) is base
    a, b, c = (continued_sampler(base, cfg, n) for n in (2, 2, 4))
    assert isinstance(a, optuna.samplers.TPESampler) and a is not base

    def draw(sampler) -> float:  # the first start-up draw of an empty study
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna.create_study(sampler=sampler).ask().suggest_float("x", 0.0, 1.0)

    draw = [draw(s) for s in (a, b, c, optuna.samplers.TPESampler(seed=3))]
    assert draw[0] == draw[1] and len({draw[0], draw[2], draw[3]}) == 3
    assert continued_sampler(base, OmegaConf.create({"_target_": "x", "seed": None}), 2) is base
    grid = functools.partial(optuna.samplers.GridSampler)
    assert continued_sampler(grid, cfg, 2) is grid
