"""The multi-process presets (``ddp``, ``fsdp``, ``ddp_spawn``: 2 CPU ranks over gloo) train with a
fused optimizer and gradient clipping under mixed precision, the combination that failed at the
first step on a GPU. The full precision x kernel x clipping grid of each preset is ``slow``."""

from __future__ import annotations

import itertools

import pytest

from tests.scaling.common import fail_msg, metrics, run_py

TINY = [
    "data.n_train=200",
    "data.n_val=8",
    "data.n_test=8",
    "data.n_long=2",
    "data.tokens_per_batch=72",
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.limit_val_batches=1",
    "++trainer.limit_test_batches=1",
    "trainer.enable_progress_bar=false",
    "decode.max_len_b=2",
    "logger=none",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
]
KERNELS = {
    "fused": ["optim.optimizer.fused=true"],
    "foreach": ["optim.optimizer.fused=false", "optim.optimizer.foreach=true"],
}


def _train(preset, precision, kernel, clip, tmp_path):
    res = run_py(
        [
            *TINY,
            f"trainer={preset}",
            f"trainer.precision={precision}",
            *KERNELS[kernel],
            f"trainer.gradient_clip_val={clip}",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
        timeout=300,
    )
    if preset == "fsdp" and precision == "16-mixed":
        assert res.returncode == 2, fail_msg(res)
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1 and "trainer.precision=16-mixed" in lines[0] and "Fix" in lines[0]
        return
    assert res.returncode == 0, fail_msg(res)
    m = metrics(tmp_path / "job")
    assert m["status"] == "finished" and m["config"]["trainer"]["precision"] == precision
    if preset != "ddp_spawn":  # ddp_spawn trains in forked ranks: the job process never counts steps
        assert m["global_step"] == 2
    assert all(v == v for v in m["metrics"].values())


@pytest.mark.parametrize(  # suite time: fsdp and ddp_spawn (~12-14 s each) in the slow set
    "preset", ["ddp", pytest.param("fsdp", marks=pytest.mark.slow), pytest.param("ddp_spawn", marks=pytest.mark.slow)]
)
def test_multi_process_presets_train_with_fused_adam_clipping_and_bf16_autocast(preset, tmp_path):
    _train(preset, "bf16-mixed", "fused", 1.0, tmp_path)


GRID = list(
    itertools.product(
        ["ddp", "fsdp", "ddp_spawn"], ["32-true", "bf16-mixed", "16-mixed", "bf16-true"], KERNELS, [1.0, 0.0]
    )
)


@pytest.mark.slow
@pytest.mark.parametrize("preset,precision,kernel,clip", GRID, ids=[f"{p}-{q}-{k}-clip{c:g}" for p, q, k, c in GRID])
def test_multi_process_grid(preset, precision, kernel, clip, tmp_path):
    _train(preset, precision, kernel, clip, tmp_path)
