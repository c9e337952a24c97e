"""``metrics.json`` records the precision that ran, which Lightning may change (``16-mixed`` on a CPU runs
``bf16-mixed``, its documented fallback), and the one asked for when they differ; the reference is Lightning's
own trainer built with the same request."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import TINY, metrics, run_py


def lightning_precision(asked: str) -> str:
    """The precision Lightning's own CPU trainer runs for ``asked``."""
    import lightning as L

    return str(
        L.Trainer(accelerator="cpu", devices=1, precision=asked, logger=False, enable_checkpointing=False).precision
    )


@pytest.mark.parametrize("asked", ["16-mixed", "32-true"])
def test_metrics_json_records_the_precision_that_ran(asked, tmp_path):
    ran = lightning_precision(asked)
    job = tmp_path / "job"
    args = [*TINY, f"trainer.precision={asked}", "trainer.accelerator=cpu", "trainer.max_steps=2"]
    args += ["trainer.val_check_interval=2", "logger=csv", f"hydra.run.dir={job}"]
    res = run_py(args, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    numerics = metrics(job)["numerics"]
    assert numerics["precision"] == ran
    if ran != asked:  # 16-mixed on a CPU (was: only the config's 16-mixed, which did not run)
        assert numerics["precision_asked"] == asked
    else:
        assert "precision_asked" not in numerics
