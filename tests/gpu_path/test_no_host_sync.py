"""A training step never reads a tensor value on the host.

On a GPU every such read (``.item()``, ``int(t)``, ``bool(t)``, boolean-mask indexing, ``nonzero``)
makes the host wait for the accelerator, which empties the kernel queue once per step. The test
runs real training steps of each model shape under a ``TorchDispatchMode`` that records every
operator needing a value on the host, and patches the Python-level readers as well. It also
counts the reads of the whole ``fit`` loop and checks they happen only at logging intervals.
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import REPO
from xformer.train.checkpoint_file import build_model
from xformer.train.module import TransformerLitModule

# operators whose result (or whose output shape) depends on tensor values: a device sync on a GPU
SYNC_OPS = {
    "_local_scalar_dense",
    "nonzero",
    "masked_select",
    "is_nonzero",
    "equal",
    "unique",
    "_unique2",
    "repeat_interleave",
    "item",
}


class HostReads(TorchDispatchMode):
    """Records the names of value-dependent operators run while active (boolean-mask indexing
    included, which runs ``nonzero`` on the device)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        kwargs = kwargs or {}
        if name in SYNC_OPS:
            self.reads.append(name)
        elif name in ("index", "index_put", "index_put_"):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", [])
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
                self.reads.append(name + "(bool mask)")
        return func(*args, **(kwargs or {}))


def test_the_detector_sees_each_kind_of_host_read():
    t = torch.arange(4.0)
    for read in (
        lambda: t.sum().item(),
        lambda: int(t.sum()),
        lambda: bool(t[0] > 1),
        lambda: t[t > 1],
        lambda: float(t.max()),
        lambda: t.nonzero(),
    ):
        with HostReads() as mode:
            read()
        assert mode.reads, read


def _module(arch_overrides, tmp_path):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                *arch_overrides,
                "model.d_model=16",
                "model.n_heads=2",
                "model.n_encoder_layers=1",
                "model.n_decoder_layers=1",
                f"paths.output_dir={tmp_path}",
                f"paths.root_dir={tmp_path}",
                f"paths.cache_dir={tmp_path / 'cache'}",
                "data.n_train=64",
                "data.n_val=8",
                "data.n_test=8",
                "logger=csv",
            ],
        )
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    model = build_model(cfg, dm.src_vocab_size, dm.tgt_vocab_size, dm.pad_id)
    module = TransformerLitModule(
        model,
        optimizer=instantiate(cfg.optim.optimizer),
        lr_lambda=instantiate(cfg.optim.scheduler),
        pad_id=dm.pad_id,
        bos_id=dm.bos_id,
        eos_id=dm.eos_id,
        criterion=instantiate(cfg.loss),
    )
    return module, next(iter(dm.train_dataloader()))


SHAPES = {
    "encoder_decoder": ["data.n_long=2"],
    "decoder_only_prefix_lm": ["model/arch=decoder_only", "data.n_long=2"],
    "encoder_only_tagger": ["model/arch=encoder_only", "data=reverse", "data.train_max_len=8"],
    "decoder_only_lm_with_loss_mask": [
        "model/arch=decoder_only",
        "data=reverse",
        "data.form=lm",
        "data.train_max_len=8",
    ],
    "encoder_decoder_learned_pe": ["model/pe=learned", "data.n_long=2"],
    "decoder_only_rope": ["model/arch=decoder_only", "model/pe=rope", "data.n_long=2"],
}


@pytest.mark.parametrize("shape", SHAPES)
def test_training_step_reads_no_tensor_on_the_host(shape, tmp_path, monkeypatch):
    module, batch = _module(SHAPES[shape], tmp_path)
    module.train()
    calls: list[str] = []
    for name in ("item", "tolist", "__int__", "__bool__", "__float__", "__index__"):
        original = getattr(torch.Tensor, name)

        def spy(self, *a, _name=name, _orig=original, **k):
            calls.append(_name)
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, spy)
    module.log = lambda *_a, **_k: None  # no trainer attached: logging itself is Lightning's (device tensors)
    with HostReads() as mode:
        loss = module.training_step(batch, 0)
        loss.backward()
    assert mode.reads == [] and calls == [], (mode.reads, calls)
    assert torch.isfinite(loss.detach()) and module.tokens_seen > 0


def _prefix_lm_reference(src, tgt, pad):
    """The packing written out example by example on the host (the definition)."""
    rows, labels = [], []
    for s_row, t_row in zip(src.tolist(), tgt.tolist(), strict=False):
        s = [x for x in s_row if x != pad]
        t = [x for x in t_row if x != pad]
        rows.append(s + t)
        labels.append([pad] * len(s) + t[1:] + [pad])
    width = max(map(len, rows))
    seq = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    lab = torch.tensor([r + [pad] * (width - len(r)) for r in labels])
    return seq, lab, torch.tensor([len([x for x in r if x != pad]) + 1 for r in src.tolist()])


