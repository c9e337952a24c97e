"""A sweep folder refuses another config only where a job trained (``metrics.json`` or a checkpoint);
folders left by jobs stopped before training (a config error, an environment variable not set) are
reused by the next command; a sweep whose jobs all share one problem prints it once."""

from __future__ import annotations

import json

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.conftest import REPO
from xformer.errors import ConfigError
from xformer.jobs import sweep, sweep_resume
from xformer.jobs.sweep import sweep_jobs
from xformer.report import claims_run

CLAIM = "c6_pe_in_distribution"


def _record_job_configs(sweep_dir, extra):
    """Job folders 0 and 1 as Hydra leaves them when a job starts: ``.hydra/config.yaml`` only."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        over = [f"experiment=claims/{CLAIM}", "scale=cpu", *extra]
        jobs = sweep_jobs(compose("config", overrides=over, return_hydra_config=True))
        for num in (0, 1):
            (sweep_dir / str(num) / ".hydra").mkdir(parents=True)
            OmegaConf.save(
                compose("config", overrides=[*over, *jobs[num]]), sweep_dir / str(num) / ".hydra" / "config.yaml"
            )


def test_folders_of_jobs_that_never_trained_are_reused_by_another_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XFORMER_RUNS", str(tmp_path / "runs"))
    sweep_dir = claims_run.inspect(CLAIM, "cpu").sweep_dir
    _record_job_configs(sweep_dir, ["optim.lr=0.01"])  # a first try that stopped before training
    assert sweep_resume.recorded_config(sweep_dir / "0") is None
    assert claims_run.inspect(CLAIM, "cpu").refused is None


def test_a_folder_where_a_job_trained_refuses_another_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XFORMER_RUNS", str(tmp_path / "runs"))
    sweep_dir = claims_run.inspect(CLAIM, "cpu").sweep_dir
    _record_job_configs(sweep_dir, ["optim.lr=0.01"])
    (sweep_dir / "1" / "metrics.json").write_text(json.dumps({"status": "failed"}))
    refused = claims_run.inspect(CLAIM, "cpu").refused
    assert refused is not None and refused.startswith("job 1 ") and "optim.lr" in refused
    (sweep_dir / "1" / "metrics.json").unlink()
    (sweep_dir / "0" / "checkpoints").mkdir()
    (sweep_dir / "0" / "checkpoints" / "last.ckpt").write_bytes(b"x")
    refused = claims_run.inspect(CLAIM, "cpu").refused
    assert refused is not None and refused.startswith("job 0 ")


def test_a_problem_every_job_shares_is_one_line():
    err = ConfigError("data.root=${oc.env:X}: the environment variable X is not set. Fix: export X=<value>")
    lines = sweep.error_lines(3, [(n, [f"seed={n}"], err) for n in range(3)])
    assert lines == [f"error: {err} (all 3 sweep jobs; nothing was run)"]


def test_problems_of_some_jobs_name_a_job_and_count_the_others():
    a, b = ConfigError("model.n_heads=3: not a divisor. Fix: 2"), ConfigError("optim.lr=-1: must be > 0. Fix: 1")
    bad = [(1, ["n=1"], a), (2, ["n=2"], a), (4, ["n=4"], b)]
    assert sweep.error_lines(6, bad) == [
        f"error: sweep job 1 (n=1) and 1 more job: {a}",
        f"error: sweep job 4 (n=4): {b}",
        "error: 3 of 6 sweep jobs have an invalid config; nothing was run. Fix the overrides above "
        "(HYDRA_FULL_ERROR=1 shows a stack trace)",
    ]
