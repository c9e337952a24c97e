"""Every token counts once, at its weight, under gradient accumulation and DDP.

An optimizer step's gradient must be that of ``sum(token losses) / sum(target tokens)`` over all
micro-batches of the step (and all ranks), however unequal the micro-batches and however many the
step really has (an epoch's last window can be short), not the mean of per-batch token means that
Lightning's division by ``accumulate_grad_batches`` gives.

The reference is an independent float64 recomputation: autograd of the summed label-smoothed token
losses of all micro-batches over their total target tokens, on a copy of the initial model; the
trained update is read from plain SGD with lr 1 (update = -gradient), dropout 0.
"""

from __future__ import annotations

import copy
import functools
import os
import threading

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from xformer.model import EncoderDecoder
from xformer.train.module import TransformerLitModule

PAD, BOS, EOS, V, LS = 0, 1, 2, 23, 0.1


def micro_batch(seed: int, n: int, s: int, t: int) -> dict:
    """``n`` examples, source lengths up to ``s`` and target lengths up to ``t`` (ragged: padded)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((n, s), PAD)
    tgt = torch.full((n, t + 2), PAD)
    for i in range(n):
        ls = int(torch.randint(1, s + 1, (), generator=g))
        lt = int(torch.randint(1, t + 1, (), generator=g))
        src[i, :ls] = torch.randint(3, V, (ls,), generator=g)
        src[i, ls - 1] = EOS
        tgt[i, 0] = BOS
        tgt[i, 1 : lt + 1] = torch.randint(3, V, (lt,), generator=g)
        tgt[i, lt + 1] = EOS
    return {"src": src, "tgt": tgt}


# unequal micro-batches: target tokens differ by a factor of ~5
BATCHES = [micro_batch(0, 6, 9, 11), micro_batch(1, 2, 5, 4), micro_batch(2, 4, 7, 8), micro_batch(3, 3, 12, 6)]


def union(batches: list[dict]) -> dict:
    """One batch holding every example of ``batches`` (padded to the longest)."""
    out = {}
    for key in ("src", "tgt"):
        width = max(b[key].shape[1] for b in batches)
        out[key] = torch.cat([F.pad(b[key], (0, width - b[key].shape[1]), value=PAD) for b in batches])
    return out


def new_model() -> EncoderDecoder:
    torch.manual_seed(0)
    return EncoderDecoder(V, V, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0).double()


def reference_update(model: torch.nn.Module, steps: list[list[dict]]) -> tuple[dict, list[float]]:
    """Parameters after plain SGD (lr 1) steps on the token mean of each step's micro-batches."""
    model = copy.deepcopy(model)
    losses = []
    for step in steps:
        model.zero_grad()
        total = sum(((b["tgt"][:, 1:] != PAD).sum() for b in step), torch.zeros((), dtype=torch.long))
        loss = (
            sum(
                F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=PAD, label_smoothing=LS, reduction="sum")
                for lg, lb in (model.logits_and_labels(b, PAD, EOS) for b in step)
            )
            / total
        )
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            for p in model.parameters():
                p -= p.grad
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses


class LossLog(L.Callback):
    """Every step's ``train/loss`` from the callback metrics (the trainer logs every step: see ``fit``)."""

    def __init__(self):
        self.losses = []
        self.step_before = -1

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.step_before = trainer.global_step

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self.step_before:  # this micro-batch ended an optimizer step
            self.losses.append(float(trainer.callback_metrics["train/loss"]))


def constant(_step: int) -> float:
    return 1.0


def fit(model, loader, accumulate: int, max_steps: int, **trainer_kwargs) -> tuple[dict, list[float]]:
    module = TransformerLitModule(
        model,
        optimizer=functools.partial(torch.optim.SGD, lr=1.0),
        lr_lambda=constant,
        label_smoothing=LS,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        detokenize=str,
    )
    log = LossLog()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        accumulate_grad_batches=accumulate,
        precision="64-true",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        callbacks=[log],
        log_every_n_steps=1,  # train/loss reaches the callback metrics at logged steps (test_step_logging.py)
        **trainer_kwargs,
    )
    trainer.fit(module, train_dataloaders=loader)
    return {k: v.detach().clone() for k, v in module.model.state_dict().items()}, log.losses