def test_device_side_prefix_lm_packing_equals_the_definition():
    from xformer.model.tasks import prefix_lm_batch

    g = torch.Generator().manual_seed(0)
    pad = 0
    for _ in range(20):
        B, S, T = 5, int(torch.randint(1, 7, (1,), generator=g)), int(torch.randint(2, 7, (1,), generator=g))
        src = torch.randint(3, 20, (B, S), generator=g)
        tgt = torch.randint(3, 20, (B, T), generator=g)
        tgt[:, 0] = 1  # BOS
        for b in range(B):  # random right padding (at least one real token each)
            src[b, int(torch.randint(1, S + 1, (1,), generator=g)) :] = pad
            tgt[b, int(torch.randint(2, T + 1, (1,), generator=g)) :] = pad
        seq, lab, plen = prefix_lm_batch(src, tgt, pad)
        ref_seq, ref_lab, ref_plen = _prefix_lm_reference(src, tgt, pad)
        assert torch.equal(seq, ref_seq) and torch.equal(lab, ref_lab) and torch.equal(plen, ref_plen)
        wide_seq, wide_lab, _ = prefix_lm_batch(src, tgt, pad, trim=False)  # static width S + T
        assert wide_seq.shape == (B, S + T)
        assert torch.equal(wide_seq[:, : seq.shape[1]], seq) and (wide_seq[:, seq.shape[1] :] == pad).all()
        assert torch.equal(wide_lab[:, : lab.shape[1]], lab) and (wide_lab[:, lab.shape[1] :] == pad).all()


@pytest.mark.parametrize("pe", ["sinusoidal", "rope", "alibi", "t5"])
def test_greedy_decoding_reads_the_device_only_every_few_steps(pe, tmp_path):
    """Cached greedy decoding: no host read per generated token (a GPU would drain its queue each
    time); the "all rows ended?" test runs every ``DONE_CHECK_EVERY`` steps. With an EOS id no argmax
    can return, all ``max_len`` steps run. (Learned positions check their bound on CPU tensors only,
    where a read costs no sync, so they are not in this CPU test.)"""
    from xformer.model import decoding

    module, batch = _module([f"model/pe={pe}", "data.n_long=2", "model.max_len=128"], tmp_path)
    model = module.model.eval()
    src = batch["src"][:4]
    steps = 32
    with HostReads() as mode:
        out = decoding.greedy(model, src, bos=1, eos=-1, pad=0, max_len=steps)
    assert all(len(row) == steps for row in out)
    per_step = mode.reads.count("_local_scalar_dense")
    # encoder padding check + one read every DONE_CHECK_EVERY steps (the final .tolist() is one copy)
    assert per_step <= steps // decoding.DONE_CHECK_EVERY + 2, mode.reads


def test_sinusoid_rows_equal_the_table_rows_so_eval_and_training_embed_alike():
    from xformer.model.positional import sinusoid_rows, sinusoid_table

    table = sinusoid_table(300, 34)
    pos = torch.tensor([0, 1, 7, 150, 299])
    assert torch.equal(sinusoid_rows(pos, 34), table[pos])


def test_the_whole_fit_loop_reads_the_device_per_logging_interval_not_per_step(tmp_path):
    """Lightning's loop, the module's hooks and the callbacks together: doubling the number of steps
    at a fixed logging interval adds only the reads of the extra log flush (a few metrics), not one
    per step (which would add at least 40)."""
    import lightning as L

    from xformer.jobs.callbacks import NonFiniteLossGuard

    module, batch = _module(["data.n_long=2"], tmp_path)

    def reads(steps: int) -> int:
        trainer = L.Trainer(
            accelerator="cpu",
            max_steps=steps,
            log_every_n_steps=40,
            logger=L.pytorch.loggers.CSVLogger(str(tmp_path / f"log{steps}")),
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            callbacks=[NonFiniteLossGuard()],
            gradient_clip_val=1.0,
            default_root_dir=str(tmp_path),
        )
        loader = torch.utils.data.DataLoader([batch] * steps, batch_size=None)
        with HostReads() as mode:
            trainer.fit(module, train_dataloaders=loader)
        return mode.reads.count("_local_scalar_dense")

    short, long = reads(40), reads(80)
    assert long - short <= 15, (short, long)


@pytest.mark.parametrize(
    ("smoothing", "names"), [(0.1, ["train/loss (label-smoothed)", "train/nll"]), (0.0, ["train/loss"])]
)
def test_the_progress_bar_names_the_loss_read_at_the_last_logging_step(tmp_path, smoothing, names):
    """The bar's values are the last logging step's, under their logged names; a label-smoothed
    objective says so and has the unsmoothed NLL beside it (the number val/loss compares with)."""
    import lightning as L

    from xformer.jobs.console import StepBar

    module, batch = _module(["data.n_long=2", f"loss.label_smoothing={smoothing}"], tmp_path)
    bar = StepBar()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=6,
        log_every_n_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[bar],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader([batch] * 6, batch_size=None))
    shown = bar.get_metrics(trainer, module)
    last = module.last_step_metrics()  # step 6, a logging step
    assert [k for k in shown if k.startswith("train/")] == names
    assert shown[names[0]] == pytest.approx(last["train/loss"], rel=1e-6)
    if smoothing:
        assert shown["train/nll"] == pytest.approx(last["train/nll"], rel=1e-6)
        assert shown["train/nll"] != shown[names[0]]  # two numbers: the smoothed objective and the NLL
