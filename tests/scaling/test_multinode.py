"""Two nodes on this machine (gloo, one rank per node): ``torchrun --nnodes=2`` as docs/scaling.md writes it and
the environment ``srun`` gives each task of a ``--nodes=2 --ntasks-per-node=1`` job, each equal bit for bit to
the same job with 2 processes on one node; a node lost mid-run; FSDP across the two nodes.
(A real 2-node SLURM cluster on this machine: ``tests/cluster/test_multinode_slurm.py``.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.scaling.common import DDP_CPU, TINY, env, fail_msg, metrics, wandb_run_files

#: The same job on two nodes of one device each (the data-parallel size stays 2)
TWO_NODES = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=1", "trainer.num_nodes=2"]
SAME = ("val/loss", "train/loss", "test/loss", "test/acc", "test/exact_match", "test/loss@long")
#: docs/scaling.md's torchrun command for each node, the flags this test passes
DOCS_TORCHRUN = "torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=$HEAD_NODE:29500"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def node_commands(args: list[str], run_id: str) -> list[list[str]]:
    """docs/scaling.md's ``torchrun`` command for node 0 and node 1 of this machine (``$HEAD_NODE`` =
    127.0.0.1, one process per node, a free port); ``--node_rank`` as a user would give it (the c10d
    rendezvous numbers the nodes itself)."""
    port = free_port()
    return [
        [
            sys.executable,
            "-m",
            "torch.distributed.run",  # = torchrun
            "--nnodes=2",
            "--nproc_per_node=1",
            f"--node_rank={node}",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}",
            f"--rdzv_id={run_id}",
            str(REPO / "run.py"),
            *args,
        ]
        for node in (0, 1)
    ]


def start_nodes(commands: list[list[str]], cwd: Path, tmp: Path, tag: str = "node") -> list[subprocess.Popen]:
    """Node 0 first (it hosts the rendezvous store, as the head node does), node 1 once the store listens;
    their consoles go to ``<tmp>/<tag><n>.log``."""
    procs: list[subprocess.Popen] = []
    endpoint = next(a for a in commands[0] if a.startswith("--rdzv_endpoint="))
    port = int(endpoint.rsplit(":", 1)[1])
    for node, cmd in enumerate(commands):
        out = (tmp / f"{tag}{node}.log").open("w")
        procs.append(
            subprocess.Popen(cmd, cwd=cwd, env=env(tmp), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        )
        deadline = time.monotonic() + 60
        while node == 0 and not listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
    return procs


def wait_nodes(
    procs: list[subprocess.Popen], tmp: Path, timeout: float = 300, tag: str = "node"
) -> tuple[list[int], list[str]]:
    """Exit codes and console text of the node processes (each killed after ``timeout`` s)."""
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            codes.append(proc.wait())
    return codes, [(tmp / f"{tag}{n}.log").read_text() for n in range(len(procs))]


def torchrun_two_nodes(args: list[str], cwd: Path, tmp: Path, tag: str = "node") -> tuple[list[int], list[str]]:
    return wait_nodes(start_nodes(node_commands(args, tmp.name + tag), cwd, tmp, tag), tmp, tag=tag)


def srun_env(node: int, job_id: str) -> dict[str, str]:
    """What SLURM sets for task ``node`` of ``sbatch --nodes=2 --ntasks-per-node=1`` (one task per node),
    which Lightning's ``SLURMEnvironment`` reads; the node names resolve nowhere, so ``MASTER_ADDR`` is set as
    a job on such a cluster does (tests/cluster runs the same job under a real 2-node cluster)."""
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NAME": "xformer",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODEID": str(node),
        "SLURM_PROCID": str(node),
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_TASKS_PER_NODE": "1(x2)",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_NODELIST": "node[1-2]",
        "SLURMD_NODENAME": f"node{node + 1}",
        "SLURM_RESTART_COUNT": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }


def srun_two_nodes(args: list[str], cwd: Path, tmp: Path) -> tuple[list[int], list[str]]:
    """The two tasks of a 2-node ``srun python run.py ...``, each with its node's SLURM environment."""
    job_id = str(4000 + os.getpid() % 1000)
    task0 = srun_env(0, job_id)
    procs = []
    for node in (0, 1):
        task = {**srun_env(node, job_id), "MASTER_PORT": task0["MASTER_PORT"]}
        out = (tmp / f"node{node}.log").open("w")
        procs.append(
            subprocess.Popen(
                [sys.executable, str(REPO / "run.py"), *args],
                cwd=cwd,
                env={**env(tmp), **task},  # env() drops an inherited MASTER_ADDR; this one is the job's
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return wait_nodes(procs, tmp)


def assert_same(job: Path, ref: Path) -> None:
    got, want = metrics(job), metrics(ref)
    assert got["status"] == "finished", got.get("error")
    assert got["global_step"] == want["global_step"]
    assert got["tokens_seen"] == want["tokens_seen"]  # every rank's tokens counted once
    for key in SAME:
        assert got["metrics"][key] == want["metrics"][key], (key, got["metrics"][key], want["metrics"][key])


def quiet(consoles: list[str]) -> None:
    """No third-party deprecation warning on any rank's console."""
    for text in consoles:
        assert "deprecated" not in text.lower(), [ln for ln in text.splitlines() if "deprecat" in ln.lower()]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> Path:
    """The job with 2 processes on one node (``torchrun --standalone --nproc_per_node=2``), 6 steps."""
    tmp = tmp_path_factory.mktemp("one_node")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(REPO / "run.py")]
    res = subprocess.run(
        [*cmd, *TINY, *DDP_CPU, "trainer.max_steps=6", f"hydra.run.dir={tmp / 'job'}"],
        cwd=tmp,
        env=env(tmp),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, fail_msg(res)
    return tmp / "job"


def test_docs_torchrun_command_is_the_tested_one():
    assert DOCS_TORCHRUN in (REPO / "docs" / "scaling.md").read_text()


@pytest.mark.slow  # ~40 s: the 2-node job and, shared with the tests below, the 1-node reference
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_two_nodes_equal_one_node_two_processes(launcher, one_node, tmp_path):
    """Two nodes x one rank (torchrun's c10d rendezvous, or the tasks of a 2-node srun) train the micro-batches
    of 2 processes on one node to the same numbers bit for bit, count each token once, and write one job
    folder (global rank 0's: metrics.json, one W&B run; rank 1 only its Hydra log) and nothing else."""
    job = tmp_path / "job"
    run = torchrun_two_nodes if launcher == "torchrun" else srun_two_nodes
    codes, consoles = run([*TINY, *TWO_NODES, "trainer.max_steps=6", f"hydra.run.dir={job}"], tmp_path, tmp_path)
    assert codes == [0, 0], consoles
    assert_same(job, one_node)
    m = metrics(job)
    assert m["config"]["trainer"]["num_nodes"] == 2 and m["config"]["trainer"]["devices"] == 1
    assert len(wandb_run_files(job)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "job", "node0.log", "node1.log"]
    assert (job / "run_rank1.log").is_file() and not (job / "run_rank1").exists()
    assert sum("GLOBAL_RANK: 1, MEMBER: 2/2" in text for text in consoles) == 1
    quiet(consoles)


@pytest.mark.slow  # ~60 s: the job, killed, then resumed by the same command
@pytest.mark.parametrize("how", ["KILL", "STOP"], ids=["process-dies", "node-vanishes"])
def test_lost_node_survivor_stops_with_one_line_and_same_command_resumes(how, one_node, tmp_path):
    """Node 1 is lost after step 5 of 6 (its torchrun agent and its rank: SIGKILL, connections closed; or
    SIGSTOP, connections left open, as when a node's power or network goes, noticed only by the collective
    timeout, here ``trainer.strategy.timeout_s=10``). The survivor (global rank 0, node 0) stops within 60 s
    with one ``error:`` line naming the lost peer, the step, the kept checkpoint and the command; the job is
    ``failed`` with last.ckpt of step 4 intact. The same command run again resumes it from there to the numbers
    of the uninterrupted 1-node job."""
    job, marker = tmp_path / "job", tmp_path / "lost.json"
    lose = [
        "+callbacks.lose_node._target_=tests.scaling.node_loss.LoseNodeAt",
        "+callbacks.lose_node.step=5",
        f"+callbacks.lose_node.marker={marker}",
        f"+callbacks.lose_node.how={how}",
    ]
    args = [
        *TINY,
        *TWO_NODES,
        "trainer.max_steps=6",
        "trainer.strategy.timeout_s=10",
        "callbacks.last_checkpoint.every_n_train_steps=2",
        *lose,
        "ckpt_path=last",  # the same command starts the job and resumes it
        f"hydra.run.dir={job}",
    ]
    commands = node_commands(args, "lost")
    procs = start_nodes(commands, tmp_path, tmp_path)
    try:
        code0 = procs[0].wait(timeout=300)
        stopped = time.time()
    finally:
        lost = json.loads(marker.read_text())["pids"] if marker.exists() else []
        for pid in lost:  # a stopped node's processes: gone now
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        procs[1].wait(timeout=60)
    console = (tmp_path / "node0.log").read_text()
    assert marker.exists(), console[-3000:]
    took = stopped - json.loads(marker.read_text())["time"]
    assert code0 != 0 and took < 60, (code0, took)
    lines = [ln for ln in console.splitlines() if "a peer rank was lost" in ln]
    assert len(lines) == 1, console[-3000:]
    assert lines[0].startswith("error: rank 0 of 2: a peer rank was lost at step 5 (")
    assert "checkpoints/last.ckpt (step 4) is kept" in lines[0] and f"ckpt_path=last hydra.run.dir={job}" in lines[0]
    assert "GLHF" not in console and "Error executing job" not in console  # gloo's own text, Hydra's traceback
    m = metrics(job)
    assert m["status"] == "failed" and "a peer rank was lost" in m["error"]
    assert (job / "checkpoints" / "last.ckpt").is_file()
    quiet([console])

    codes, consoles = torchrun_two_nodes(args, tmp_path, tmp_path, tag="again")
    assert codes == [0, 0], consoles
    assert "Restored all states from the checkpoint" in consoles[0]
    assert_same(job, one_node)
    assert len({p.name.rsplit("-", 1)[1] for p in job.glob("wandb/offline-run-*")}) == 1  # one W&B run, continued
    quiet(consoles)


@pytest.mark.slow  # ~90 s: FSDP on two nodes, stopped and resumed, and on one node
def test_fsdp_two_nodes_equals_one_node_and_resumes_exactly(tmp_path):
    """``trainer=fsdp`` with ``num_nodes=2`` shards over 2 x 1 ranks: the same numbers as FSDP over 2 devices of
    one node; a two-node FSDP job that lost node 1 after step 5 resumes from its step-4 checkpoint (written by
    both nodes' shards) to the same numbers."""
    fsdp = ["trainer=fsdp", "trainer.accelerator=cpu", "trainer.max_steps=6", "logger=csv"]
    ref = tmp_path / "ref"
    res = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *TINY, *fsdp, "trainer.devices=2", f"hydra.run.dir={ref}"],
        cwd=tmp_path,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert res.returncode == 0, fail_msg(res)

    two = [*TINY, *fsdp, "trainer.devices=1", "trainer.num_nodes=2"]
    codes, consoles = torchrun_two_nodes([*two, f"hydra.run.dir={tmp_path / 'whole'}"], tmp_path, tmp_path, "whole")
    assert codes == [0, 0], consoles
    assert_same(tmp_path / "whole", ref)
    quiet(consoles)

    job, marker = tmp_path / "job", tmp_path / "lost.json"
    args = [
        *two,
        "callbacks.last_checkpoint.every_n_train_steps=2",
        "+callbacks.lose_node._target_=tests.scaling.node_loss.LoseNodeAt",
        "+callbacks.lose_node.step=5",
        f"+callbacks.lose_node.marker={marker}",
        "ckpt_path=last",
        f"hydra.run.dir={job}",
    ]
    codes, consoles = torchrun_two_nodes(args, tmp_path, tmp_path, "first")
    assert marker.exists() and codes[0] != 0 and metrics(job)["status"] == "failed", consoles
    codes, consoles = torchrun_two_nodes(args, tmp_path, tmp_path, "again")
    assert codes == [0, 0], consoles
    assert "Restored all states from the checkpoint" in consoles[0]
    assert_same(job, ref)
