"""Sweeps that scale: DDP inside -m, launchers (joblib, submitit), Optuna with resume, failing jobs,
seeds, dry runs, W&B sweep commands, the SLURM preset."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.scaling.common import DDP_CPU, TINY, fail_msg, metrics, run_py, wandb_run_files
from tests.scaling.wandb_records import exit_codes

FAST = [*TINY, "trainer.max_steps=2"]
RANK0_FILES = [".hydra", "checkpoints", "csv", "metrics.json", "run.log", "wandb", "wandb_id.txt"]


def summary(sweep: Path) -> dict:
    return json.loads((sweep / "sweep_summary.json").read_text())


def job_dirs(sweep: Path) -> list[Path]:
    return sorted((p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


@pytest.mark.slow  # suite time: ~21 s; DDP runs are in tests/scaling/test_ddp.py
def test_ddp_multirun_two_jobs_each_once_one_wandb_run_each(tmp_path):
    """The relaunch trap: with -m, rank 1 must run its job, not a new sweep. Seeds share the W&B group."""
    sweep = tmp_path / "sweep"
    res = run_py(
        [*FAST, *DDP_CPU, "seed=1,2", f"hydra.sweep.dir={sweep}", "-m"], cwd=tmp_path, tmp_path=tmp_path, timeout=300
    )
    assert res.returncode == 0, fail_msg(res)
    jobs = job_dirs(sweep)
    assert [p.name for p in jobs] == ["0", "1"]
    assert sorted(p.name for p in sweep.iterdir()) == [".xformer", "0", "1", "multirun.yaml", "sweep_summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["sweep"]  # no stray run dirs
    groups, losses = set(), []
    for job, seed in zip(jobs, (1, 2), strict=False):
        m = metrics(job)
        assert m["status"] == "finished" and m["config"]["seed"] == seed
        assert sorted(p.name for p in job.iterdir()) == RANK0_FILES  # ranks > 0 write nothing of their own
        runs = wandb_run_files(job)
        assert len(runs) == 1 and exit_codes(runs[0]) == [0]
        wb = m["job"]["wandb"]
        assert f"seed={seed}" in wb["tags"] and f"seed={seed}" in wb["name"]
        assert "seed" not in wb["group"]
        groups.add(wb["group"])
        losses.append(m["metrics"]["val/loss"])
    assert len(groups) == 1  # one group per sweep: a dashboard averages the seeds
    assert losses[0] != losses[1]  # distinct seeds, distinct runs
    s = summary(sweep)
    assert s["n_jobs"] == 2 and s["n_failed"] == 0
    assert [j["status"] for j in s["jobs"]] == ["finished", "finished"]
    assert "sweep summary: 2 jobs, 0 failed" in res.stdout


@pytest.mark.slow
def test_multi_gpu_sweep_command_equals_each_job_run_alone(tmp_path):
    """The README's multi-GPU sweep on one machine (``trainer=ddp trainer.devices=2 model.ffn_ratio=2,4
    -m``) on 2 CPU ranks, which run under ``torchrun`` started by the job's process, against the same job run
    alone, whose rank 1 Lightning's own launcher starts: the same numbers bit for bit, one folder and one
    metrics.json per job, nothing else in the sweep's folder."""
    args = [*TINY, *DDP_CPU, "trainer.max_steps=6", "logger=csv"]
    sweep = tmp_path / "sweep"
    res = run_py([*args, "model.ffn_ratio=2,4", f"hydra.sweep.dir={sweep}", "-m"], cwd=tmp_path, tmp_path=tmp_path)
    assert res.returncode == 0, fail_msg(res)
    alone = tmp_path / "alone"
    ref = run_py([*args, "model.ffn_ratio=4", f"hydra.run.dir={alone}"], cwd=tmp_path, tmp_path=tmp_path)
    assert ref.returncode == 0, fail_msg(ref)
    jobs = job_dirs(sweep)
    assert [p.name for p in jobs] == ["0", "1"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["alone", "sweep"]
    for job in jobs:
        assert sorted(p.name for p in job.iterdir()) == [n for n in RANK0_FILES if "wandb" not in n]
    swept, single = metrics(jobs[1]), metrics(alone)
    assert swept["status"] == single["status"] == "finished"
    for key in ("global_step", "tokens_seen"):
        assert swept[key] == single[key] > 0, key
    keys = [k for k in single["metrics"] if not k.startswith("perf/")]  # throughput is a timing
    assert {k: swept["metrics"][k] for k in keys} == {k: single["metrics"][k] for k in keys}
    assert swept["best"]["value"] == single["best"]["value"]
    assert metrics(jobs[0])["metrics"]["val/loss"] != swept["metrics"]["val/loss"]  # two different jobs


@pytest.mark.slow  # suite time: ~11 s; failing sweeps: tests/scaling/test_sweep_outcomes.py
def test_failing_job_does_not_stop_the_sweep(tmp_path):
    """Job 1 fails inside training (a test callback raises at its second step), which no check before
    training can foresee; jobs 0 and 2 finish."""
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            *FAST,
            "+callbacks.fail._target_=tests.reliability.stoppers.RaiseAt",
            "+callbacks.fail.step=2",
            "+callbacks.fail.enabled=false,true,false",
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
        timeout=300,
    )
    assert res.returncode == 1, fail_msg(res)  # the sweep ran to the end, then reports the failure
    s = summary(sweep)
    assert s["n_jobs"] == 3 and s["n_failed"] == 1
    assert [j["status"] for j in s["jobs"]] == ["finished", "failed", "finished"]
    failed = s["jobs"][1]
    assert "+callbacks.fail.enabled=True" in failed["overrides"]  # as Hydra writes a swept value
    assert "a failure inside training at step 2" in failed["error"]
    assert "sweep summary: 3 jobs, 1 failed" in res.stdout
    for job, ok in zip(job_dirs(sweep), (True, False, True), strict=False):
        m = metrics(job)
        assert m["status"] == ("finished" if ok else "failed")
        runs = wandb_run_files(job)
        assert len(runs) == 1
        assert exit_codes(runs[0]) == ([0] if ok else [1])  # the failed job's W&B run is marked failed
        assert m["job"]["wandb"]["id"] == s["jobs"][int(job.name)]["wandb"]["id"]


