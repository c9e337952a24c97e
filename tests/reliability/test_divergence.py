"""A run that diverged is recorded as such: :meth:`NonFiniteLossGuard.divergence` reads the validation
losses it saw (a last validation above the first, or non-finite), through a real Lightning fit whose
validation loss is scripted, and keeps them across a checkpoint round trip."""

from __future__ import annotations

import math

import lightning as L
import torch
from typing_extensions import override

from xformer.jobs.callbacks import NonFiniteLossError, NonFiniteLossGuard
from xformer.jobs.driver import divergence_of


class ScriptedVal(L.LightningModule):
    """A linear model trained on noise whose logged ``val/loss`` at the k-th validation is ``vals[k]``."""

    def __init__(self, vals: list[float]) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.vals = vals
        self.k = 0

    @override
    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    @override
    def validation_step(self, batch, batch_idx):
        self.log("val/loss", 0.0 if self.trainer.sanity_checking else self.vals[self.k])

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.k += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(vals: list[float], every: int = 2) -> tuple[L.Trainer, NonFiniteLossGuard]:
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 2)), batch_size=2)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(2, 2)), batch_size=2)
    guard = NonFiniteLossGuard()
    trainer = L.Trainer(
        max_steps=every * len(vals),
        val_check_interval=every,
        callbacks=[guard],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        accelerator="cpu",
    )
    trainer.fit(ScriptedVal(vals), data, val)
    return trainer, guard


def test_last_validation_above_the_first_is_divergence_with_its_step():
    trainer, guard = fit([2.0, 1.5, 2.5, 3.0])
    assert [s for s, _ in guard.validations] == [2, 4, 6, 8]  # sanity check not recorded
    d = divergence_of(trainer)
    assert d is not None and d["step"] == 6 and d["first"] == 2.0 and d["last"] == 3.0
    assert "rose above its first validation" in d["reason"]


def test_a_run_that_recovers_or_keeps_improving_has_not_diverged():
    assert divergence_of(fit([2.0, 1.5, 1.2, 1.0])[0]) is None
    assert divergence_of(fit([2.0, 2.6, 1.9])[0]) is None  # a spike it came back from
    assert divergence_of(fit([2.0])[0]) is None  # one validation: nothing to compare


def test_nonfinite_last_validation_is_divergence():
    d = divergence_of(fit([2.0, 1.8, math.nan])[0])
    assert d is not None and d["step"] == 6 and "non-finite" in d["reason"]


def test_validations_survive_a_checkpoint_round_trip():
    _, guard = fit([2.0, 1.5])
    again = NonFiniteLossGuard()
    again.load_state_dict(guard.state_dict())
    assert again.validations == guard.validations == [(2, 2.0), (4, 1.5)]


def test_nonfinite_loss_error_carries_its_step():
    err = NonFiniteLossError("train/loss is nan at step 7", step=7)
    assert err.step == 7 and "step 7" in str(err)
