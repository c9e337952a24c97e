"""SLURM pieces that need no cluster: which checkpoint a requeued job resumes, the sbatch request a
``hydra/launcher=slurm`` sweep makes, and submitit's sacct warnings reduced to one line. (The
cluster itself: ``tests/cluster/``.)"""

from __future__ import annotations

import logging

import pytest
import torch
from omegaconf import OmegaConf

from xformer.jobs import slurm
from xformer.jobs.checkpoints import requeued_checkpoint, resolve_ckpt_path


@pytest.fixture
def job_folder(tmp_path):
    """A job folder whose last.ckpt was written by SLURM job 5 of cluster ``c``."""
    (tmp_path / "checkpoints").mkdir()
    torch.save({"state_dict": {}, "xformer": {"slurm_job": "c/5"}}, tmp_path / "checkpoints" / "last.ckpt")
    return tmp_path


def _env(monkeypatch, **values: str | None) -> None:
    for key in ("SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in values.items():
        if value is not None:
            monkeypatch.setenv(key, value)


@pytest.mark.parametrize(
    ("job", "cluster", "restarts", "resumes"),
    [
        ("5", "c", "1", True),  # this job, requeued: its own checkpoint
        ("5", "c", "3", True),
        ("5", "c", None, False),  # never requeued: a fresh job starts from scratch
        ("5", "c", "0", False),
        ("6", "c", "1", False),  # requeued, but the checkpoint is another job's
        ("5", "d", "1", False),  # the same job id on another cluster
        (None, None, "1", False),  # not a SLURM job
    ],
)
def test_requeued_job_resumes_only_its_own_checkpoint(monkeypatch, job_folder, job, cluster, restarts, resumes):
    _env(monkeypatch, SLURM_JOB_ID=job, SLURM_CLUSTER_NAME=cluster, SLURM_RESTART_COUNT=restarts)
    want = job_folder / "checkpoints" / "last.ckpt" if resumes else None
    assert requeued_checkpoint(job_folder) == want
    cfg = OmegaConf.create({"ckpt_path": None, "mode": "train"})
    assert resolve_ckpt_path(cfg, job_folder) == (str(want) if want else None)


@pytest.mark.parametrize("given", ["/x/started-from.ckpt", "last"])
def test_a_requeued_job_resumes_its_own_checkpoint_whatever_its_command_line_names(monkeypatch, job_folder, given):
    """Started with ``ckpt_path=<file>`` (or ``last``), preempted, requeued with the same command line: the job's
    own ``last.ckpt`` (where it is now), not the file it started from (issue 51, row 8)."""
    _env(monkeypatch, SLURM_JOB_ID="5", SLURM_CLUSTER_NAME="c", SLURM_RESTART_COUNT="1")
    cfg = OmegaConf.create({"ckpt_path": given, "mode": "train"})
    assert resolve_ckpt_path(cfg, job_folder) == str(job_folder / "checkpoints" / "last.ckpt")


def test_a_fresh_job_and_eval_mode_keep_an_explicit_ckpt_path(monkeypatch, job_folder):
    _env(monkeypatch, SLURM_JOB_ID="5", SLURM_CLUSTER_NAME="c", SLURM_RESTART_COUNT="0")  # not requeued
    assert resolve_ckpt_path(OmegaConf.create({"ckpt_path": "/x/y.ckpt", "mode": "train"}), job_folder) == "/x/y.ckpt"
    _env(monkeypatch, SLURM_JOB_ID="5", SLURM_CLUSTER_NAME="c", SLURM_RESTART_COUNT="1")
    assert resolve_ckpt_path(OmegaConf.create({"ckpt_path": "/x/y.ckpt", "mode": "eval"}), job_folder) == "/x/y.ckpt"
    assert resolve_ckpt_path(OmegaConf.create({"ckpt_path": None, "mode": "eval"}), job_folder) is None
    assert requeued_checkpoint(None) is None


def test_requeued_job_with_unreadable_checkpoint_starts_from_scratch(monkeypatch, job_folder):
    (job_folder / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    _env(monkeypatch, SLURM_JOB_ID="5", SLURM_CLUSTER_NAME="c", SLURM_RESTART_COUNT="1")
    assert requeued_checkpoint(job_folder) is None


def test_sbatch_request_has_what_submitit_asks_for():
    launcher = {
        "partition": "gpu",
        "nodes": 2,
        "tasks_per_node": 4,
        "cpus_per_task": 8,
        "gpus_per_node": 4,
        "timeout_min": 240,
        "mem_gb": 64,
        "account": None,
        "qos": "high",
        "constraint": None,
        "additional_parameters": {"mail_type": "END"},
    }
    assert slurm.sbatch_request(launcher) == [
        "--partition=gpu",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--cpus-per-task=8",
        "--gpus-per-node=4",
        "--time=240",
        "--mem=64G",
        "--qos=high",
        "--mail-type=END",
    ]
    assert "--gpus-per-node=0" not in slurm.sbatch_request({**launcher, "gpus_per_node": 0})


def test_sacct_warnings_become_one_line(caplog):
    """submitit warns "Bypassing sacct error" at every poll on a cluster without accounting (three
    console lines each: its two handlers and Hydra's); after the filter: one xformer line in all."""
    slurm.quiet_sacct_warnings()
    slurm.quiet_sacct_warnings()  # installed once
    sub = logging.getLogger("submitit")
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)

    keep = Keep()
    sub.addHandler(keep)
    try:
        with caplog.at_level(logging.INFO):
            for n in range(3):
                sub.warning(
                    f"Call #{n} - Bypassing sacct error Command '['sacct']' returned 1, status may be inaccurate."
                )
            sub.info("Starting with JobEnvironment(...)")
    finally:
        sub.removeHandler(keep)
        for f in [f for f in sub.filters if isinstance(f, slurm._SacctNotice)]:
            sub.removeFilter(f)
    assert [r.getMessage() for r in seen] == ["Starting with JobEnvironment(...)"]
    notes = [r for r in caplog.records if "keeps no job accounting" in r.getMessage()]
    assert len(notes) == 1 and notes[0].name == "xformer"


def test_a_dry_run_of_a_slurm_sweep_checks_every_job_here_and_queues_nothing(tmp_path):
    """``sweep.dry_run=true`` under ``hydra/launcher=slurm`` on a machine without SLURM (no ``sbatch`` on
    PATH): one line per job, exit 0, no submitit folder (was: submitit called sbatch for every job and
    the sweep failed with its traceback; with SLURM reachable it queued the jobs)."""
    from tests.conftest import TINY
    from tests.scaling.common import fail_msg, run_py

    bin_dir = tmp_path / "bin"  # PATH without SLURM's commands
    bin_dir.mkdir()
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", *TINY, "model.ffn_ratio=1,2"]
    res = run_py([*args, "sweep.dry_run=true", f"hydra.sweep.dir={sweep}"], tmp_path, tmp_path, PATH=str(bin_dir))
    assert res.returncode == 0, fail_msg(res)
    lines = [line for line in res.stdout.splitlines() if line.startswith("[dry run] job ")]
    assert [line.split(":")[0] for line in lines] == ["[dry run] job 0", "[dry run] job 1"]
    assert "model.ffn_ratio=1" in lines[0] and "model.ffn_ratio=2" in lines[1]
    assert "nothing was queued" in res.stdout
    assert not (sweep / ".submitit").exists()
