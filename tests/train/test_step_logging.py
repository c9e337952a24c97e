"""Train-time values are logged only at the steps something reads them.

``TransformerLitModule`` calls Lightning's ``self.log`` for ``train/loss``, ``train/nll`` and ``perf/*``
only where the loggers write (every ``trainer.log_every_n_steps`` steps, and when the trainer stops),
at the last step, and at every step while a callback monitors one of them. The reference is the same
run logging every step (``log_every_n_steps=1``): the written rows must carry the very same values.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader
from typing_extensions import override

from xformer.model import EncoderDecoder
from xformer.train.module import TransformerLitModule

PAD, BOS, EOS, V = 0, 1, 2, 17


def batches(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        src = torch.randint(3, V, (4, 6), generator=g)
        tgt = torch.randint(3, V, (4, 7), generator=g)
        tgt[:, 0] = BOS
        tgt[1, 5:] = PAD  # ragged targets: the token count differs between batches
        out.append({"src": src, "tgt": tgt})
    return out


class EveryStep(L.Callback):
    """Reads ``train/loss`` from the callback metrics after every optimizer step."""

    def __init__(self) -> None:
        self.seen: list[float | None] = []

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        value = trainer.callback_metrics.get("train/loss")
        self.seen.append(None if value is None else float(value))


class StopAt(L.Callback):
    """Stops the trainer after optimizer step ``step`` (as ``max_time`` or a SIGTERM save would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def fit(tmp_path, every: int, max_steps: int, callbacks=(), **trainer_kwargs) -> tuple[dict[int, float], dict, list]:
    """Train 4-example batches with SGD; returns ``({step: logged train/loss}, callback metrics, the module)``."""
    torch.manual_seed(0)
    model = EncoderDecoder(V, V, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    module = TransformerLitModule(
        model,
        optimizer=functools.partial(torch.optim.SGD, lr=0.5),
        lr_lambda=lambda _step: 1.0,
        label_smoothing=0.1,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        detokenize=str,
    )
    logger = CSVLogger(tmp_path, name="", version=f"every{every}")
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        log_every_n_steps=every,
        logger=logger,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        default_root_dir=tmp_path,
        **trainer_kwargs,
    )
    trainer.fit(module, train_dataloaders=DataLoader(batches(12), batch_size=None))
    path = Path(logger.log_dir) / "metrics.csv"  # written once a row is
    rows = list(csv.DictReader(path.open())) if path.is_file() else []
    logged = {int(r["step"]): float(r["train/loss"]) for r in rows if r.get("train/loss")}
    return logged, {k: float(v) for k, v in trainer.callback_metrics.items()}, module


@pytest.mark.parametrize("every", [3, 4])
def test_rows_written_carry_each_steps_own_loss_and_the_last_step_is_logged(tmp_path, every):
    truth, truth_end, _ = fit(tmp_path / "ref", 1, 7)
    assert len(truth) == 7 and len(set(truth.values())) == 7  # every step logged, all values distinct
    logged, end, _ = fit(tmp_path / "sel", every, 7)
    assert logged, "no train/loss row written"
    assert set(logged) == {s for s in truth if (s + 1) % every == 0}
    assert all(logged[s] == truth[s] for s in logged)
    # fit's callback metrics (metrics.json's "metrics") are the last step's, as when logging every step
    assert end["train/loss"] == truth_end["train/loss"] == truth[6]
    assert end["train/nll"] == truth_end["train/nll"]
    assert end["perf/tokens_seen"] == truth_end["perf/tokens_seen"]


def test_a_monitored_train_key_is_logged_at_every_step(tmp_path):
    truth, _, _ = fit(tmp_path / "ref", 1, 6)
    probe = EveryStep()
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="train/loss", save_top_k=1, every_n_train_steps=1)
    fit(tmp_path / "mon", 50, 6, callbacks=[ckpt, probe])
    # callbacks run before the module's on_train_batch_end: the value they read is this step's own
    assert probe.seen == [truth[s] for s in range(6)]


def test_a_callbacks_stop_after_the_optimizer_step_still_logs_that_steps_loss(tmp_path):
    truth, _, _ = fit(tmp_path / "ref", 1, 12)
    logged, end, _ = fit(tmp_path / "stop", 5, 12, callbacks=[StopAt(3)])
    # step index 2 (the third step) is where the trainer stopped: the logger wrote it, with its own value
    assert logged[2] == truth[2]
    assert end["train/loss"] == truth[2]


def test_between_logged_steps_callbacks_see_the_last_logged_value(tmp_path):
    """The documented trade: with log_every_n_steps=3 a callback reading train/loss after each step sees
    the value of the last logged step (use trainer.log_every_n_steps=1 for every step's)."""
    truth, _, _ = fit(tmp_path / "ref", 1, 6)
    probe = EveryStep()
    fit(tmp_path / "sel", 3, 6, callbacks=[probe])
    assert probe.seen[2] == truth[2] and probe.seen[3] == truth[2] and probe.seen[5] == truth[5]


def test_training_that_outlives_a_stop_logs_each_later_step_with_its_own_loss(tmp_path):
    """A callback stops at step 7 but ``min_steps=10`` keeps training to step 12: the rows written after
    the stop carry their own steps' losses (not the stop step's, which a second logging hook's entry
    would pin for the rest of the epoch), and fit ends on the last step's."""
    truth, _, _ = fit(tmp_path / "ref", 1, 12)
    logged, end, _ = fit(tmp_path / "stop", 5, 12, callbacks=[StopAt(7)], min_steps=10)
    assert logged, "no rows"
    assert {s: logged[s] for s in logged} == {s: truth[s] for s in logged}
    assert max(logged) >= 7  # rows after the stop were written
    assert end["train/loss"] == truth[max(truth)]


@pytest.mark.parametrize("every", [0, 5])
def test_the_last_steps_values_reach_metrics_json_whether_or_not_that_step_was_logged(tmp_path, every):
    """``trainer.log_every_n_steps=0`` logs nothing; a validation-time stop ends fit between logged
    steps: the module still answers the last step's values, which the driver writes to metrics.json."""
    truth, truth_end, _ = fit(tmp_path / "ref", 1, 7)
    _, _, module = fit(tmp_path / "sel", every, 7)
    last = module.last_step_metrics()
    assert last["train/loss"] == truth[6] == truth_end["train/loss"]
    assert last["train/nll"] == truth_end["train/nll"]
    assert last["perf/tokens_seen"] == truth_end["perf/tokens_seen"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_foreach_rescale_is_bit_for_bit_the_per_tensor_multiply(dtype):
    """The token-weighted gradient's rescale, now one for-each call per device and dtype, gives exactly
    what ``g.mul_(factor)`` with the float64 0-dim factor gave, for float32, bfloat16 and float64 grads."""
    torch.manual_seed(0)
    model = EncoderDecoder(V, V, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    module = TransformerLitModule(model.to(dtype), optimizer=None, lr_lambda=None, pad_id=PAD, eos_id=EOS)
    module.log = lambda *_a, **_k: None
    for b in batches(2):
        module.training_step(b, 0).backward()  # two micro-batches: the factor is not 1
    norm = module._step_norm.double()
    factor = norm * 1 * 1 / module._step_window[1].clamp(min=1)
    assert float(factor) != 1.0
    want = [p.grad.clone().mul_(factor) for p in module.parameters()]
    module.on_before_optimizer_step(None)
    got = [p.grad for p in module.parameters()]
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
