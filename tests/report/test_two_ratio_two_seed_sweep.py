"""A small sweep, run for real (slow): ``python run.py model.ffn_ratio=2,4 seed=1,2 trainer.max_steps=30 -m``
names no experiment, so the report decides no claim on it (claims are declarations, decided on the levels
they declare: docs/report.md) and says how to decide one's own; its tables and per-seed files are written."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import run_py
from xformer.report.cli import main


@pytest.mark.slow
def test_a_two_ratio_two_seed_sweep_of_30_steps_is_reported_and_decides_no_claim(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    res = run_py(
        [
            "model.ffn_ratio=2,4",
            "seed=1,2",
            "trainer.max_steps=30",
            "logger=none",
            "trainer.enable_progress_bar=false",
            f"hydra.sweep.dir={sweep}",
            "-m",
        ],
        tmp_path,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert main([str(sweep), "--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    # no claim is guessed: the jobs name no experiment, and C1's declaration needs its own levels of the ratio
    assert "no declared claim finds here the levels, settings and metric its parts need" in out, out
    assert not [line for line in out.splitlines() if line[:1] == "C" and line[1:2].isdigit()], out
    report = tmp_path / "report"
    assert (report / "seeds.csv").is_file() and "## Results" in (report / "report.md").read_text()
    assert "- seeds: 1, 2" in (report / "report.md").read_text()
