"""A sweep says at its start what ``xformer report`` will need to decide it: seeds per setting and validations in
the second half of training (:mod:`xformer.verdict_needs`), with the overrides that give them. The numbers are
the report's own (its rules' constants), and the suggested interval is checked with the report's own reading of
the second half (:func:`xformer.report.rules.stability.spaced` over the steps at or after half the last)."""

from __future__ import annotations

import pytest

from tests.scaling.common import fail_msg, run_py
from xformer.report.rules import stability, tests


def report_reads(steps: list[int]) -> int:
    """How many second-half validations the report's stability check reads from a run validating at ``steps``."""
    last = max(steps)
    return len(stability.spaced(sorted(s for s in steps if s >= last / 2 and s > 0)))


def test_the_numbers_are_the_reports():
    from xformer import verdict_needs as need

    assert need.MIN_SEEDS == tests.MIN_SEEDS
    assert need.MIN_LATE_VALIDATIONS == stability.MIN_POINTS


@pytest.mark.parametrize("max_steps", [6, 7, 40, 99, 1500, 2001])
@pytest.mark.parametrize("dense", [(None, 0), (5, 60)])
def test_the_suggested_interval_is_the_largest_the_report_accepts(max_steps, dense):
    from xformer import verdict_needs as need

    interval = need.interval_for(max_steps, *dense)

    def enough(v: int) -> bool:
        return report_reads(need.validation_steps(max_steps, v, *dense)) >= stability.MIN_POINTS

    accepted = [v for v in range(1, max_steps + 1) if enough(v)]
    assert interval == (max(accepted) if accepted else None)


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_the_readme_sweep_says_what_a_verdict_needs_and_the_fixed_one_is_silent(tmp_path):
    """The README's ``model.ffn_ratio=1,2,4,8 -m`` (was: silent; ``xformer report`` said afterwards that it needs
    ≥ 3 seeds and ≥ 4 second-half validations), then the same with the overrides the line gives."""
    args = ["model.ffn_ratio=1,2,4,8", "sweep.dry_run=true"]
    res = run_py([*args, f"hydra.sweep.dir={tmp_path / 'a'}", "-m"], tmp_path, tmp_path)
    assert res.returncode == 0, fail_msg(res)
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if "report: a verdict" in ln]
    assert len(lines) == 1, fail_msg(res)
    line = lines[0]
    assert f"≥ {tests.MIN_SEEDS} seeds" in line and f"≥ {stability.MIN_POINTS} validations" in line, line
    fix = line.split("add: ", 1)[1].split()
    assert fix[0] == "seed=0,1,2" and fix[1].startswith("trainer.val_check_interval="), line
    interval = int(fix[1].split("=")[1])
    steps = sorted({*range(interval, 1500 + 1, interval), 1500})  # and at trainer.max_steps=1500, as a run does
    assert report_reads(steps) >= stability.MIN_POINTS
    res = run_py([*args, *fix, f"hydra.sweep.dir={tmp_path / 'b'}", "-m"], tmp_path, tmp_path)
    assert res.returncode == 0, fail_msg(res)
    assert "report: a verdict" not in res.stdout + res.stderr, fail_msg(res)


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
def test_a_sweep_of_one_setting_says_nothing(tmp_path):
    """Seeds alone compare nothing: no line."""
    res = run_py(["seed=0,1", "sweep.dry_run=true", f"hydra.sweep.dir={tmp_path / 's'}", "-m"], tmp_path, tmp_path)
    assert res.returncode == 0, fail_msg(res)
    assert "report: a verdict" not in res.stdout + res.stderr, fail_msg(res)


@pytest.mark.slow
def test_a_sweep_with_the_suggested_overrides_is_one_the_report_can_decide(tmp_path):
    """End to end, small: a two-setting sweep is told what it lacks, run with the overrides the line gives, and
    ``xformer report`` then finds enough seeds and second-half validations for every comparison it decides
    (was: one seed and 2 second-half validations, found out only by the report)."""
    import json
    import subprocess
    import sys

    from tests.conftest import TINY

    base = [*TINY, "model.ffn_ratio=2,4", "trainer.max_steps=24", "trainer.val_check_interval=12", "logger=csv"]
    res = run_py([*base, "sweep.dry_run=true", f"hydra.sweep.dir={tmp_path / 'dry'}", "-m"], tmp_path, tmp_path)
    assert res.returncode == 0, fail_msg(res)
    line = next(ln for ln in (res.stdout + res.stderr).splitlines() if "report: a verdict" in ln)
    fix = line.split("add: ", 1)[1].split()
    sweep = tmp_path / "sweep"
    res = run_py([*base, *fix, f"hydra.sweep.dir={sweep}", "-m"], tmp_path, tmp_path, timeout=1200)
    assert res.returncode == 0, fail_msg(res)
    assert "report: a verdict" not in res.stdout + res.stderr
    rep = subprocess.run(
        [sys.executable, "-m", "xformer.cli", "report", str(sweep)], capture_output=True, text=True, timeout=600
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    text = (sweep / "report.md").read_text() + json.dumps(json.loads((sweep / "verdicts.json").read_text()))
    assert "too few seeds" not in text and f"needs ≥ {stability.MIN_POINTS}" not in text, text[-3000:]