def assert_same(got: dict, want: dict, init: dict) -> None:
    """The trained update equals the reference update (relative error of the whole update vector)."""
    du = torch.cat([(got[k] - init[k]).flatten() for k in want])
    dw = torch.cat([(want[k] - init[k]).flatten() for k in want])
    err = float((du - dw).norm() / dw.norm())
    assert err < 1e-9, f"update off by {err:.2e} of its norm"


@pytest.mark.parametrize("accumulate", [2, 3])
def test_accumulated_step_equals_one_batch_of_the_same_tokens(accumulate):
    micro = BATCHES[:accumulate]
    model = new_model()
    want, want_loss = reference_update(model, [micro])
    got, got_loss = fit(copy.deepcopy(model), DataLoader(micro, batch_size=None), accumulate, 1)
    assert_same(got, want, model.state_dict())
    assert got_loss == pytest.approx(want_loss, rel=1e-12)  # train/loss: the step's token mean
    one, one_loss = fit(copy.deepcopy(model), DataLoader([union(micro)], batch_size=None), 1, 1)
    assert_same(one, want, model.state_dict())  # one batch holding the same tokens
    assert one_loss == pytest.approx(want_loss, rel=1e-12)


def test_an_epochs_short_last_window_is_a_token_mean_too():
    """3 micro-batches per epoch with accumulation 2: step 2 has one micro-batch (Lightning still
    divides by 2); it must be that micro-batch's own token mean, not half of it."""
    model = new_model()
    want, want_loss = reference_update(model, [BATCHES[:2], BATCHES[2:3]])
    got, got_loss = fit(copy.deepcopy(model), DataLoader(BATCHES[:3], batch_size=None), 2, 2)
    assert_same(got, want, model.state_dict())
    assert got_loss == pytest.approx(want_loss, rel=1e-12)


class RankShard(Dataset):
    """Micro-batch ``i`` of rank ``r`` is ``BATCHES[i * world + r]`` (rank read when it is asked)."""

    def __len__(self):
        return len(BATCHES) // int(os.environ.get("WORLD_SIZE", "2"))

    def __getitem__(self, i):
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        return BATCHES[i * world + rank]


@pytest.mark.slow  # ~35 s: two spawned processes import Lightning
def test_two_gloo_ranks_with_accumulation_equal_one_process_with_the_union():
    """2 ranks x accumulation 2 (micro-batches of 61, 8, 27 and 22 target tokens in all) is one step
    on the token mean of all four."""
    model = new_model()
    want, _ = reference_update(model, [BATCHES])
    ddp = new_model()
    got, _ = fit(ddp, DataLoader(RankShard(), batch_size=None), 2, 1, strategy="ddp_spawn", devices=2)
    assert_same(ddp.state_dict(), want, model.state_dict())


class _Ranks:
    """Two threads acting as DDP ranks: ``reduce`` is an all-reduce over them (sum or mean)."""

    def __init__(self, world: int) -> None:
        self.barrier, self.slots = threading.Barrier(world), [None] * world

    def all_reduce(self, rank: int, t: torch.Tensor, op: str) -> torch.Tensor:
        self.slots[rank] = t.detach().clone()
        self.barrier.wait()
        out = sum(self.slots[1:], self.slots[0].clone())
        self.barrier.wait()
        return out / len(self.slots) if op == "mean" else out


class _Strategy:
    def __init__(self, ranks: _Ranks, rank: int) -> None:
        self.ranks, self.rank = ranks, rank

    def reduce(self, t, reduce_op="mean"):
        return self.ranks.all_reduce(self.rank, t, reduce_op)


