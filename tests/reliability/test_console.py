"""What a run prints. Validation results appear when validation runs (the objective,
its best so far, the task metric); Lightning's accelerator/restore lines, the logger's version string
and W&B's start-up lines and history dump do not; the folder and metrics.json are named once at the
end; an error line is printed once; a config warning is given once per sweep, not once per job."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import TINY, run_py

SHORT = [*TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.enable_progress_bar=true"]


def test_a_run_prints_its_validations_and_where_it_is_and_nothing_else(tmp_path):
    job = tmp_path / "job"
    res = run_py([*SHORT, f"hydra.run.dir={job}"], tmp_path)  # the default logger: W&B, offline here
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    lines = [line for line in out.splitlines() if line.strip()]
    assert sum("validation at step 2/4: val/loss" in line for line in lines) == 1
    assert sum("validation at step 4/4: val/loss" in line and "val/exact_match" in line for line in lines) == 1
    assert sum(f"the run's folder is {job} (its summary: {job / 'metrics.json'})" in line for line in lines) == 1
    assert sum("wandb sync" in line for line in lines) == 1  # where the offline run is, once
    for noise in (
        "GPU available",
        "TPU available",
        "v_num",
        "Run history",
        "Run summary",
        "weights_only",
        "Restoring states",
        "wandb leet",
        "logging interval",
    ):
        assert noise not in out, noise
    assert len(lines) <= 25, "\n".join(lines)


def test_an_error_line_is_printed_once(tmp_path):
    res = run_py([*TINY, "+sed=3", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path)
    assert res.returncode == 2
    out = res.stdout + res.stderr
    assert out.count("the root config has no key 'sed'") == 1, out
    assert not (tmp_path / "job").exists()  # a refused run leaves no folder (its log included)


@pytest.mark.slow  # suite time: ~17 s, a 2-job sweep
def test_a_config_warning_is_given_once_per_sweep(tmp_path):
    res = run_py(
        [
            *TINY,
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "logger=csv",
            "optim.warmup_steps=400",
            "seed=1,2,3",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "-m",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    assert out.count("optim.warmup_steps=400 > trainer.max_steps=2") == 1, out
