"""Two runs started in the same second get a folder each.

A single-run folder named ``outputs/<date>/<HH-MM-SS>`` alone would be shared by two ``run.py`` started
together (a shell loop with ``&``, SLURM array tasks): one would fail, one ``metrics.json`` survive.
Here two runs wait at a barrier (a file each, then both go) with Hydra's clock frozen to the same
second, so a time-only name would collide every time; each must get its own folder and a ``metrics.json``
with its own seed, and a sweep keeps its ``multirun/<date>/<time>/<job>`` layout.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, TINY
from tests.reliability.conftest import env_for

# freeze Hydra's ${now:...} at one instant, wait until both processes are at the barrier, then run.py
LAUNCH = r"""
import datetime, glob, os, runpy, sys, time
import hydra.core.utils as hydra_utils

class Frozen(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 2, 3, 4, 5)

hydra_utils.datetime = Frozen
barrier, run_py = sys.argv[1], sys.argv[2]
open(f"{barrier}.{os.getpid()}", "w").close()
while len(glob.glob(barrier + ".*")) < 2:
    time.sleep(0.005)
sys.argv = [run_py, *sys.argv[3:]]
runpy.run_path(run_py, run_name="__main__")
"""

ARGS = [*TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "logger=csv"]


def test_two_runs_started_together_get_two_folders(tmp_path):
    launch = tmp_path / "launch.py"
    launch.write_text(LAUNCH)
    procs = [
        subprocess.Popen(
            [sys.executable, str(launch), str(tmp_path / "barrier"), str(REPO / "run.py"), *ARGS, f"seed={seed}"],
            cwd=tmp_path,
            env=env_for(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for seed in (1, 2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
    folders = sorted((tmp_path / "outputs" / "2026-01-02").iterdir())
    assert len(folders) == 2, folders
    assert all(f.name.startswith("03-04-05-") for f in folders)  # <HH-MM-SS>-<id>
    seeds = set()
    for folder in folders:
        m = json.loads((folder / "metrics.json").read_text())
        assert m["status"] == "finished" and m["global_step"] == 2
        seeds.add(m["config"]["seed"])
        assert (folder / ".hydra" / "config.yaml").is_file()
        assert len(list((folder / "checkpoints").glob("best-*.ckpt"))) == 1
        rows = (folder / "csv" / "metrics.csv").read_text().splitlines()
        assert rows[0].startswith(("epoch", "step")) or "step" in rows[0]
    assert seeds == {1, 2}


def test_the_run_id_is_fixed_within_a_process():
    from omegaconf import OmegaConf

    import xformer  # noqa: F401

    cfg = OmegaConf.create({"a": "x-${xformer.run_id:}", "b": "${xformer.run_id:}"})
    a, b = cfg.a, OmegaConf.create({"c": "${xformer.run_id:}"}).c
    assert a == f"x-{b}" and cfg.b == b and len(b) == 6
    int(b, 16)  # hex digits
