"""``benchmarks/multiprocess_check.py`` (the one-GPU multi-process check of ``gpu.sh``) runs on the
CPU: one process, DDP with a world of one, and two torchrun "nodes" sharing the device over gloo
give the same metrics."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow  # 4 processes; the GPU script's smoke test (make test-slow)
def test_multiprocess_check_passes_on_the_cpu(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "multiprocess_check.py"),
            "--accelerator",
            "cpu",
            "--out",
            str(tmp_path / "mp"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    report = json.loads((tmp_path / "mp" / "multiprocess.json").read_text())
    assert report["ok"] is True
    assert report["runs"]["ddp2"]["exit_codes"] == [0, 0]
    for name in ("single", "ddp1", "ddp2"):
        assert report["runs"][name]["global_step"] == 6
    assert max(report["differences"]["ddp2"].values()) <= 1e-3
