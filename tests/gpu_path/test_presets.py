"""Every experiment preset (GPU forms included) trains two tiny steps on the CPU, in its own
precision: the presets differ from the default in trainer, precision, data and decoding, which is
where GPU-only failures (a fused optimizer with clipping under mixed precision) can hide."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from tests.conftest import REPO, SHARED_DATA
from xformer.jobs.context import job_context
from xformer.jobs.driver import run as run_job

EXPERIMENTS = sorted(
    str(p.relative_to(REPO / "conf" / "experiment").with_suffix(""))
    for p in (REPO / "conf" / "experiment").rglob("*.yaml")
)

SMALL_DATA = {
    "n_train": 200,
    "n_val": 8,
    "n_test": 8,
    "n_long": 4,
    "tokens_per_batch": 256,
    "num_workers": 0,
    "pin_memory": False,
    "vocab_size": 400,
}


# claim configs also run in their GPU form (scale=gpu: conf/scale/gpu.yaml and conf/scale/task/gpu_*.yaml)
CASES = [(e, None) for e in EXPERIMENTS] + [(e, "gpu") for e in EXPERIMENTS if e.startswith("claims/")]


def test_the_presets_are_found():
    assert "multi30k" in EXPERIMENTS and "claims/c1_ffn_ratio" in EXPERIMENTS and len(EXPERIMENTS) >= 14
    assert ("claims/c5_pe_length", "gpu") in CASES


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # one tokenizer cache for all Multi30k presets


@pytest.mark.parametrize(("experiment", "scale"), CASES)
def test_every_experiment_preset_trains_two_steps_on_the_cpu(experiment, scale, tmp_path, cache_dir):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"experiment={experiment}",
                *([f"scale={scale}"] if scale else []),
                "logger=csv",
                "trainer.accelerator=cpu",
                "trainer.devices=1",
                "trainer.max_steps=2",
                "trainer.val_check_interval=2",
                "trainer.limit_val_batches=1",
                "++trainer.limit_test_batches=1",
                "trainer.enable_progress_bar=false",
                "trainer.max_time=null",
                "model.n_encoder_layers=1",
                "model.n_decoder_layers=1",
                "decode.max_len_a=0",
                "decode.max_len_b=3",
                f"paths.output_dir={tmp_path}",
                f"paths.root_dir={tmp_path}",
                f"paths.cache_dir={cache_dir}",
            ],
        )
    preset_precision = cfg.trainer.precision
    with open_dict(cfg):
        if "multi30k" in cfg.data._target_.lower():
            if not SHARED_DATA.is_dir():
                pytest.skip(f"public data copies not found at {SHARED_DATA}")
            cfg.data.root = str(SHARED_DATA / "multi30k")
        if "shakespeare" in cfg.data._target_.lower():  # tinyshakespeare and nanoGPT's shakespeare_char
            if not SHARED_DATA.is_dir():
                pytest.skip(f"public data copies not found at {SHARED_DATA}")
            cfg.data.root = str(SHARED_DATA / "tinyshakespeare")
            cfg.data.block_size = 16
        for key, value in SMALL_DATA.items():
            if key in cfg.data:
                cfg.data[key] = value
        if cfg.model.get("param_budget"):
            cfg.model.param_budget = min(int(cfg.model.param_budget), 300_000)
        else:
            cfg.model.d_model = 32
            cfg.model.n_heads = 2
    run_job(cfg, job_context(cfg))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["global_step"] == 2, metrics.get("error")
    assert metrics["config"]["trainer"]["precision"] == preset_precision
    assert all(v == v for v in metrics["metrics"].values()), "no NaN"
