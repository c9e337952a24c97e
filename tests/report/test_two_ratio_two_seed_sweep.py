"""A small sweep, run for real (slow): ``python run.py model.ffn_ratio=2,4 seed=1,2
trainer.max_steps=30 -m`` is C1-inconclusive under the budget rules (two ratios cannot show a
sweet spot, two seeds decide nothing, one validation in the second half)."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import run_py
from xformer.report.cli import main


@pytest.mark.slow
def test_a_two_ratio_two_seed_sweep_of_30_steps_is_inconclusive_for_c1(tmp_path, capsys):
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
    (c1,) = [line for line in out.splitlines() if line.startswith("C1")]
    assert c1.startswith("C1: inconclusive — (i) inconclusive"), c1
    assert "claims were guessed" in out  # the jobs name no claim's experiment
    text = (tmp_path / "report" / "report.md").read_text()
    assert "too few seeds (model.ffn_ratio=4: 2 seed(s); model.ffn_ratio=2: 2 seed(s); needs ≥ 3)" in text
    assert (tmp_path / "report" / "seeds.csv").is_file() and "## Summary" in (
        tmp_path / "report" / "report.md"
    ).read_text()
