"""benchmarks/nanogpt_side_by_side.py: its reading of nanoGPT's output and its table; the whole script
(slow, with a nanoGPT checkout in $NANOGPT_DIR) with a tiny number of steps."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("side_by_side", REPO / "benchmarks" / "nanogpt_side_by_side.py")
sbs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sbs)


class FakeProc:
    def __init__(self, lines, wall):
        self.lines, self.wall = lines, wall


def test_nanogpt_output_is_read_into_timings_and_losses():
    lines = [
        (1.0, "number of parameters: 0.80M"),
        (3.0, "step 0: train loss 4.2000, val loss 4.1000"),  # eval 0 took 2 s
        (3.5, "iter 0: loss 4.2, time 2500.00ms, mfu -100.00%"),
        (3.6, "iter 1: loss 4.0, time 100.00ms, mfu 0.01%"),
        (3.8, "iter 2: loss 3.9, time 200.00ms, mfu 0.01%"),
        (4.8, "step 3: train loss 3.5000, val loss 3.6000"),  # eval at step 3 took 1 s
        (5.0, "iter 3: loss 3.4, time 1200.00ms, mfu 0.01%"),
    ]
    got = sbs.nanogpt_numbers(FakeProc(lines, 6.0), n=3, every=3)
    assert got["startup_s"] == 3.5 and got["eval_s"] == pytest.approx(3.0) and got["n_evals"] == 2
    assert got["steps_per_s"] == pytest.approx(1000 / 150)  # iters 1 and 2; 0 and 3 follow an evaluation
    assert got["to_eval_n_s"] == 4.8 and got["val_estimate"] == 3.6 and got["wall_s"] == 6.0


def test_table_has_every_row_and_the_ratio():
    side = {
        "val_full": 1.9,
        "val_estimate": 1.91,
        "steps_per_s": 2.0,
        "startup_s": 20.0,
        "eval_s": 50.0,
        "to_eval_n_s": 1000.0,
        "wall_s": 1010.0,
        "ckpt_step": 2000,
    }
    ours = {**side, "to_eval_n_s": 900.0}
    text = sbs.table([{"order": "nanogpt then xformer", "nanogpt": side, "xformer": ours}], 2000)
    assert "| **wall time to the step-2000 evaluation (s)** | 1000 | 900 | 0.900 |" in text
    assert text.count("\n| ") == 8  # header + 7 rows


@pytest.mark.slow
def test_script_runs_side_by_side_with_a_few_steps(tmp_path, shared_data):
    nanogpt = os.environ.get("NANOGPT_DIR")
    text = shared_data / "tinyshakespeare" / "input.txt"
    if not nanogpt or not (Path(nanogpt) / "train.py").is_file() or not text.is_file():
        pytest.skip("set NANOGPT_DIR to a karpathy/nanoGPT checkout (and have the shared tiny-shakespeare copy)")
    out = tmp_path / "nanogpt-cpu.md"
    res = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "nanogpt_side_by_side.py"),
            nanogpt,
            "--text",
            str(text),
            "--max-iters",
            "20",
            "--eval-interval",
            "10",
            "--rounds",
            "1",
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "wall time to the step-20 evaluation" in out.read_text()


def test_out_file_keeps_its_other_sections(tmp_path):
    """``--out`` rewrites only its own labelled section: the preset's description and the other
    precision's table stay."""
    out = tmp_path / "nanogpt-cpu.md"
    out.write_text("# intro\n\nkept text\n")
    sbs.write_section(out, "fp32", "table one")
    sbs.write_section(out, "bf16", "table two")
    sbs.write_section(out, "fp32", "table one, rerun")
    text = out.read_text()
    assert text.startswith("# intro\n\nkept text\n")
    assert "table one, rerun" in text and "table one\n" not in text and "table two" in text
    assert text.index("table one, rerun") < text.index("table two")


def test_wall_time_is_the_exit_not_when_it_is_waited_for(tmp_path):
    """The trainers are waited for one after the other: a process that exits first must not be
    given the other's exit time (a bug that made xformer's wall time equal nanoGPT's)."""
    quick = sbs.Proc("quick", [sys.executable, "-c", "pass"], tmp_path, dict(os.environ), tmp_path / "q.log")
    slow = sbs.Proc(
        "slow", [sys.executable, "-c", "import time; time.sleep(1.5)"], tmp_path, dict(os.environ), tmp_path / "s.log"
    )
    slow.wait()
    quick.wait()
    assert quick.wall < slow.wall - 0.5
