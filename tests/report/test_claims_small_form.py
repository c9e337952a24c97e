"""``scale=cpu_small``: every claim sweep has a small form (fewer seeds and steps) with its own sweep
folder beside the published form's, the same settings otherwise, listed by ``xformer claims list``,
and reported outside docs/results."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from xformer.jobs.sweep import sweep_jobs
from xformer.report import claims_run
from xformer.report.rules.stability import MIN_POINTS
from xformer.report.sweeps import claim_names


def _grid(name: str, scale: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment=claims/{name}", f"scale={scale}"], return_hydra_config=True)
    jobs = sweep_jobs(cfg)
    settings = {tuple(o for o in job if not o.startswith(("seed=", "scale="))) for job in jobs}
    seeds = {o for job in jobs for o in job if o.startswith("seed=")}
    return cfg, settings, seeds


@pytest.mark.parametrize("name", claim_names())
def test_the_small_form_sweeps_the_same_settings_with_fewer_seeds_and_steps_in_its_own_folder(name, monkeypatch):
    monkeypatch.setenv("XFORMER_DATA", "/data")
    big, big_settings, big_seeds = _grid(name, "cpu")
    small, small_settings, small_seeds = _grid(name, "cpu_small")
    assert small_settings == big_settings  # the claim's grid, unchanged
    assert small_seeds <= big_seeds and small.trainer.max_steps <= big.trainer.max_steps
    assert str(small.hydra.sweep.dir).endswith(f"claims/{name}/cpu_small")
    assert small.hydra.sweep.dir != big.hydra.sweep.dir
    assert small.optim.scheduler.total_steps == small.trainer.max_steps  # the decay ends at the last step
    if name != "c5_pe_length":  # decided at the end (test/loss@Nx): no curve to read
        every, total = small.trainer.val_check_interval, small.trainer.max_steps
        assert len([s for s in range(every, total + 1, every) if s >= total / 2]) >= MIN_POINTS
    # what the task's settings are apart from the budget: the published form's
    for key in ("model", "data", "loss", "objective"):
        assert small[key] == big[key], key


def test_the_language_model_small_form_is_two_seeds_and_a_tenth_of_the_steps(monkeypatch):
    monkeypatch.setenv("XFORMER_DATA", "/data")
    big, _, _ = _grid("c1_ffn_ratio", "cpu")
    small, settings, seeds = _grid("c1_ffn_ratio", "cpu_small")
    assert seeds == {"seed=1", "seed=2"} and len(settings) == 4
    assert small.trainer.max_steps * 10 == big.trainer.max_steps
    assert small.optim.scheduler.total_steps == small.trainer.max_steps  # the decay still ends at the last step


def test_claims_list_shows_the_small_form_and_lists_it_apart_from_the_published_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XFORMER_RUNS", str(tmp_path / "runs"))
    assert claims_run.main(["list", "c1_ffn_ratio"]) == 0
    out = capsys.readouterr().out
    assert "xformer claims run --scale cpu_small <name>" in out and "scale=cpu_small" in out
    assert claims_run.main(["list", "--scale", "cpu_small", "c1_ffn_ratio"]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'runs' / 'claims' / 'c1_ffn_ratio' / 'cpu_small'}" in out
    # the published report in docs/results does not count for the small form: it would run
    assert "would run: python run.py experiment=claims/c1_ffn_ratio scale=cpu_small -m" in out