class _Trainer:
    def __init__(self, ranks: _Ranks, rank: int, world: int, accumulate: int) -> None:
        self.world_size, self.global_rank, self.accumulate_grad_batches = world, rank, accumulate
        self.strategy = _Strategy(ranks, rank)
        self.callbacks, self.max_steps, self.global_step = [], 1, 0  # one optimizer step, the last: logged


def test_ranks_under_the_ddp_contract_give_the_gradient_of_the_union():
    """Fast stand-in for the gloo test: two threads run the module's hooks as two ranks would under
    DDP (the loss of each micro-batch scaled by 1/accumulate and backpropagated, gradients averaged
    over ranks, then ``on_before_optimizer_step``); the result is the gradient of the token mean of
    all four micro-batches, and each rank logs that mean as ``train/loss``."""
    model = new_model()
    ref = copy.deepcopy(model)
    total = sum(int((b["tgt"][:, 1:] != PAD).sum()) for b in BATCHES)
    ref_loss = (
        sum(
            F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=PAD, label_smoothing=LS, reduction="sum")
            for lg, lb in (ref.logits_and_labels(b, PAD, EOS) for b in BATCHES)
        )
        / total
    )
    ref_loss.backward()
    world, accumulate = 2, 2
    ranks, grads, logged = _Ranks(world), {}, {}

    def rank_main(rank: int) -> None:
        module = TransformerLitModule(
            copy.deepcopy(model), optimizer=None, lr_lambda=None, label_smoothing=LS, pad_id=PAD, bos_id=BOS, eos_id=EOS
        )
        module._trainer = _Trainer(ranks, rank, world, accumulate)
        module.log = lambda name, value, **_kw: logged.__setitem__((rank, name), float(value))
        for i in range(accumulate):
            (module.training_step(BATCHES[i * world + rank], i) / accumulate).backward()  # as Lightning does
        for p in module.parameters():  # DDP: gradients averaged over ranks
            p.grad = ranks.all_reduce(rank, p.grad, "mean")
        module.on_before_optimizer_step(None)
        grads[rank] = {n: p.grad.clone() for n, p in module.model.named_parameters()}

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    want = torch.cat([p.grad.flatten() for p in ref.parameters()])
    for rank in range(world):
        got = torch.cat([grads[rank][n].flatten() for n, _ in ref.named_parameters()])
        err = float((got - want).norm() / want.norm())
        assert err < 1e-9, f"rank {rank}: gradient off by {err:.2e} of its norm"
        assert logged[(rank, "train/loss")] == pytest.approx(float(ref_loss), rel=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_train_nll_is_the_unsmoothed_token_mean_beside_the_objective(eps):
    """``train/nll`` is the step's negative log-likelihood without label smoothing
    (comparable with ``val/loss``), recomputed here with torch's own cross-entropy; ``train/loss`` stays
    the smoothed objective."""
    import torch.nn.functional as F

    from xformer.model import EncoderDecoder
    from xformer.train.losses import CrossEntropy
    from xformer.train.module import TransformerLitModule

    torch.manual_seed(0)
    model = EncoderDecoder(12, 12, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    module = TransformerLitModule(
        model, optimizer=None, lr_lambda=None, pad_id=0, eos_id=2, criterion=CrossEntropy(eps)
    ).eval()
    batch = {"src": torch.randint(3, 12, (4, 6)), "tgt": torch.randint(3, 12, (4, 5))}
    batch["tgt"][1, 3:] = 0
    module.training_step(batch, 0)
    window = module._step_window
    logits, labels = module.logits_and_labels(batch)
    nll = F.cross_entropy(logits.flatten(0, 1).double(), labels.flatten(), ignore_index=0)
    smoothed = F.cross_entropy(logits.flatten(0, 1).double(), labels.flatten(), ignore_index=0, label_smoothing=eps)
    assert float(window[4] / window[1]) == pytest.approx(float(nll), rel=1e-6)
    assert float(window[0] / window[1]) == pytest.approx(float(smoothed), rel=1e-6)
    if eps:
        assert abs(float(smoothed) - float(nll)) > 1e-3  # the two differ, so the check can fail
