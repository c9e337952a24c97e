"""In-process checks of the relaunch command and of externally launched ranks (no training)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from tests.conftest import REPO
from xformer.jobs import distributed


@pytest.fixture
def sweep_job_hydra(tmp_path):
    """HydraConfig of job 3 of a `-m` sweep run with the joblib launcher."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "trainer=ddp",
                "model.ffn_ratio=4",
                "tags=[a,b]",
                "hydra/launcher=joblib",
                f"hydra.sweep.dir={tmp_path}",
                "hydra.job.chdir=false",
            ],
            return_hydra_config=True,
        )
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path / "3 jobs, odd=dir")
        cfg.hydra.runtime.cwd = str(tmp_path)
        cfg.hydra.job.num = 3
    HydraConfig.instance().set_config(cfg)
    yield cfg
    HydraConfig.instance().cfg = None


@pytest.mark.usefixtures("sweep_job_hydra")
def test_child_rank_command_runs_this_job_once(tmp_path):
    cmd, cwd = distributed.child_rank_command(1, script="/x/run.py")
    assert cmd[1] == "/x/run.py" and cwd == str(tmp_path)
    assert "-m" not in cmd and "--multirun" not in cmd
    for override in (
        "trainer=ddp",
        "model.ffn_ratio=4",
        "tags=[a,b]",
        "hydra.job.chdir=false",
        "hydra.output_subdir=null",
        "hydra.job.name=train_ddp_process_1",
    ):
        assert override in cmd, override
    assert f"hydra.run.dir='{tmp_path / '3 jobs, odd=dir'}'" in cmd  # quoted: Hydra reads it back verbatim
    assert not any(c.startswith(("hydra.sweep", "hydra/launcher", "hydra.mode")) for c in cmd)
    assert cmd[cmd.index("--config-name") + 1] == "config"
    assert cmd[cmd.index("--config-path") + 1] == str(REPO / "conf")


def test_child_rank_command_parses_back_to_the_same_job(sweep_job_hydra):
    """Compose the child's overrides again: the same config (and the job folder as run dir)."""
    cmd, _ = distributed.child_rank_command(1, script="/x/run.py")
    overrides = cmd[cmd.index("config") + 1 :]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        child = compose("config", overrides=overrides, return_hydra_config=True)
    assert child.hydra.run.dir == sweep_job_hydra.hydra.runtime.output_dir
    assert child.model.ffn_ratio == 4 and list(child.tags) == ["a", "b"] and child.trainer.strategy == "ddp"


def test_external_ranks_above_zero_write_no_hydra_output(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    argv = ["run.py", "trainer=ddp"]
    assert distributed.external_rank_argv(argv) == argv  # not launched externally
    monkeypatch.setenv("RANK", "0")
    assert distributed.external_rank_argv(argv) == argv  # rank 0 owns the output folder
    monkeypatch.setenv("RANK", "1")
    out = distributed.external_rank_argv(argv)
    assert "hydra.output_subdir=null" in out and "hydra.job.name=run_rank1" in out
    run_dir = next(a for a in out if a.startswith("hydra.run.dir="))
    assert str(tmp_path) in run_dir and "xformer-rank1-" in run_dir
    pinned = distributed.external_rank_argv([*argv, "hydra.run.dir=/shared/job"])
    assert [a for a in pinned if a.startswith("hydra.run.dir=")] == ["hydra.run.dir=/shared/job"]
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert distributed.env_rank() == 2
    monkeypatch.setenv("SLURM_NTASKS", "1")  # a single-task allocation is not a launcher
    assert distributed.env_rank() == 0
