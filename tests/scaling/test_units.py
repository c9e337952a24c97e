"""In-process checks of who starts a job's ranks, the FSDP strategy and externally launched ranks (no training)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from xformer.jobs import distributed


def _trainer_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides)).trainer


@pytest.mark.parametrize(
    ("overrides", "ranks"),
    [
        (["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"], 2),
        (["trainer=ddp_spawn", "trainer.accelerator=cpu", "trainer.devices=3"], 0),  # Lightning forks them
        (["trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2"], 2),
        (["trainer.accelerator=cpu"], 0),  # one process: nothing to start
        (["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=1"], 0),
    ],
)
def test_a_sweep_job_starts_the_ranks_lightning_would_launch(monkeypatch, overrides, ranks):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_PROCID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    assert distributed.ranks_to_start(_trainer_cfg(*overrides)) == ranks


def test_a_job_under_an_external_launcher_starts_no_ranks(monkeypatch):
    """torchrun / Lightning's own child ranks: LOCAL_RANK is set, the processes exist."""
    for key, value in {"LOCAL_RANK": "0", "NODE_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(key, value)
    assert distributed.ranks_to_start(_trainer_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2")) == 0


@pytest.mark.parametrize(("devices", "size"), [(2, 2), ("0,1,2", 3), ([0, 1], 2), ("4", 4)])
def test_fsdp_shards_over_every_device_of_every_node(devices, size):
    from lightning.pytorch.strategies import ModelParallelStrategy

    strategy = distributed.fsdp_strategy(devices=devices, num_nodes=2)
    assert isinstance(strategy, ModelParallelStrategy)
    assert vars(strategy)["_data_parallel_size"] == 2 * size and vars(strategy)["_tensor_parallel_size"] == 1


@pytest.mark.parametrize("devices", ["auto", -1, 0])
def test_fsdp_without_a_device_count_is_one_error_line(devices):
    from xformer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"trainer.devices=.*Fix: trainer.devices=<n>"):
        distributed.fsdp_strategy(devices=devices)


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


def test_the_ranks_of_a_sweep_job_write_only_into_its_folder(monkeypatch, tmp_path):
    """Under the ``torchrun`` a ``-m`` job starts, rank 0 writes into the job's folder with no ``.hydra/`` of
    its own, and ranks > 0 into a temporary folder, although the job's overrides name none."""
    import json
    import tempfile

    from xformer.config.overrides import quoted
    from xformer.jobs.overrides import SWEEP_JOB_ENV

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    job = tmp_path / "sweep" / "3"
    monkeypatch.setenv(SWEEP_JOB_ENV, json.dumps({"info": {"output_dir": str(job)}, "resume": "python run.py -m"}))
    argv = ["run.py", "trainer=ddp", "hydra.run.dir=/elsewhere"]
    monkeypatch.setenv("RANK", "0")
    out = distributed.external_rank_argv(argv)
    assert out[-2:] == [f"hydra.run.dir={quoted(str(job))}", "hydra.output_subdir=null"]  # the last value of a key wins
    monkeypatch.setenv("RANK", "1")
    out = distributed.external_rank_argv(argv)
    run_dirs = [a for a in out if a.startswith("hydra.run.dir=")]
    assert str(tmp_path) in run_dirs[-1] and "xformer-rank1-" in run_dirs[-1]
    assert "hydra.output_subdir=null" in out and "hydra.job.name=run_rank1" in out
