"""Precision x optimizer kernel x gradient clipping: every combination trains or is refused before
training with one ``error:`` line, and a fused optimizer clips the true (unscaled) gradients.

Lightning's mixed-precision plugin refuses to clip for an optimizer that unscales gradients inside
its own step (``fused=True``); xformer unscales first
(``TransformerLitModule.configure_gradient_clipping``) so the fused kernel stays on. The distributed
presets are covered in ``tests/scaling``.
"""

from __future__ import annotations

import itertools
import json

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from typing_extensions import override

from tests.conftest import REPO
from xformer.config.check import check_config
from xformer.jobs.context import job_context
from xformer.jobs.driver import run as run_job
from xformer.model import ConfigError
from xformer.train.checkpoint_file import build_model
from xformer.train.module import TransformerLitModule

PRECISIONS = ["32-true", "bf16-mixed", "16-mixed", "bf16-true"]
KERNELS = {
    "fused": ["optim.optimizer.fused=true"],
    "foreach": ["optim.optimizer.fused=false", "optim.optimizer.foreach=true"],
}
TINY = [
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "data.n_train=100",
    "data.n_val=8",
    "data.n_test=8",
    "data.n_long=2",
    "logger=csv",
    "trainer.accelerator=cpu",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "decode.max_len_b=2",
]


def _cfg(overrides, tmp_path):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(
            "config",
            overrides=[
                *overrides,
                f"paths.output_dir={tmp_path}",
                f"paths.root_dir={tmp_path}",
                f"paths.cache_dir={tmp_path / 'cache'}",
            ],
        )


# trainer=gpu with trainer.accelerator=cpu and an explicit precision is trainer=default: the grid runs
# once, plus the gpu preset in its own precision (bf16-mixed); every experiment preset that uses it
# trains in tests/gpu_path/test_presets.py
MATRIX = [*itertools.product(["default"], PRECISIONS, KERNELS, [1.0, 0.0]), ("gpu", "bf16-mixed", "fused", 1.0)]


@pytest.mark.parametrize(
    "preset,precision,kernel,clip", MATRIX, ids=[f"{p}-{q}-{k}-clip{c:g}" for p, q, k, c in MATRIX]
)
def test_single_process_presets_train_two_steps(preset, precision, kernel, clip, tmp_path):
    cfg = _cfg(
        [
            f"trainer={preset}",
            *TINY,
            f"trainer.precision={precision}",
            *KERNELS[kernel],
            f"trainer.gradient_clip_val={clip}",
        ],
        tmp_path,
    )
    run_job(cfg, job_context(cfg))
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "finished" and m["global_step"] == 2
    assert m["config"]["trainer"]["precision"] == precision
    assert m["config"]["optim"]["optimizer"]["fused"] is (kernel == "fused")
    assert all(v == v for v in m["metrics"].values())


class _Capture(L.Callback):
    """Adam's first moment and the gradients right after the first optimizer step."""

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        opt = trainer.optimizers[0]
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        self.grad_norm = float(torch.linalg.vector_norm(torch.stack([p.grad.float().norm() for p in params])))
        self.exp_avg = torch.cat([opt.state[p]["exp_avg"].float().flatten() for p in params])


def _first_step(precision, kernel, clip, tmp_path):
    cfg = _cfg([*TINY, *KERNELS[kernel], "model.dropout=0.0"], tmp_path)
    torch.manual_seed(0)
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    torch.manual_seed(0)
    model = build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id)
    module = TransformerLitModule(
        model,
        optimizer=instantiate(cfg.optim.optimizer),
        lr_lambda=lambda _step: 1.0,
        pad_id=dm.pad_id,
        bos_id=dm.bos_id,
        eos_id=dm.eos_id,
    )
    capture = _Capture()
    if precision == "16-mixed+scaler":  # as on a GPU: Lightning gives CPU 16-mixed no GradScaler
        from lightning.pytorch.plugins.precision import MixedPrecision

        kwargs = {
            "plugins": [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**12))]
        }
    else:
        kwargs = {"precision": precision}
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        gradient_clip_val=clip,
        max_steps=1,
        **kwargs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[capture],
        default_root_dir=str(tmp_path),
    )
    batch = next(iter(dm.train_dataloader()))
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader([batch], batch_size=None))
    return capture


@pytest.mark.parametrize("precision", ["16-mixed+scaler", "16-mixed", "bf16-mixed", "32-true"])
def test_a_fused_optimizer_clips_the_unscaled_gradients_like_the_foreach_one(precision, tmp_path):
    clip = 1e-2  # far below the first step's gradient norm, so the clip acts
    fused = _first_step(precision, "fused", clip, tmp_path / "fused")
    foreach = _first_step(precision, "foreach", clip, tmp_path / "foreach")
    # the gradients the optimizer used have the clipped norm (not a norm of loss-scaled gradients) ...
    assert fused.grad_norm == pytest.approx(clip, rel=1e-2)
    assert foreach.grad_norm == pytest.approx(clip, rel=1e-2)
    # ... and Adam's first moment (0.1 x the gradient it stepped with) is the same for both kernels
    torch.testing.assert_close(fused.exp_avg, foreach.exp_avg, rtol=1e-3, atol=1e-9)
    assert float(fused.exp_avg.norm()) == pytest.approx(0.1 * clip, rel=1e-2)


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["optim.optimizer.fused=true", "optim.optimizer.foreach=true"], "optim.optimizer (torch.optim.Adam): `fused`"),
        (["trainer.precision=16-mixed", "trainer=fsdp"], "trainer.precision"),
        (["trainer.precision=fp8"], "trainer.precision"),
        (["trainer.gradient_clip_algorithm=max"], "trainer.gradient_clip_algorithm"),
        (["trainer.log_every_n_steps=-1"], "trainer.log_every_n_steps"),  # Lightning accepts it silently
    ],
)
def test_combinations_that_cannot_train_are_refused_before_training_with_one_line(overrides, key, tmp_path):
    cfg = _cfg([*TINY, *overrides], tmp_path)
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(key) and "Fix" in msg, msg


@pytest.mark.parametrize(
    "override,key",
    [
        ("callbacks.wandb_panels.n_samples=-1", "callbacks.wandb_panels.n_samples"),
    ],
)
def test_new_callback_options_out_of_range_are_one_line_naming_the_key(override, key, tmp_path):
    cfg = _cfg([*TINY, override], tmp_path)
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert str(err.value).startswith(key) and "\n" not in str(err.value)
