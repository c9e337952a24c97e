"""After a resume (wandb#9684), the W&B run's best (the ``min``/``max`` summaries
that ``WandbPanels`` declares) is the best of the whole job, not of the resumed process alone.

A scripted module logs ``val/loss`` 5.6151, 4.9248, 5.2696 and ``val/acc`` 0.2, 0.5, 0.4 at steps
2, 4, 6; the job is resumed from the checkpoint of step 4 into the same offline W&B run. The resumed
run's summary must say min 4.9248 / max 0.5 (the resumed process alone has seen 5.2696 / 0.4)."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger
from torch.utils.data import DataLoader

from tests.scaling.wandb_records import finished_records
from xformer.jobs.wandb_panels import WandbPanels

VALUES = {2: (5.6151, 0.2), 4: (4.9248, 0.5), 6: (5.2696, 0.4), 8: (5.3, 0.45)}


class Scripted(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):  # noqa: ARG002 - Lightning hook signature
        return (self.w - batch.mean()) ** 2

    def validation_step(self, batch, batch_idx):  # noqa: ARG002 - Lightning hook signature
        loss, acc = VALUES[self.global_step]
        self.log("val/loss", loss)
        self.log("val/acc", acc)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(torch.randn(64, 1), batch_size=1)

    def val_dataloader(self):
        return DataLoader(torch.randn(2, 1), batch_size=1)


def _summary(run_file) -> dict:
    out = {}
    for rec in finished_records(run_file):
        if rec.WhichOneof("record_type") == "summary":
            for u in rec.summary.update:
                out[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
    return out


def _fit(tmp_path, max_steps: int, ckpt_path=None):
    # one folder per process: two starts within a second would share W&B's run folder and file
    save_dir = tmp_path / ("resumed" if ckpt_path else "first")
    logger = WandbLogger(project="t", id="resumed1", save_dir=str(save_dir), offline=True, resume="allow")
    trainer = L.Trainer(
        max_steps=max_steps,
        val_check_interval=2,
        num_sanity_val_steps=0,
        logger=logger,
        callbacks=[  # as conf/callbacks/default.yaml: last.ckpt refreshed at every validation, and every 2 steps
            WandbPanels(n_samples=0),
            ModelCheckpoint(
                dirpath=tmp_path / "ck",
                monitor="val/loss",
                save_last=True,
                filename="best-{step}",
                enable_version_counter=False,
            ),
            ModelCheckpoint(
                dirpath=tmp_path / "ck",
                every_n_train_steps=2,
                save_top_k=0,
                save_last=True,
                enable_version_counter=False,
            ),
        ],
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(Scripted(), ckpt_path=ckpt_path)
    run_dir = logger.experiment.dir
    logger.experiment.finish()
    return run_dir


@pytest.mark.parametrize("resume_at", [4, 6])  # the best's own checkpoint, and the one after it
def test_resumed_wandb_summary_keeps_the_best_of_the_whole_job(tmp_path, monkeypatch, resume_at):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _fit(tmp_path, max_steps=resume_at)
    ckpt = tmp_path / "ck" / "last.ckpt"
    state = torch.load(ckpt, weights_only=False)
    assert state["global_step"] == resume_at
    assert state["callbacks"]["WandbPanels"]["best"] == {
        "val/loss": pytest.approx(4.9248),
        "val/acc": pytest.approx(0.5),
    }
    run_dir = _fit(tmp_path, max_steps=8 if resume_at == 6 else 6, ckpt_path=ckpt)
    from pathlib import Path

    run_file = next(Path(run_dir).parent.glob("run-*.wandb"))
    summary = _summary(run_file)
    assert summary["val/loss"] == {"min": pytest.approx(4.9248)}
    assert summary["val/acc"] == {"max": pytest.approx(0.5)}
