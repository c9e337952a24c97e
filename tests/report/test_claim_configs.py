"""The claim configs: one per claim, CPU and GPU forms by `scale`, at least 3 seeds, a linear-decay
schedule that ends flat, enough validations in the second half of training for a verdict, and a
missing data folder named before training."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from xformer.report.rules.stability import MIN_POINTS
from xformer.report.sweeps import claim_names
from xformer.train.schedules import warmup_linear

REPO = Path(__file__).resolve().parents[2]


def _compose(overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize("scale", ["cpu", "gpu"])
def test_every_claim_composes_with_three_seeds_at_both_scales(scale, monkeypatch):
    monkeypatch.setenv("XFORMER_DATA", "/data")
    for name in claim_names():
        cfg = _compose([f"experiment=claims/{name}", f"scale={scale}"])
        seeds = str(cfg.hydra.sweeper.params.seed).split(",")
        assert len(seeds) >= 3, name
        assert cfg.trainer.accelerator == scale, name
        assert cfg.optim.scheduler.total_steps == cfg.trainer.max_steps, name
        if "root" in cfg.data and cfg.data.root is not None:
            assert cfg.data.root.startswith("/data/"), name
        if name != "c5_pe_length":  # C5 decides on test/loss@Nx, measured only at the end: no curve to read
            every, total = cfg.trainer.val_check_interval, cfg.trainer.max_steps
            second_half = [s for s in range(every, total + 1, every) if s >= total / 2]
            assert len(second_half) >= MIN_POINTS, f"{name} at {scale}: {second_half} (verdicts need {MIN_POINTS})"


def test_cpu_and_gpu_forms_differ_in_size():
    cpu = _compose(["experiment=claims/c1_ffn_ratio"])
    gpu = _compose(["experiment=claims/c1_ffn_ratio", "scale=gpu"])
    assert (cpu.model.d_model, cpu.model.n_decoder_layers) == (96, 2)
    assert (gpu.model.d_model, gpu.model.n_decoder_layers) == (256, 4)
    assert cpu.hydra.runtime.choices["model/arch"] == "decoder_only"


def test_missing_data_folder_is_named(monkeypatch):
    monkeypatch.delenv("XFORMER_DATA", raising=False)
    cfg = _compose(["experiment=claims/c1_ffn_ratio"])
    with pytest.raises(Exception, match="XFORMER_DATA"):
        OmegaConf.to_container(cfg.data, resolve=True)


def test_warmup_linear_schedule():
    f = warmup_linear(warmup_steps=10, total_steps=110, floor=0.0)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(59) == pytest.approx(0.5) and f(109) == pytest.approx(0.0) and f(500) == 0.0
    assert warmup_linear(warmup_steps=0, total_steps=100)(0) == pytest.approx(1 - 0.9 / 100)
    # the floor's range lives in the schedule's annotation, which the config check reads
    import typing

    from xformer.config_types import value_problem

    hint = typing.get_type_hints(warmup_linear, include_extras=True)["floor"]
    assert value_problem(2.0, hint) and value_problem(-0.1, hint) and value_problem(0.5, hint) is None
