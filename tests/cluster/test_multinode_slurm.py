"""Multi-node jobs under SLURM on this machine: a real 2-node cluster (two ``slurmd`` of
``XFORMER_SLURM_NODES=2 scripts/slurm-localhost.sh``) runs ``sbatch --nodes=2`` + ``srun python run.py``; a
``hydra/launcher=slurm`` sweep of 2-node jobs is refused by the one-node cluster before anything is queued and
accepted by the 2-node one; a sweep job requeued by SLURM's signal says it resumes by itself."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.cluster.conftest import PYTHON, SCRIPT, Cluster, _alive, _cannot_start, metrics
from tests.cluster.test_slurm import SLURM_LAUNCHER, TRAIN, fail_msg, run_py, signal_at
from tests.conftest import REPO
from tests.scaling.common import TINY
from tests.scaling.test_multinode import TWO_NODES, assert_same, one_node, quiet  # noqa: F401  (one_node: fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]  # CI runs them after `make test` (.ci/run)

STATE2 = Path("/tmp/xformer-slurm-2nodes")


@pytest.fixture(scope="session")
def two_node_cluster() -> Cluster:
    """The 2-node cluster on this machine (started once per test process; skips with the reason when it cannot
    start); stopped at the end when this process started it and no other test process uses it."""
    if (why := _cannot_start()) is not None:
        pytest.skip(why)
    env = {**os.environ, "XFORMER_SLURM_NODES": "2"}
    was_up = subprocess.run([str(SCRIPT), "status"], env=env, capture_output=True).returncode == 0
    res = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        lines = (res.stderr or res.stdout).strip().splitlines()
        pytest.skip(f"cluster: {lines[-1] if lines else 'XFORMER_SLURM_NODES=2 slurm-localhost.sh start failed'}")
    users = STATE2 / "users"
    users.mkdir(parents=True, exist_ok=True)
    mine = users / str(os.getpid())
    mine.touch()
    yield Cluster(conf=res.stdout.strip().splitlines()[-1].split("=", 1)[1])
    mine.unlink(missing_ok=True)
    others = [p for p in users.iterdir() if p.name.isdigit() and _alive(int(p.name))]
    if not was_up and not others:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def two_node_script(path: Path, run_args: list[str]) -> Path:
    """``sbatch --nodes=2 --ntasks-per-node=1`` running ``srun python run.py <run_args>`` (docs/scaling.md's
    script, one CPU rank per node)."""
    path.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                "#SBATCH --nodes=2",
                "#SBATCH --ntasks-per-node=1",
                "#SBATCH --cpus-per-task=1",
                f"#SBATCH --output={path.with_suffix('.out')}",
                "#SBATCH --open-mode=append",
                "export MASTER_ADDR=127.0.0.1  # this cluster's node names resolve nowhere",
                f"cd {path.parent}",
                f"srun {PYTHON} {REPO / 'run.py'} {' '.join(run_args)}",
                "",
            ]
        )
    )
    return path


@pytest.mark.slow  # ~40 s
def test_sbatch_two_nodes_equals_one_node_two_processes(two_node_cluster, one_node, tmp_path):  # noqa: F811
    """A real 2-node SLURM job (its tasks on node1 and node2, SLURM_NODEID 0 and 1) trains to the numbers of
    the same job with 2 processes on one node, bit for bit, in one job folder with one W&B run."""
    job = tmp_path / "job"
    script = two_node_script(tmp_path / "job.sh", [*TINY, *TWO_NODES, "trainer.max_steps=6", f"hydra.run.dir={job}"])
    jid = two_node_cluster.sbatch(script, tmp_path)
    two_node_cluster.wait_gone(jid, tmp_path)
    out = script.with_suffix(".out").read_text()
    assert_same(job, one_node)
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in out and "GLOBAL_RANK: 0, MEMBER: 1/2" in out
    assert len(list(job.glob("wandb/offline-run-*/run-*.wandb"))) == 1
    quiet([out])


def slurm_sweep_config(nodes: int) -> OmegaConf:
    """What ``hydra/launcher=slurm hydra.launcher.partition=cpu ... trainer.num_nodes=<nodes>`` resolves to."""
    return OmegaConf.create(
        {
            "hydra": {
                "launcher": {
                    "_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
                    "partition": "cpu",
                    "nodes": nodes,
                    "tasks_per_node": 1,
                    "cpus_per_task": 1,
                    "gpus_per_node": 0,
                    "timeout_min": 5,
                }
            }
        }
    )


def test_two_node_request_refused_by_one_node_cluster_accepted_by_two(slurm_cluster, two_node_cluster, monkeypatch):
    """``sbatch --test-only`` (nothing queued) of a 2-node job: the one-node cluster refuses it with a line that
    names the node counts; the 2-node cluster takes it."""
    from xformer.jobs.slurm import sweep_problem

    monkeypatch.setenv("SLURM_CONF", slurm_cluster.conf)
    line = sweep_problem(slurm_sweep_config(2), [[]])
    assert line is not None and "trainer.num_nodes=2 asks SLURM for 2 nodes, but partition cpu has 1" in line
    assert "Fix: trainer.num_nodes=1" in line
    monkeypatch.setenv("SLURM_CONF", two_node_cluster.conf)
    assert sweep_problem(slurm_sweep_config(2), [[]]) is None
    assert sweep_problem(slurm_sweep_config(3), [[]]) is not None


def test_slurm_sweep_of_two_node_jobs_on_one_node_cluster_is_one_error_line(slurm_cluster, tmp_path):
    """``hydra/launcher=slurm trainer.num_nodes=2`` on the one-node cluster: exit 2, one ``error:`` line naming
    the node count, no sweep folder, nothing queued."""
    sweep = tmp_path / "sweep"
    args = ["-m", *SLURM_LAUNCHER, *TINY, *TWO_NODES, "trainer.max_steps=2", f"hydra.sweep.dir={sweep}"]
    res = run_py(slurm_cluster, args, tmp_path, timeout=300)
    assert res.returncode == 2, fail_msg(res)
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "trainer.num_nodes=2 asks SLURM for 2 nodes, but partition cpu has 1" in errors[0]
    assert "Traceback" not in res.stderr
    assert not sweep.exists()
    assert not slurm_cluster.queued(tmp_path, settle=0)


@pytest.mark.slow  # ~70 s: two attempts of a SLURM job
def test_requeued_sweep_job_log_says_it_resumes_by_itself(slurm_cluster, tmp_path):
    """A sweep job sent submitit's requeue signal (USR2) at step 7: its log says it is requeued and resumes by
    itself (how long SLURM holds it, where to look), the next attempt says it resumes at step 7, and no attempt
    tells the user to resume the sweep by hand (was: "sweep stopped (exit 143); resume the whole sweep with:
    ..." in every requeued attempt's log)."""
    sweep, log = tmp_path / "sweep", tmp_path / "signals.jsonl"
    args = ["-m", *SLURM_LAUNCHER, "hydra.launcher.max_num_timeout=2", *TRAIN, f"hydra.sweep.dir={sweep}"]
    started = time.time()
    res = run_py(slurm_cluster, [*args, *signal_at(log, batches=7, signal="USR2", times=1)], tmp_path)
    assert res.returncode == 0, fail_msg(res)
    assert metrics(sweep / "0")["status"] == "finished" and time.time() > started
    text = "".join(p.read_text() for p in sweep.glob(".submitit/*/*_log.out"))
    job = next(p.name for p in (sweep / ".submitit").iterdir() if p.name.isdigit())
    assert f"requeued SLURM job {job}: it resumes from its last.ckpt by itself" in text
    assert f"squeue -j {job}" in text
    assert f"requeued SLURM job {job} (restart 1): resuming by itself from {sweep / '0' / 'checkpoints'}" in text
    assert "at step 7" in text
    for wrong in ("resume the whole sweep", "sweep stopped", "resume with:", "not requeued"):
        assert wrong not in text + res.stdout + res.stderr, wrong


@pytest.mark.slow  # ~70 s: the 2-node SLURM job, then the same script again
def test_sbatch_two_nodes_lost_task_fails_with_one_line_and_same_script_resumes(
    two_node_cluster,
    one_node,  # noqa: F811
    tmp_path,
):
    """Under a real 2-node ``srun``, task 1 (node2) is killed after step 5 of 6: the task on node1 stops with
    the one ``error:`` line, SLURM ends the job FAILED, last.ckpt of step 4 is kept; the same script submitted
    again resumes it to the numbers of 2 processes on one node."""
    job, marker = tmp_path / "job", tmp_path / "lost.json"
    args = [
        *TINY,
        *TWO_NODES,
        "trainer.max_steps=6",
        "callbacks.last_checkpoint.every_n_train_steps=2",
        "+callbacks.lose_node._target_=tests.scaling.node_loss.LoseNodeAt",
        "+callbacks.lose_node.step=5",
        f"+callbacks.lose_node.marker={marker}",
        "+callbacks.lose_node.parent=false",
        "ckpt_path=last",
        f"hydra.run.dir={job}",
    ]
    script = two_node_script(tmp_path / "job.sh", args)
    first = two_node_cluster.sbatch(script, tmp_path)
    two_node_cluster.wait_gone(first, tmp_path)
    out = script.with_suffix(".out").read_text()
    lines = [ln for ln in out.splitlines() if "a peer rank was lost" in ln]
    assert len(lines) == 1 and lines[0].startswith("error: rank 0 of 2: a peer rank was lost at step 5 ("), out
    assert "last.ckpt (step 4) is kept" in lines[0] and "GLHF" not in out and "Traceback" not in out
    assert metrics(job)["status"] == "failed" and marker.exists()
    again = two_node_cluster.sbatch(script, tmp_path)
    two_node_cluster.wait_gone(again, tmp_path)
    assert "Restored all states from the checkpoint" in script.with_suffix(".out").read_text()
    assert_same(job, one_node)
