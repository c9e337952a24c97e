"""The DataModules inside a real (CPU, 1-process) Lightning Trainer: epochs reseed the sampler."""

from __future__ import annotations

import logging

import lightning as L
import torch
from typing_extensions import override

from xformer.data.numbers import NumbersDataModule


class _Recorder(L.LightningModule):
    """Minimal module that records the example indices of each training epoch."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: dict[int, list[int]] = {}
        self.val_seen: list[int] = []

    @override
    def training_step(self, batch, batch_idx):
        assert batch["src"].dtype == torch.long and batch["tgt"][:, 0].eq(1).all()
        self.seen.setdefault(self.current_epoch, []).extend(batch["idx"].tolist())
        return (self.w * batch["tgt"].float().mean()).sum()

    @override
    def validation_step(self, batch, batch_idx):
        self.val_seen.extend(batch["idx"].tolist())

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_fit_two_epochs_sees_every_example_once_per_epoch_in_new_order(tmp_path):
    logging.getLogger("lightning").setLevel(logging.ERROR)
    dm = NumbersDataModule(
        n_train=300, n_val=40, n_test=20, n_long=10, tokens_per_batch=512, tokenizer="char", cache_dir=str(tmp_path)
    )
    dm.setup()  # we set up before the Trainer does; its own setup() call must be a no-op
    model = _Recorder()
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, datamodule=dm)
    assert sorted(model.seen[0]) == sorted(model.seen[1]) == list(range(300))
    assert model.seen[0] != model.seen[1], "Lightning's set_epoch must reach our batch sampler"
    assert sorted(model.val_seen) == sorted(list(range(40)) * 2)
    trainer.test(model, datamodule=dm, verbose=False)
