"""The LightningModule that trains and evaluates any xformer model shape on any data module (each model class
answers for its own shape: :class:`xformer.model.ModelBase`'s ``logits_and_labels``, ``generate``,
``fit_to_positions``). Logged keys: docs/running.md. Counters and metrics are plain int64 device tensors and
per-example rows, not torchmetrics objects: a torchmetrics state follows the module's dtype (``bf16-true`` rounds
token counts past 256) and DDP's padded examples would count twice; rank reduction: docs/scaling.md."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import re
import time
import warnings
from typing import Callable

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch import Tensor
from typing_extensions import override

from xformer import lightning_compat
from xformer.data.loader import data_position
from xformer.train.decode import DecodeSettings
from xformer.train.losses import CrossEntropy
from xformer.train.optim import build_optimizer

log = logging.getLogger("xformer")


def uncompiled_state_dict(state: dict) -> dict:
    """``state`` without the ``_orig_mod.`` name segments a ``torch.compile`` wrapper adds (loads eager or compiled)."""
    return {k.replace("._orig_mod.", ".").removeprefix("_orig_mod."): v for k, v in state.items()}


def corpus_metrics(
    rows: list[tuple[float, int, int]], texts: dict[int, tuple[str, str]], seq_metrics: list, prefix: str, suffix=""
) -> tuple[dict[str, float], str | None]:
    """``({"<prefix>/loss<suffix>", "ppl", "acc", "bleu", "exact_match"}, BLEU signature or None)`` of one split.

    ``rows``: per example ``(summed token NLL, non-padding tokens, correct tokens)``; ``texts``: example id ->
    ``(hypothesis, reference)``. The NLL sum is ``math.fsum`` (independent of order and world size); BLEU is
    sacrebleu's corpus BLEU (13a, exp smoothing); exact match compares stripped strings.
    """
    nll = math.fsum(r[0] for r in rows)
    n = sum(r[1] for r in rows)
    correct = sum(r[2] for r in rows)
    out: dict[str, float] = {}
    if n:
        out[f"{prefix}/loss{suffix}"] = nll / n
        out[f"{prefix}/ppl{suffix}"] = math.exp(min(nll / n, 50.0))
        out[f"{prefix}/acc{suffix}"] = correct / n
    hyps = [texts[i][0] for i in sorted(texts)]
    refs = [texts[i][1] for i in sorted(texts)]
    signature = None
    if refs and "bleu" in seq_metrics:
        from sacrebleu.metrics import BLEU  # imported when used: a language model never needs it

        bleu = BLEU()
        out[f"{prefix}/bleu{suffix}"] = float(bleu.corpus_score(hyps, [refs]).score)
        signature = str(bleu.get_signature())
    if refs and "exact_match" in seq_metrics:
        same = sum(h.strip() == r.strip() for h, r in zip(hyps, refs, strict=True))
        out[f"{prefix}/exact_match{suffix}"] = same / len(refs)
    return out, signature


class TransformerLitModule(L.LightningModule):
    """Train/evaluate any xformer ``model`` (a :class:`xformer.model.ModelBase`).

    Args:
        optimizer: factory ``params -> Optimizer`` (Hydra ``_partial_``) or a :class:`~xformer.train.optim.DecayGroups`.
        lr_lambda: the schedule, ``optimizer step -> LR multiplier``.
        label_smoothing: ε_ls (Vaswani et al. §5.4 use 0.1) of the default ``criterion``, cross-entropy.
        detokenize: target ids -> text comparable to the references.
        metrics: sequence metrics of val/test (``"bleu"``, ``"exact_match"``).
        decode: a :class:`~xformer.train.decode.DecodeSettings` or a dict of its ``generate`` settings.
        test_split_names: the test loaders' names (``"test"`` logs plain keys, others ``@name``).
        val_decode_limit: decode at most this many validation batches (``None`` = all).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: Callable,
        lr_lambda: Callable[[int], float],
        label_smoothing: float = 0.1,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        detokenize: Callable[[list[int]], str] | None = None,
        metrics: list[str] | None = None,
        decode: dict | DecodeSettings | None = None,
        test_split_names: list[str] | None = None,
        val_decode_limit: int | None = None,
        criterion: Callable | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.optimizer_factory, self.lr_lambda = optimizer, lr_lambda
        self.criterion = CrossEntropy(label_smoothing) if criterion is None else criterion
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.detokenize = detokenize or (lambda ids: " ".join(map(str, ids)))
        self.seq_metrics = list(metrics or [])
        decode = dataclasses.asdict(decode) if isinstance(decode, DecodeSettings) else decode
        self.decode_cfg = {**dataclasses.asdict(DecodeSettings()), **(decode or {})}
        self.test_split_names = list(test_split_names or ["test"])
        self.val_decode_limit = val_decode_limit
        self._window: tuple[int, float, Tensor] | None = None  # (step, host time, tokens) at window start
        self._rate: Tensor | None = None  # tokens/s of the last complete window (device tensor)
        self._tokens = torch.zeros((), dtype=torch.int64)  # on the training device once training starts
        #: this optimizer step's (token loss, target tokens, micro-batches, all tokens, token NLL) sums so far,
        #: and the normaliser its micro-batches' losses are divided by (see :meth:`training_step`)
        self._step_window: Tensor | None = None
        self._step_norm: Tensor | None = None
        self._step_loss: Tensor | None = None
        self._step_nll: Tensor | None = None
        #: False after an optimizer step whose train/loss is not logged yet, True once logged, None before
        self._step_logged: bool | None = None
        self._watched: bool | None = None  # a callback reads a train-time key (see _logs_this_step)
        self._late_logs = False  # this epoch, on_train_batch_end logs train/loss (on_before_optimizer_step)
        self._step_before_batch = -1  # global_step when the current micro-batch started
        #: the last logging step's training loss, shown by :class:`xformer.jobs.console.StepBar`
        self.progress_metrics: dict[str, float] = {}
        self._eval: dict[str, dict] = {}
        #: stored in every checkpoint under ``"xformer"`` (config, tokenizer, vocab sizes) to rebuild the model
        self.checkpoint_meta: dict = {}
        #: sacrebleu's signature of the last BLEU computed (written to metrics.json)
        self.bleu_signature: str | None = None

    # -- forward paths ------------------------------------------------------------------------
    def logits_and_labels(self, batch: dict) -> tuple[Tensor, Tensor]:
        """The model's logits ``(B, T, V)`` and aligned labels ``(B, T)`` (``pad_id`` = ignore) of a batch."""
        return self.model.logits_and_labels(batch, self.pad_id, self.eos_id)

    def loss(self, logits: Tensor, labels: Tensor, smoothing: float | None = None) -> Tensor:
        """The configured :attr:`criterion` over non-padding labels; ``smoothing`` replaces its label smoothing."""
        return self.criterion(logits, labels, self.pad_id, smoothing)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Store ``tokens_seen`` (all ranks) and ``tokens_seen_per_rank``, each rank's resume point (all ranks
        save together, so the gather is a collective all reach)."""
        tokens = self.tokens_seen
        if self._step_window is not None:
            # saved inside an accumulation window (SIGTERM): the resumed run trains its micro-batches again
            tokens -= int(self._step_window[3])
        per_rank = [tokens]
        if self._attached() and self.trainer.world_size > 1:
            # torch's gather: LightningModule.all_gather calls torch.distributed.nn's deprecated all_gather
            per_rank = [0] * self.trainer.world_size
            torch.distributed.all_gather_object(per_rank, tokens)
        checkpoint["xformer"] = {**self.checkpoint_meta, "tokens_seen": sum(per_rank), "tokens_seen_per_rank": per_rank}
        if self._step_norm is not None:  # the loss normaliser, so a resumed run rounds as this one does
            checkpoint["xformer"]["step_norm"] = float(self._step_norm)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "state_dict" in checkpoint:  # written by a run whose model was wrapped by torch.compile
            checkpoint["state_dict"] = uncompiled_state_dict(checkpoint["state_dict"])
        meta = checkpoint.get("xformer", {})
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self._attached() else (0, 1)
        per_rank = meta.get("tokens_seen_per_rank")
        if isinstance(per_rank, list) and len(per_rank) == world:
            self.tokens_seen = int(per_rank[rank])
        else:  # another number of ranks (or no per-rank counts): the total on rank 0
            self.tokens_seen = int(meta.get("tokens_seen", 0)) if rank == 0 else 0
        norm = meta.get("step_norm")
        self._step_norm = None if norm is None else torch.tensor(float(norm), dtype=torch.float64)

    def _attached(self) -> bool:
        """True when a trainer runs this module (``self.trainer`` raises otherwise, e.g. in a unit test)."""
        try:
            return self.trainer is not None
        except RuntimeError:
            return False

    # -- training -----------------------------------------------------------------------------
    @property
    def tokens_seen(self) -> int:
        """Non-padding source + target tokens trained on by this process (all ranks after ``fit``); reading
        it syncs with the device, so never inside a step."""
        return int(self._tokens)

    @tokens_seen.setter
    def tokens_seen(self, value: int) -> None:
        self._tokens = torch.tensor(int(value), dtype=torch.int64, device=self._tokens.device)

    @override
    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        """Teacher-forced summed token loss of one micro-batch over a normaliser ``M`` shared by all ranks (the
        previous step's mean target tokens per micro-batch; :meth:`on_before_optimizer_step` rescales the gradient
        to the step's token mean, docs/scaling.md). Everything stays on the device (no host sync)."""
        logits, labels = self.logits_and_labels(batch)
        copies = batch.get("zero_weight")  # rows a DDP rank trains only to keep step with the others
        if copies is not None:
            labels = labels.masked_fill(copies[:, None], self.pad_id)
        logits = logits if logits.dtype == torch.float64 else logits.float()  # at least float32
        if hasattr(self.criterion, "sum_and_nll"):  # the objective and the unsmoothed NLL from one log-softmax
            loss_sum, nll_sum = self.criterion.sum_and_nll(logits, labels, self.pad_id)
        else:
            loss_sum = self.criterion(logits, labels, self.pad_id, reduction="sum")  # the loss group's class
            if getattr(self.criterion, "label_smoothing", 0.0):  # the unsmoothed NLL, comparable with val/loss
                nll_sum = self.criterion(logits.detach(), labels, self.pad_id, 0.0, reduction="sum")
            else:
                nll_sum = loss_sum.detach()
        n_tgt = (labels != self.pad_id).sum()
        n_tok = n_tgt
        if "src" in batch:
            src_real = batch["src"] != self.pad_id
            if copies is not None:
                src_real = src_real & ~copies[:, None]
            n_tok = n_tok + src_real.sum()
        if self._tokens.device != n_tok.device:
            self._tokens = self._tokens.to(n_tok.device)
        self._tokens += n_tok
        if self._step_norm is None:  # first micro-batch of this process's training: one all-reduce
            norm = n_tgt.clamp(min=1).to(loss_sum.dtype)
            if self._attached() and self.trainer.world_size > 1:
                norm = self.trainer.strategy.reduce(norm, reduce_op="mean")
            self._step_norm = norm
        if self._step_window is None:
            self._step_window = torch.zeros(5, dtype=torch.float64, device=loss_sum.device)
        sums = (loss_sum.detach(), n_tgt, torch.ones_like(n_tgt), n_tok, nll_sum)
        self._step_window += torch.stack([s.double() for s in sums])
        return loss_sum / self._step_norm.to(loss_sum.dtype)

    @override
    def on_before_optimizer_step(self, optimizer) -> None:
        """Rescale the accumulated gradient to the step's token mean over all micro-batches and ranks
        (:meth:`training_step`) before gradient clipping, and log that mean as ``train/loss`` at the steps
        :meth:`_logs_this_step` selects. A ``16-mixed`` loss scale survives the constant factor;
        callbacks' ``on_before_optimizer_step`` run before this hook and see the gradient before it."""
        window = self._step_window
        if window is None:
            return
        world = self.trainer.world_size if self._attached() else 1
        if world > 1:
            window = self.trainer.strategy.reduce(window, reduce_op="sum")
        loss_sum, n_tgt, micro = window[0], window[1].clamp(min=1), window[2]
        accumulate = self.trainer.accumulate_grad_batches if self._attached() else 1
        factor = self._step_norm.double() * accumulate * world / n_tgt
        groups: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
        for p in self.parameters():
            if p.grad is not None:
                g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad  # FSDP2 DTensor
                groups.setdefault((g.device, g.dtype), []).append(g)
        with torch.no_grad():  # never read on the host: no sync per step
            for (device, dtype), grads in groups.items():
                # one for-each call per device and dtype; the factor in float32/float64 grads' own dtype (CUDA
                # fuses only a scalar of the grads' dtype), float64 for 16-bit grads (a bfloat16 copy would round it)
                same = dtype in (torch.float32, torch.float64)
                torch._foreach_mul_(grads, factor.to(device=device, dtype=dtype if same else factor.dtype))
        self._step_loss = loss_sum / n_tgt  # float64
        # the same tokens' NLL without label smoothing, comparable with val/loss (train/loss is the objective)
        self._step_nll = window[4] / n_tgt
        self._step_logged = False
        # else on_train_batch_end logs them should the trainer stop after all; once it has (training may go on to
        # min_steps), it logs them for the epoch's rest: a later hook's entry would hide this hook's values
        if not self._late_logs and self._logs_this_step():
            self._log_step_loss()
        # next step's normaliser, the same on all ranks; a float32 value, so that dividing by it in
        # float32 or float64 and the factor above use the very same number
        self._step_norm = (n_tgt / micro).float().double()
        self._step_window = None

    #: the values logged during training (see :meth:`_logs_this_step`)
    TRAIN_KEYS = frozenset({"train/loss", "train/nll", "perf/tokens_per_s", "perf/tokens_seen"})

    def _logs_this_step(self, stepped: bool = False) -> bool:
        """Whether this optimizer step logs :attr:`TRAIN_KEYS`: where a logger writes them, at the last step,
        and at every step while a callback's ``monitor``/``metric`` watches one (docs/running.md).
        ``stepped``: asked after the optimizer step (``trainer.global_step`` counts it already)."""
        if not self._attached():
            return True
        trainer = self.trainer
        if self._watched is None:
            watched = {getattr(cb, a, None) for cb in trainer.callbacks for a in ("monitor", "metric")}
            self._watched = bool(watched & self.TRAIN_KEYS)
        if self._watched:
            return True
        if trainer.max_steps is not None and 0 < trainer.max_steps <= trainer.global_step + (not stepped):
            return True  # the last step
        # the loggers write this step (Lightning's rule: every log_every_n_steps-th step, and at a stop)
        every = trainer.log_every_n_steps
        return (every > 0 and (trainer.global_step + (not stepped)) % every == 0) or trainer.should_stop

    def _log_step_loss(self) -> None:
        self.log("train/loss", self._step_loss)
        self.log("train/nll", self._step_nll)
        self._log_data_epoch()
        self._step_logged = True

    _trained_epoch: int | None = None  # the data's epoch of the last batch of the last fit

    def _log_data_epoch(self) -> None:
        """Log ``epoch`` as the data's epoch of the last trained batch (Lightning's counts one endless epoch)."""
        if not self._attached():
            return
        position = data_position(self.trainer)  # in fit; the test after it reads the fit's last one
        epoch = position[0] if position is not None else self._trained_epoch
        if epoch is None or self.trainer.state.fn not in ("fit", "test"):
            return
        # the same value on every rank: Lightning's advice to all-reduce an epoch-level value does not apply
        warnings.filterwarnings("ignore", r"It is recommended to use `self\.log\('epoch'", PossibleUserWarning)
        self.log("epoch", float(epoch), add_dataloader_idx=False)

    @override
    def on_train_batch_start(self, batch, batch_idx) -> None:
        self._step_before_batch = self.trainer.global_step  # it moves in the micro-batch that ends a step

    @override
    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        """Log ``perf/tokens_seen`` and ``perf/tokens_per_s`` (device tensors) after the steps :meth:`_logs_this_step`
        selects, and ``train/loss``/``train/nll`` if a callback's stop came after :meth:`on_before_optimizer_step`
        passed them over. Throughput is over ``trainer.log_every_n_steps`` steps (the host runs ahead of the GPU)."""
        step = self.trainer.global_step
        every = max(1, int(self.trainer.log_every_n_steps or 1))
        now = time.perf_counter()
        if self._window is None:
            self._window = (step, now, self._tokens.clone())
        elif step != self._window[0] and step % every == 0:
            _, t0, tok0 = self._window
            self._rate = (self._tokens - tok0).double() / max(now - t0, 1e-9)
            self._window = (step, now, self._tokens.clone())
            if self._step_loss is not None:
                self.progress_metrics = self._bar_metrics()  # one read per logging window
        if step == self._step_before_batch or not self._logs_this_step(stepped=True):  # no step ended here
            return
        if self._step_logged is False:
            self._late_logs = True
            self._log_step_loss()
        if self._rate is not None:
            self.log("perf/tokens_per_s", self._rate)
        self.log("perf/tokens_seen", self._tokens.double())

    def _bar_metrics(self) -> dict[str, float]:
        """The progress bar's loss of the last step under its name (docs/running.md)."""
        if not getattr(self.criterion, "label_smoothing", 0.0) or self._step_nll is None:
            return {"train/loss": float(self._step_loss)}
        pair = torch.stack((self._step_loss.detach(), self._step_nll.detach())).tolist()  # one host read
        return {"train/loss (label-smoothed)": pair[0], "train/nll": pair[1]}

    def on_train_epoch_start(self) -> None:
        self._late_logs = False  # Lightning's per-hook entries of the last epoch are gone

    def last_step_metrics(self) -> dict[str, float]:
        """The last step's ``train/loss``, ``train/nll``, ``perf/tokens_seen`` (and ``perf/tokens_per_s``) on the
        host, logged or not, for ``metrics.json``; empty before the first step."""
        if self._step_loss is None:
            return {}
        out = {"train/loss": float(self._step_loss), "perf/tokens_seen": float(self._tokens)}
        out["train/nll"] = float(self._step_nll)  # set with train/loss
        if self._rate is not None:
            out["perf/tokens_per_s"] = float(self._rate)
        return out

    def on_train_start(self) -> None:
        if self.trainer.ckpt_path:  # resumed: the configured optimizer settings over the restored ones
            self._apply_configured_optimizer()
        self._window = self._rate = self._watched = self._step_logged = self._step_window = None
        self._late_logs = False
        if self._step_norm is not None:
            self._step_norm = self._step_norm.to(self.device)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Lightning's ``clip_gradients``, except with a fused optimizer under mixed precision, which Lightning
        refuses to clip (the gradients may be scaled): unscale them first (``16-mixed``), then clip."""
        if not gradient_clip_val:
            return
        plugin = self.trainer.precision_plugin
        if isinstance(plugin, MixedPrecision) and getattr(optimizer, "_step_supports_amp_scaling", False):
            if plugin.scaler is not None:
                plugin.scaler.unscale_(optimizer)
            algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val, algorithm)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    @override
    def setup(self, stage: str) -> None:
        if self._attached():
            lightning_compat.refresh_csv_headers(self.trainer)  # ddp_spawn: the logger copies missed the ranks' columns

    def on_fit_end(self) -> None:
        position = data_position(self.trainer)  # also after a fit with nothing left to train
        self._trained_epoch = position[0] if position is not None else None  # for the test's log rows

    def on_train_end(self) -> None:
        total = torch.tensor([float(self.tokens_seen)], dtype=torch.float64, device=self.device)
        if self.trainer.world_size > 1:
            total = self.trainer.strategy.reduce(total, reduce_op="sum")
        self.tokens_seen = int(total.tolist()[0])  # over all ranks

    def configure_model(self) -> None:
        """FSDP2 (``trainer=fsdp``, a ``device_mesh``): shard every block, then the rest; idempotent (``test``
        after ``fit`` calls it again)."""
        mesh = self.device_mesh
        if mesh is None:
            return
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if isinstance(self.model, FSDPModule):
            return
        if mesh.mesh_dim_names and "data_parallel" in mesh.mesh_dim_names:
            mesh = mesh["data_parallel"]
        for block in self.model.blocks():  # every block, whatever attention mechanism it holds
            fully_shard(block, mesh=mesh)
        fully_shard(self.model, mesh=mesh)

    def configure_optimizers(self):
        opt = build_optimizer(self.optimizer_factory, self.model)  # optim=adamw: weight decay by parameter group
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_lambda)
        # this run's settings, before Lightning restores a checkpoint's over them (see on_train_start)
        self._configured = (
            [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
            [copy.deepcopy(vars(f)) if hasattr(f, "__dict__") else None for f in sched.lr_lambdas],
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _apply_configured_optimizer(self) -> None:
        """Put this run's optimizer hyperparameters and schedule settings back over those Lightning restored
        from the checkpoint (keeping moments and step count), each group's ``lr`` as the configured schedule
        gives it at the restored step: a resume with ``optim.lr=0.001`` trains at 0.001."""
        groups, lambdas = self._configured  # set by configure_optimizers, which fit runs first
        for opt in self.trainer.optimizers:
            for group, conf in zip(opt.param_groups, groups, strict=False):
                group.update({k: v for k, v in conf.items() if k != "lr"})
        for config in self.trainer.lr_scheduler_configs:
            sched = config.scheduler  # the LambdaLR of configure_optimizers
            for fn, state in zip(sched.lr_lambdas, lambdas, strict=False):
                if state is not None:
                    fn.__dict__.update(copy.deepcopy(state))
            sched.base_lrs = [g["initial_lr"] for g in sched.optimizer.param_groups]
            for group, base, fn in zip(sched.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas, strict=True):
                group["lr"] = base * fn(sched.last_epoch)

    # -- evaluation ---------------------------------------------------------------------------
    def _eval_step(self, batch: dict, prefix: str, decode: bool) -> None:
        """Per-example NLL sum, token count, correct tokens (and decoded text), keyed by ``batch["idx"]`` so
        :meth:`_eval_end` keeps each example once under DDP; over-long examples are cut (and warned of)."""
        batch, cut = self.model.fit_to_positions(batch, self.pad_id, self.eos_id)
        logits, labels = self.logits_and_labels(batch)
        mask = labels != self.pad_id
        tok_nll = F.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=self.pad_id, reduction="none"
        ).view(labels.shape)
        acc = self._eval.setdefault(prefix, {"idx": [], "nll": [], "n": [], "correct": [], "text": {}})
        if "idx" in batch:
            idx = [int(i) for i in batch["idx"]]
        else:  # no example ids: count everything (exact only in a single process)
            start = -1 - len(acc["idx"]) - (self.global_rank << 40)
            idx = list(range(start, start - labels.shape[0], -1))
        acc["idx"].extend(idx)
        acc.setdefault("cut", []).extend(i for i, c in zip(idx, cut.tolist(), strict=True) if c)
        acc["nll"].extend(tok_nll.sum(1).double().tolist())
        acc["n"].extend(mask.sum(1).tolist())
        acc["correct"].extend(((logits.argmax(-1) == labels) & mask).sum(1).tolist())
        if decode and self.seq_metrics and "tgt_text" in batch:
            hyps = self._generate_sharded(batch, logits)
            acc["text"].update(zip(idx, zip(hyps, batch["tgt_text"], strict=True), strict=True))

    def _generate_sharded(self, batch: dict, logits: Tensor) -> list[str]:
        """:meth:`generate`, with an FSDP2 model's units gathered once around it (ranks decode for different
        numbers of steps, so per-forward all-gathers would not match up)."""
        if not hasattr(self.model, "reshard"):  # not fully_shard-ed
            return self.generate(batch, logits)
        units = [m for m in self.model.modules() if hasattr(m, "reshard") and hasattr(m, "unshard")]
        self.model.set_reshard_after_forward(False)
        for m in units:
            m.unshard()
        try:
            return self.generate(batch, logits)
        finally:
            for m in units:
                m.reshard()
            self.model.set_reshard_after_forward(True)

    def generate(self, batch: dict, logits: Tensor | None = None) -> list[str]:
        """Decoded, detokenised hypotheses of a batch (the model's ``generate`` under the ``decode`` settings)."""
        c = self.decode_cfg
        settings = (c["max_len_a"], c["max_len_b"], c["beam_size"], c["alpha"])
        ids = self.model.generate(batch, self.bos_id, self.eos_id, self.pad_id, *settings, logits=logits)
        return [self.detokenize(x) for x in ids]

    def _eval_end(self, prefix: str, suffix: str = "", key: str | None = None) -> dict[str, float]:
        """Log and return ``<prefix>/<metric><suffix>`` of the examples gathered under ``key`` (default ``prefix``)."""
        acc = self._eval.pop(key or prefix, None)
        if acc is None:
            return {}
        if acc.get("cut"):
            cut, limit = sorted(set(acc["cut"])), getattr(self.model, "position_limit", None)
            ids = ", ".join(map(str, cut[:20])) + (" …" if len(cut) > 20 else "")
            log.warning(
                f"{prefix}{suffix}: {len(cut)} example(s) longer than the model's {limit} positions (model.max_len) "
                f"were cut to fit; example ids (0-based): {ids}"
            )
        rows, texts = self._gather_examples(acc)
        out, signature = corpus_metrics(rows, texts, self.seq_metrics, prefix, suffix)
        self.bleu_signature = signature or self.bleu_signature
        for key, val in out.items():
            # every rank holds the all-rank value: Lightning's advice to log it with sync_dist=True does not apply
            advice = rf"It is recommended to use `self\.log\({re.escape(repr(key))}, \.\.\., sync_dist=True\)`"
            warnings.filterwarnings("ignore", advice, PossibleUserWarning)
            # a float64 tensor keeps the exact value everywhere (Lightning makes a Python float float32);
            # batch_size=1 so the epoch mean is the value itself
            self.log(key, torch.tensor(val, dtype=torch.float64), sync_dist=False, rank_zero_only=False, batch_size=1)
        return out

    def _gather_examples(self, acc: dict) -> tuple[list[tuple[float, int, int]], dict[int, tuple[str, str]]]:
        """Every rank's per-example ``(nll, n, correct)`` rows and ``idx -> (hyp, ref)`` texts, each example once."""
        local = (acc["idx"], acc["nll"], acc["n"], acc["correct"], acc["text"])
        parts = [local]
        if self._attached() and self.trainer.world_size > 1:
            parts = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(parts, local)
        rows: dict[int, tuple[float, int, int]] = {}
        texts: dict[int, tuple[str, str]] = {}
        for idx, nll, n, correct, text in parts:
            for i, a, b, c in zip(idx, nll, n, correct, strict=True):
                rows.setdefault(i, (a, b, c))
            for i, t in text.items():
                texts.setdefault(i, t)
        return [rows[i] for i in sorted(rows)], texts

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        limit = self.val_decode_limit
        # batch b of rank r is batch b * world_size + r of the whole (interleaved) validation set
        world = self.trainer.world_size if self._attached() else 1
        self._eval_step(batch, "val", decode=limit is None or batch_idx * world + self.global_rank < limit)

    def on_validation_epoch_end(self) -> None:
        self._eval_end("val")
        self._log_data_epoch()

    @override
    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, f"test#{dataloader_idx}", decode=True)

    def on_test_epoch_end(self) -> None:
        self._log_data_epoch()
        for i, name in enumerate(self.test_split_names):
            self._eval_end("test", "" if name == "test" else f"@{name}", key=f"test#{i}")