@pytest.mark.slow  # suite time: ~13 s
def test_joblib_launcher_runs_seeds_reproducibly(tmp_path):
    """seed=1,1 on 2 parallel joblib workers: the same seed gives the same run (that different seeds
    differ is checked by the DDP sweep above)."""
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            *FAST,
            "logger=none",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            "seed=1,1",
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, fail_msg(res)
    assert "Joblib.Parallel" in res.stdout + res.stderr
    vals = [metrics(job)["metrics"] for job in job_dirs(sweep)]
    assert len(vals) == 2
    for key in ("val/loss", "test/loss", "test/loss@long", "test/acc"):
        assert vals[0][key] == vals[1][key], key
    assert [j["status"] for j in summary(sweep)["jobs"]] == ["finished", "finished"]


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_ddp_job(tmp_path):
    """submitit runs each job in its own worker process; this job is 2-rank DDP, whose rank 1 Lightning
    starts from inside the worker (the relaunch command names run.py, not submitit's entry point)."""
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            *FAST,
            "logger=none",
            *DDP_CPU,
            "model.ffn_ratio=4",
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=10",
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
        timeout=400,
    )
    assert res.returncode == 0, fail_msg(res)
    jobs = job_dirs(sweep)
    assert [p.name for p in jobs] == ["0"]
    assert (sweep / ".submitit").is_dir()
    assert metrics(jobs[0])["status"] == "finished"
    assert not list(jobs[0].glob("*rank*")) and not list(jobs[0].glob("*process*"))  # rank 1 wrote nothing
    assert [j["status"] for j in summary(sweep)["jobs"]] == ["finished"]


@pytest.mark.slow  # ~12 s; the Optuna resume into one sweep folder is also tested in test_sweep_resume.py
def test_optuna_nan_trials_get_the_worst_value_and_study_resumes(tmp_path):
    """3 trials, then the same command again: 6 trials in one SQLite study. lr=1e30 makes the objective
    NaN: run.py hands those trials the worst value (+inf for objective.mode=min) and the study goes on."""
    import optuna

    db = tmp_path / "study.db"
    args = [
        *TINY,
        "trainer.max_steps=1",
        "trainer.val_check_interval=1",
        "logger=none",
        "optim.warmup_steps=0",
        "hparams_search=optuna",
        "hydra.sweeper.params=null",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.study_name=t",
        f"hydra.sweeper.storage=sqlite:///{db}",
        "optim.lr=choice(0.001,1e30)",
        "hydra.callbacks.sweep_summary.exit_on_failure=false",  # an invocation whose 3 trials all drew 1e30
    ]
    for n, sweep in ((3, "s1"), (6, "s2")):
        res = run_py([*args, f"hydra.sweep.dir={tmp_path / sweep}", "-m"], cwd=tmp_path, tmp_path=tmp_path, timeout=300)
        assert res.returncode == 0, fail_msg(res)
        trials = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").trials
        assert len(trials) == n
    values = {t.number: (t.params["optim.lr"], t.value) for t in trials}
    assert all(t.state.name == "COMPLETE" for t in trials)
    assert all((v == float("inf")) == (lr > 1) for lr, v in values.values()), values
    assert {lr > 1 for lr, _ in values.values()} == {True, False}, values
    assert (tmp_path / "s2" / "optimization_results.yaml").is_file()
    assert summary(tmp_path / "s2")["optuna"]["study_name"] == "t"


