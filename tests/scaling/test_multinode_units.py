"""In-process and two-process checks of the multi-node settings: the collective timeout of ``trainer=ddp`` /
``trainer=fsdp``, and the one line a rank prints when a real gloo collective loses its peer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from tests.conftest import REPO
from tests.scaling.test_multinode import free_port
from xformer.errors import ConfigError
from xformer.jobs import distributed


def _trainer_node(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides)).trainer


@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
def test_trainer_configs_time_collectives_out_before_torchs_30_minutes(trainer):
    """``trainer=ddp`` and ``trainer=fsdp`` build strategies whose process group waits
    ``trainer.strategy.timeout_s`` seconds (600 by default, not torch's 1800), and the key reaches them."""
    for overrides, seconds in (([], distributed.COLLECTIVE_TIMEOUT_S), (["trainer.strategy.timeout_s=42"], 42)):
        node = _trainer_node(f"trainer={trainer}", "trainer.accelerator=cpu", *overrides)
        strategy = instantiate(node.strategy)
        # Lightning keeps the timeout it hands to init_process_group in the strategy's __init__ arguments only
        assert vars(strategy)["_timeout"] == timedelta(seconds=seconds)
    assert distributed.COLLECTIVE_TIMEOUT_S < 1800


@pytest.mark.parametrize("value", [0, -5, "soon", float("inf")])
def test_collective_timeout_refuses_what_is_no_duration(value):
    with pytest.raises(ConfigError, match=r"trainer.strategy.timeout_s=.*Fix: trainer.strategy.timeout_s=600"):
        distributed.collective_timeout(value)


RANK = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    rank, port, how = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=5))
    dist.all_reduce(torch.ones(1))
    if rank == 1:
        if how == "exit":
            os._exit(9)  # the peer's process dies: its connections close
        time.sleep(30)  # the peer stops answering with its connections open
        os._exit(0)
    try:
        dist.all_reduce(torch.ones(1))
    except Exception as err:
        from xformer.jobs.distributed import peer_lost_line
        print("LINE", peer_lost_line(RuntimeError("in training_step"), 3, None) is None)
        try:
            raise RuntimeError("a callback failed") from err
        except RuntimeError as outer:
            print("LINE", peer_lost_line(outer, 3, None))
    """
)


@pytest.mark.parametrize("how", ["exit", pytest.param("silent", marks=pytest.mark.slow)])
def test_a_real_gloo_peer_loss_gives_one_line(how, tmp_path):
    """Two gloo ranks; rank 1 dies (or hangs, found by the 5 s timeout) after the first all-reduce: rank 0's
    failed collective, also wrapped in another error, gives the line naming rank 0 of 2, the step and the fix;
    an error that is no peer loss gives none."""
    port = str(free_port())
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), port, how], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for r in (0, 1)
    ]
    out, err = procs[0].communicate(timeout=120)
    took = time.monotonic() - started
    procs[1].kill()
    procs[1].wait()
    lines = [ln.split(" ", 1)[1] for ln in out.decode().splitlines() if ln.startswith("LINE ")]
    assert lines[:1] == ["True"], (out.decode(), err.decode()[-2000:])
    line = lines[1]
    assert line.startswith("rank 0 of 2: a peer rank was lost at step 3 ("), line
    assert "no checkpoint was saved yet" in line and "Fix: start the job again on every node" in line
    assert "GLHF" not in line and "\n" not in line
    assert took < 60  # the 5 s collective timeout, not torch's 30 minutes
