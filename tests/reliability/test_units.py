"""Fast in-process checks of the pieces behind resumption: atomic checkpoint writes, the batch
samplers' mid-epoch resume, and the sweep expansion that validates ``-m`` jobs."""

from __future__ import annotations

import io

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from typing_extensions import override

from xformer.data.batching import RandomBatchSampler, TokenBudgetBatchSampler
from xformer.jobs.callbacks import AtomicCheckpointIO, StepEndCheckpoint


def _fail_midway(real_save):
    """A ``torch.save`` that writes half of the checkpoint, then fails like a full disk."""

    def save(obj, f, *args, **kwargs):
        buf = io.BytesIO()
        real_save(obj, buf, *args, **kwargs)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        raise OSError(28, "No space left on device")

    return save


def test_failed_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io_ = AtomicCheckpointIO()
    io_.save_checkpoint({"global_step": 1, "w": torch.arange(1000.0)}, path)
    before = path.read_bytes()
    monkeypatch.setattr(torch, "save", _fail_midway(torch.save))
    with pytest.raises(OSError, match="No space left"):
        io_.save_checkpoint({"global_step": 2, "w": torch.zeros(1000)}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert io_.load_checkpoint(path)["global_step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"], "no temporary file is left behind"


class _Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    @override
    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_trainer_checkpoints_go_through_the_atomic_writer(tmp_path, monkeypatch):
    ckpt_cb = StepEndCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=0, save_last=True)
    trainer = L.Trainer(
        max_steps=2,
        callbacks=[ckpt_cb],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(_Tiny(), torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2))
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    last = tmp_path / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 2
    monkeypatch.setattr(torch, "save", _fail_midway(torch.save))
    with pytest.raises(OSError):
        trainer.save_checkpoint(last)
    monkeypatch.undo()
    assert torch.load(last, weights_only=False)["global_step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: TokenBudgetBatchSampler([3, 5, 2, 7, 4, 4, 6, 1, 2, 8] * 5, 16, shuffle=True, seed=3),
        lambda: RandomBatchSampler(100, 4, 9, seed=3),
    ],
)
def test_sampler_resume_continues_the_epoch(make):
    ref = make()
    ref.set_epoch(2)
    epoch2 = list(ref)
    ref.set_epoch(3)
    epoch3 = list(ref)
    for done in (0, 1, len(epoch2) - 1):
        s = make()
        s.resume(2, done)
        assert list(s) == epoch2[done:]
        s.set_epoch(3)
        assert list(s) == epoch3, "the skip applies once"
    s = make()
    s.resume(2, len(epoch2))  # the epoch was complete: continue with the next one
    assert list(s) == epoch3


def test_sweep_expansion_matches_the_basic_sweeper():
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from xformer.jobs.sweep import sweep_jobs

    task = [
        "model.n_heads=2",
        "model.d_model=32,64",
        "seed=0,1,2",
        "+tags=[a,b]",
        "model.n_heads=2,4",
        "optim.lr=range(1,3)",
    ]
    cfg = OmegaConf.create(
        {"hydra": {"overrides": {"task": task}, "sweeper": {"params": {"loss.label_smoothing": "0,0.1"}}}}
    )
    lines = ["loss.label_smoothing=0,0.1", *task]
    expected = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(lines), None)[0]
    assert sweep_jobs(cfg) == expected and len(expected) == 2 * 2 * 3 * 2 * 2

    optuna = OmegaConf.create(
        {
            "hydra": {
                "overrides": {"task": []},
                "sweeper": {
                    "params": {
                        "optim.lr": "tag(log, interval(1e-4, 1e-2))",
                        "model.n_heads": "choice(2, 4)",
                        "model.n_encoder_layers": "int(interval(1, 3))",
                    }
                },
            }
        }
    )
    jobs = sweep_jobs(optuna)
    assert len(jobs) == 8 and ["optim.lr=0.0001", "model.n_heads=2", "model.n_encoder_layers=1"] in jobs
    assert ["optim.lr=0.01", "model.n_heads=4", "model.n_encoder_layers=3"] in jobs