def test_dry_run_prints_every_job_without_training(tmp_path):
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            "sweep.dry_run=true",
            "model.d_model=32",
            "model.n_heads=2,4",
            "model.ffn_ratio=2,4",
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    assert res.returncode == 0, fail_msg(res)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("[dry run]")]
    assert len(lines) == 4 and all(ln.endswith("config ok") for ln in lines)
    assert "model.n_heads=4 model.ffn_ratio=2" in lines[2]
    assert [j["status"] for j in summary(sweep)["jobs"]] == ["validated"] * 4
    assert not list(sweep.glob("*/metrics.json")) and not list(sweep.glob("*/checkpoints"))


def agent_command(name: str) -> list[str]:
    """The command `wandb agent` runs for the first grid point of ``sweeps/<name>.yaml``, built with
    wandb's own helpers (no network); ``python`` is this interpreter, ``${env}`` is dropped."""
    from wandb.sdk.launch.sweeps import utils as sweep_utils

    spec = yaml.safe_load((REPO / "sweeps" / f"{name}.yaml").read_text())
    assert spec["command"][-1] == "${args_json}" and spec["program"] == "run.py"
    params = {k: {"value": v["values"][0] if "values" in v else v["value"]} for k, v in spec["parameters"].items()}
    sweep_vars = sweep_utils.create_sweep_command_args({"args": params})
    sweep_vars.update(env=[], program=[str(REPO / spec["program"])])
    command = []
    for chunk in sweep_utils.create_sweep_command(list(spec["command"])):
        if chunk.startswith("${") and chunk.endswith("}"):
            command += sweep_vars.get(chunk[2:-1]) or []
        else:
            command.append(sys.executable if chunk == "python" else chunk)
    return command


def test_wandb_sweep_commands_are_accepted_by_run_py(tmp_path):
    """Parameters arrive as one JSON argument (``${args_json}``) that run.py turns into key=value Hydra
    overrides; run.py parses and validates them (dry run)."""
    from hydra import compose, initialize_config_dir

    from xformer.config.check import check_config
    from xformer.config.overrides import expand_json_args

    command = agent_command("wandb_ffn_ratio")
    args = command[2:]
    assert command[1].endswith("run.py") and args[-1].startswith("{")
    res = run_py(
        [*args, "sweep.dry_run=true"],
        cwd=tmp_path,
        tmp_path=tmp_path,
        prefix=command[:2],
        WANDB_SWEEP_ID="swp",
        WANDB_RUN_ID="run1",
    )
    assert res.returncode == 0, fail_msg(res)
    assert "model.ffn_ratio=1 seed=0" in res.stdout and "config ok" in res.stdout
    assert (tmp_path / "outputs" / "wandb" / "swp" / "run1" / ".hydra" / "config.yaml").is_file()
    # the second sweep's command composes and validates the same way (in-process: no second start-up)
    args = expand_json_args(agent_command("wandb_seeds_heads")[2:])
    assert "model.n_heads=1" in args and "seed=1" in args
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[a for a in args if not a.startswith("hydra.")])
    assert cfg.model.n_heads == 1 and cfg.seed == 1
    check_config(cfg)


def test_slurm_launcher_preset_ties_resources_to_trainer(tmp_path):
    """hydra/launcher=slurm: one SLURM job per sweep job with trainer.devices GPUs and tasks per node."""
    from hydra import compose, initialize_config_dir
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf  # noqa: F401 (registers configs)
    from submitit.slurm.slurm import _make_sbatch_string

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "hydra/launcher=slurm",
                "trainer=ddp",
                "trainer.devices=4",
                "trainer.num_nodes=2",
                "hparams_search=optuna",
                "objective.mode=max",
            ],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.nodes) == (4, 4, 2)
    assert cfg.hydra.sweeper.direction == "maximize"  # Optuna direction follows objective.mode
    sbatch = _make_sbatch_string(
        command="python -u run.py",
        folder=str(tmp_path),
        job_name="x",
        nodes=launcher.nodes,
        gpus_per_node=launcher.gpus_per_node,
        ntasks_per_node=launcher.tasks_per_node,
        time=launcher.timeout_min,
    )
    for line in ("--gpus-per-node=4", "--ntasks-per-node=4", "--nodes=2"):
        assert line in sbatch
