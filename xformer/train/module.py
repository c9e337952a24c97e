"""The LightningModule that trains and evaluates any xformer model shape on any data module.

The module never asks which shape it trains: each model class answers for itself
(:class:`xformer.model.ModelBase`'s task glue): ``logits_and_labels`` (the encoder–decoder by teacher
forcing, the decoder-only model as a language model or a prefix LM over ``src + [BOS] + tgt``, the
encoder-only tagger with label ``i`` = target token ``i``), ``generate`` (for BLEU/exact match) and
``fit_to_positions`` (evaluation cuts over-long examples).

Logged keys: ``train/loss`` (the training objective, label-smoothed), ``val/loss`` (token NLL without
smoothing, so label-smoothing sweeps compare), ``val/ppl`` = exp(val/loss), ``val/acc`` (token
accuracy), ``val/bleu`` / ``val/exact_match`` (decoded), the same under ``test/`` after fit, and
``perf/tokens_per_s`` (non-padding source + target tokens per second of training step).

Why the counters and metrics here are not torchmetrics objects (checked with torchmetrics 1.9):

* Token counts and the training loss: a torchmetrics aggregator (``SumMetric``, ``MeanMetric``) is a
  child module whose ``dtype`` follows the LightningModule's. Under ``trainer.precision=bf16-true``
  Lightning converts the module to bfloat16, so a float state rounds (token counts stop being exact
  past 256) and an int64 state fails at the next ``update`` (bfloat16 input cannot be added to it).
  A float32 state is exact only up to 2²⁴ tokens. The counter is therefore a plain int64 device
  tensor (no host sync per step), summed over ranks once, at the end of ``fit``. ``train/loss`` is
  each optimizer step's token mean over all its micro-batches and ranks, from the one two-element
  all-reduce per step that the token-weighted gradient needs anyway (see ``training_step``).
* Corpus BLEU and exact match (and ``val/loss``, ``val/acc``): under DDP the distributed sampler
  pads the last batches with repeated examples, which a metric's summed state would count twice;
  BLEU is not a mean of per-batch scores; and the logged values must be exactly the
  single-process ones (float64, equal across world sizes). So each rank keeps per-example rows
  keyed by the example id, :meth:`TransformerLitModule._gather_examples` gathers them once, keeps
  each id once, and sacrebleu (13a tokenisation, its reference implementation and signature) and
  ``math.fsum`` compute the corpus values.
"""

from __future__ import annotations

import copy
import logging
import math
import re
import time
import warnings
from typing import Callable

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch import Tensor
from typing_extensions import override

from xformer import lightning_compat
from xformer.data.loader import data_position
from xformer.train.decode import DecodeSettings
from xformer.train.losses import CrossEntropy

log = logging.getLogger("xformer")


def uncompiled_state_dict(state: dict) -> dict:
    """``state`` with the ``_orig_mod.`` segments that a ``torch.compile`` wrapper adds to parameter
    names removed, so a checkpoint loads into an eager or in-place compiled model alike.

    Args:
        state: a state dict (name -> tensor); names without the segment pass through unchanged.
    """
    return {k.replace("._orig_mod.", ".").removeprefix("_orig_mod."): v for k, v in state.items()}


def corpus_metrics(
    rows: list[tuple[float, int, int]],
    texts: dict[int, tuple[str, str]],
    seq_metrics: list[str],
    prefix: str,
    suffix: str = "",
) -> tuple[dict[str, float], str | None]:
    """The corpus values of one evaluated split, from each example once.

    Args:
        rows: per example ``(summed token NLL, non-padding tokens, correct tokens)``.
        texts: example id -> ``(hypothesis, reference)`` for the decoded examples.
        seq_metrics: which sequence metrics to compute (``"bleu"``, ``"exact_match"``).
        prefix, suffix: key parts, e.g. ``"test"`` and ``"@long"`` give ``test/loss@long``.

    Returns:
        ``({"<prefix>/loss<suffix>": token NLL, "ppl", "acc", "bleu", "exact_match"}, BLEU signature)``:
        loss and perplexity from the exactly rounded sum (``math.fsum``, independent of order and
        world size), BLEU as sacrebleu's corpus BLEU (13a tokenisation, exp smoothing,
        case-sensitive; signature ``None`` when not computed), exact match of stripped strings.
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
    """Train/evaluate any xformer ``model`` with label-smoothed cross-entropy and Adam + inverse-sqrt
    warm-up: an encoder–decoder translator, a decoder-only language model or an encoder-only tagger.

    Args:
        model: a :class:`xformer.model.ModelBase` (its task glue gives logits, labels and outputs).
        optimizer: factory ``params -> torch.optim.Optimizer`` (Hydra ``_partial_``), or a
            :class:`xformer.train.optim.DecayGroups`, called with the model (``optim=adamw``).
        lr_lambda: factory ``step -> multiplier`` (the schedule, applied every optimizer step).
        label_smoothing: ε_ls of Szegedy et al. 2016 (Vaswani et al. §5.4 use 0.1).
        pad_id, bos_id, eos_id: special ids of the data.
        detokenize: target ids → text comparable to the references.
        metrics: sequence metrics to compute on val/test (``"bleu"``, ``"exact_match"``).
        decode: a :class:`~xformer.train.decode.DecodeSettings` (the ``decode`` group) or a dict with
            ``beam_size``, ``alpha``, ``max_len_a``, ``max_len_b``.
        test_split_names: names of the test loaders (``"test"`` logs plain keys, others ``@name``).
        val_decode_limit: decode at most this many validation batches (``None`` = all).
        criterion: the training loss (the ``loss`` group, e.g. :class:`~xformer.train.losses.CrossEntropy`);
            default cross-entropy with ``label_smoothing``, whose value it otherwise replaces.
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
        self.label_smoothing = getattr(self.criterion, "label_smoothing", label_smoothing)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.detokenize = detokenize or (lambda ids: " ".join(map(str, ids)))
        self.seq_metrics = list(metrics or [])
        if isinstance(decode, DecodeSettings):
            decode = decode.generate_kwargs()
        self.decode_cfg = {"beam_size": 1, "alpha": 0.6, "max_len_a": 1.5, "max_len_b": 10, **(decode or {})}
        self.test_split_names = list(test_split_names or ["test"])
        self.val_decode_limit = val_decode_limit
        self._window: tuple[int, float, Tensor] | None = None  # (step, host time, tokens) at window start
        self._rate: Tensor | None = None  # tokens/s of the last complete window (device tensor)
        self._tokens = torch.zeros((), dtype=torch.int64)  # on the training device once training starts
        #: the current optimizer step's (summed token loss, target tokens, micro-batches, all tokens) so far, and
        #: the normaliser its micro-batches' losses are divided by (see :meth:`training_step`)
        self._step_window: Tensor | None = None
        self._step_norm: Tensor | None = None
        self._step_loss: Tensor | None = None
        self._step_nll: Tensor | None = None
        #: False after an optimizer step whose train/loss is not logged yet, True once logged, None before
        self._step_logged: bool | None = None
        self._watched: bool | None = None  # a callback reads a train-time key (see _logs_this_step)
        self._late_logs = False  # this epoch, on_train_batch_end logs train/loss (on_before_optimizer_step)
        self._step_before_batch = -1  # global_step when the current micro-batch started
        #: shown by the progress bar (:class:`xformer.jobs.console.StepBar`): the training loss of the
        #: last logging step, a host float read once per logging window
        self.progress_metrics: dict[str, float] = {}
        self._eval: dict[str, dict] = {}
        #: stored in every checkpoint under ``"xformer"`` (config, tokenizer, vocab sizes) so
        #: ``mode=eval`` and ``xformer translate`` can rebuild the model without the run's files
        self.checkpoint_meta: dict = {}
        #: sacrebleu's signature of the last BLEU computed (written to metrics.json)
        self.bleu_signature: str | None = None

    # -- forward paths ------------------------------------------------------------------------
    def logits_and_labels(self, batch: dict) -> tuple[Tensor, Tensor]:
        """Model logits ``(B, T, V)`` and aligned labels ``(B, T)`` (``pad_id`` = ignore) for a batch,
        as the model's own :meth:`~xformer.model.ModelBase.logits_and_labels` gives them."""
        return self.model.logits_and_labels(batch, self.pad_id, self.eos_id)

    def loss(self, logits: Tensor, labels: Tensor, smoothing: float | None = None) -> Tensor:
        """The configured :attr:`criterion` over non-padding labels; ``smoothing`` replaces its label smoothing."""
        return self.criterion(logits, labels, self.pad_id, smoothing)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Store ``tokens_seen`` (all ranks) and each rank's own count (``tokens_seen_per_rank``): rank 0
        writes the file, and every rank resumes its own counter from it. Every rank saves together (as
        Lightning requires), so the one gather here is a collective all ranks reach."""
        tokens = self.tokens_seen
        if self._step_window is not None:
            # saved inside an accumulation window (SIGTERM): the weights hold no update from the
            # window's micro-batches, which the resumed run trains again -- count them then, not twice
            tokens -= int(self._step_window[3])
        per_rank = [tokens]
        if self._attached() and self.trainer.world_size > 1:
            # torch's own all_gather: LightningModule.all_gather calls torch.distributed.nn's deprecated one
            mine = torch.tensor([tokens], dtype=torch.int64, device=self._tokens.device)
            gathered = [torch.zeros_like(mine) for _ in range(self.trainer.world_size)]
            torch.distributed.all_gather(gathered, mine)
            per_rank = [int(t) for t in torch.cat(gathered).tolist()]
        checkpoint["xformer"] = {
            **self.checkpoint_meta,
            "tokens_seen": sum(per_rank),
            "tokens_seen_per_rank": per_rank,
        }
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
        norm = checkpoint.get("xformer", {}).get("step_norm")
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
        """Non-padding source + target tokens trained on by this process (all ranks after ``fit``).

        Reading it copies the on-device counter to the host (a device sync): do so at logging,
        checkpoint or end-of-run time, never inside a step."""
        return int(self._tokens)

    @tokens_seen.setter
    def tokens_seen(self, value: int) -> None:
        self._tokens = torch.tensor(int(value), dtype=torch.int64, device=self._tokens.device)

    @override
    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        """Teacher-forced loss of one micro-batch; everything stays on the device (no host sync).

        Every token counts once, at its weight: an optimizer step's gradient is the gradient of
        ``sum(token losses) / sum(target tokens)`` over *all* micro-batches of the step
        (``trainer.accumulate_grad_batches``, including an epoch's shorter last window) and all ranks
        -- not the mean of per-micro-batch means, which weighs a token of a short micro-batch more.
        The total is only known once the step's last micro-batch is in, so each micro-batch returns
        its *summed* token loss over a normaliser ``M`` shared by all ranks (the previous step's mean
        target tokens per micro-batch, so the backward pass sees token-mean-sized values, which keeps
        a ``16-mixed`` loss scale sensible); :meth:`on_before_optimizer_step` then rescales the
        accumulated gradient by ``M * accumulate * world_size / N`` once ``N``, the step's target
        tokens over all ranks, is summed (one two-element all-reduce per optimizer step under DDP).
        Label smoothing keeps its meaning (each token's smoothed loss, summed); padding is ignored.

        The token counter is a device tensor; ``train/loss`` is the step's token mean over all its
        micro-batches and ranks (the training objective, label-smoothed when ``loss.label_smoothing`` > 0;
        ``train/nll`` beside it is the unsmoothed negative log-likelihood, on the footing of ``val/loss``),
        logged by :meth:`on_before_optimizer_step` as a device tensor
        (Lightning reads it on the host only when it writes its logs). It is not a Lightning
        ``prog_bar`` value (the bar converts those to numbers at every batch); the bar shows
        :attr:`progress_metrics` instead, read at logging steps.
        """
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
        self._step_window += torch.stack(
            (
                loss_sum.detach().double(),
                n_tgt.double(),
                torch.ones((), dtype=torch.float64, device=loss_sum.device),
                n_tok.double(),
                nll_sum.double(),
            )
        )
        return loss_sum / self._step_norm.to(loss_sum.dtype)

    @override
    def on_before_optimizer_step(self, optimizer) -> None:
        """Turn the accumulated gradient into that of the step's token mean over all micro-batches and
        ranks (see :meth:`training_step`), and log that mean as ``train/loss`` at the steps
        :meth:`_logs_this_step` selects (:meth:`on_train_batch_end` logs it should the trainer stop
        after this hook).

        Runs after the step's last backward pass and before gradient clipping (which then clips the
        true gradient); under ``16-mixed`` the gradients may still carry the loss scale, which a
        constant factor leaves intact. Callbacks' ``on_before_optimizer_step`` run before this hook
        and see the gradient before the rescaling."""
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
                # one for-each call per device and dtype; the factor in the grads' dtype for float32/float64
                # grads (CUDA fuses only a scalar of the grads' dtype; a 0-dim operand takes the other
                # operand's dtype anyway), float64 for 16-bit grads (a bfloat16 copy would round it)
                same = dtype in (torch.float32, torch.float64)
                torch._foreach_mul_(grads, factor.to(device=device, dtype=dtype if same else factor.dtype))
        self._step_loss = loss_sum / n_tgt  # float64
        # the same tokens' negative log-likelihood without label smoothing: the number to compare with
        # val/loss (train/loss is the training objective, smoothed when loss.label_smoothing > 0)
        self._step_nll = window[4] / n_tgt
        self._step_logged = False
        # else on_train_batch_end logs them, should the trainer stop after all; once it has (training may go
        # on to min_steps), it logs them for the rest of the epoch: Lightning keeps one entry per hook and
        # name, and the later hook's entry would hide this hook's values until the epoch ends
        if not self._late_logs and self._logs_this_step():
            self._log_step_loss()
        # next step's normaliser, the same on all ranks; a float32 value, so that dividing by it in
        # float32 or float64 and the factor above use the very same number
        self._step_norm = (n_tgt / micro).float().double()
        self._step_window = None

    #: the values logged during training (see :meth:`_logs_this_step`)
    TRAIN_KEYS = frozenset({"train/loss", "train/nll", "perf/tokens_per_s", "perf/tokens_seen"})

    def _logs_this_step(self, stepped: bool = False) -> bool:
        """Whether this optimizer step's train-time values (:attr:`TRAIN_KEYS`) are logged: at the steps
        the loggers write them (every ``trainer.log_every_n_steps`` steps, and when the trainer stops),
        at the last step (``fit`` ends; its callback metrics go to ``metrics.json``), and at every step
        while a callback watches one of them (a ``ModelCheckpoint`` or ``EarlyStopping`` ``monitor``, the
        validation line's ``metric``, e.g. ``objective.metric=train/loss``). ``stepped``: asked after the
        optimizer step (``trainer.global_step`` counts it already).

        A value logged on the other steps would be overwritten before a logger writes it, so the logs
        are the same; ``trainer.callback_metrics`` holds the last logged step's values in between (a
        callback of your own that reads ``train/loss`` after every step wants ``trainer.log_every_n_steps=1``)."""
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
        """Log ``epoch`` as the data's epoch of the last trained batch, in training, validation and the test
        after ``fit`` (Lightning would log its own counter, which counts one endless epoch when the data
        epochs run back to back)."""
        if not self._attached():
            return
        position = data_position(self.trainer)  # in fit; the test after it reads the fit's last one
        epoch = position[0] if position is not None else self._trained_epoch
        if epoch is None or self.trainer.state.fn not in ("fit", "test"):
            return
        # the same value on every rank: Lightning's advice to all-reduce an epoch-level value does not apply
        warnings.filterwarnings(
            "ignore", message=r"It is recommended to use `self\.log\('epoch'", category=PossibleUserWarning
        )
        self.log("epoch", float(epoch), add_dataloader_idx=False)

    @override
    def on_train_batch_start(self, batch, batch_idx) -> None:
        self._step_before_batch = self.trainer.global_step  # it moves in the micro-batch that ends a step

    @override
    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        """Log ``perf/tokens_seen`` and ``perf/tokens_per_s`` as device tensors (no sync) after the
        optimizer steps that :meth:`_logs_this_step` selects, and the step's ``train/loss`` and
        ``train/nll`` if the trainer stopped after :meth:`on_before_optimizer_step` passed them over
        (a callback's stop: the loggers write this step after all).

        Throughput is measured over windows of ``trainer.log_every_n_steps`` optimizer steps: tokens
        counted on the device in the window / host wall time of the window. Per-step host timing
        would be meaningless on a GPU, where the host runs ahead of the kernels; over a window the
        queue's lead cancels out.
        """
        step = self.trainer.global_step
        every = max(1, int(self.trainer.log_every_n_steps or 1))
        now = time.perf_counter()
        if self._window is None:
            self._window = (step, now, self._tokens.clone())
        elif step != self._window[0] and step % every == 0:
            start_step, t0, tok0 = self._window
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
        """What the progress bar shows of the last step, named: ``train/loss``, or with label smoothing
        the smoothed objective as ``train/loss (label-smoothed)`` and the unsmoothed ``train/nll`` beside
        it (the number on the footing of ``val/loss``)."""
        if not getattr(self.criterion, "label_smoothing", 0.0) or self._step_nll is None:
            return {"train/loss": float(self._step_loss)}
        pair = torch.stack((self._step_loss.detach(), self._step_nll.detach())).tolist()  # one host read
        return {"train/loss (label-smoothed)": pair[0], "train/nll": pair[1]}

    def on_train_epoch_start(self) -> None:
        self._late_logs = False  # Lightning's per-hook entries of the last epoch are gone

    def last_step_metrics(self) -> dict[str, float]:
        """The last optimizer step's ``train/loss``, ``train/nll`` and ``perf/tokens_seen`` (and
        ``perf/tokens_per_s`` of the last complete window), read on the host: what ``fit`` ended on,
        whether or not that step was logged (a stop at a validation, ``trainer.log_every_n_steps=0``).
        The driver writes them to ``metrics.json``. Empty before the first step."""
        if self._step_loss is None:
            return {}
        out = {"train/loss": float(self._step_loss), "perf/tokens_seen": float(self._tokens)}
        if self._step_nll is not None:
            out["train/nll"] = float(self._step_nll)
        if self._rate is not None:
            out["perf/tokens_per_s"] = float(self._rate)
        return out

    def on_train_start(self) -> None:
        if self.trainer.ckpt_path:  # resumed: the configured optimizer settings over the restored ones
            self._apply_configured_optimizer()
        self._window, self._rate = None, None
        self._watched, self._step_logged, self._late_logs = None, None, False
        self._step_window = None
        if self._step_norm is not None:
            self._step_norm = self._step_norm.to(self.device)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip gradients (``trainer.gradient_clip_val``, norm or value), also with a fused optimizer
        under mixed precision.

        Lightning's mixed-precision plugin refuses to clip when the optimizer unscales gradients
        itself (``fused=True``), because with a ``GradScaler`` (``16-mixed``) the gradients it would
        clip are still scaled. Here they are unscaled first (the scaler records that, and its
        ``step`` then passes no scale to the fused kernel, only the inf/NaN flag); under
        ``bf16-mixed`` there is no scaler and nothing to unscale. Every other case is Lightning's own
        ``clip_gradients``.
        """
        if not gradient_clip_val:
            return
        from lightning.pytorch.plugins.precision import MixedPrecision, Precision
        from lightning.pytorch.utilities import GradClipAlgorithmType

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
        self.tokens_seen = int(self._all_reduce([float(self.tokens_seen)])[0])  # over all ranks

    def configure_model(self) -> None:
        """FSDP2 (``trainer=fsdp``): shard every Transformer layer, then the rest (embeddings, head).

        Runs only under a strategy that sets ``device_mesh`` (Lightning's ModelParallelStrategy);
        idempotent, since Lightning calls it again for ``test`` after ``fit``.
        """
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
        from xformer.train.optim import build_optimizer

        opt = build_optimizer(self.optimizer_factory, self.model)  # optim=adamw: weight decay by parameter group
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_lambda)
        # this run's settings, before Lightning restores a checkpoint's over them (see on_train_start)
        self._configured = (
            [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
            [copy.deepcopy(vars(f)) if hasattr(f, "__dict__") else None for f in sched.lr_lambdas],
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _apply_configured_optimizer(self) -> None:
        """Make this run's optimizer settings and LR schedule the ones a resumed run trains with.

        Lightning restores the checkpoint's optimizer (its moments, and its hyperparameters: ``lr``,
        betas, weight decay ...) and ``LambdaLR``'s state (``base_lrs``, and the attributes of a
        schedule object such as :class:`~xformer.train.schedules.Schedule`'s warm-up and total
        steps). A run resumed with ``optim.lr=0.001`` from a checkpoint trained at 0.01 would record
        0.001 and train at 0.01. This puts the configured values back over the restored ones,
        keeps the moments and the step count, and sets each group's ``lr`` to what the configured
        schedule gives at the restored step; with unchanged settings every value is the restored one.
        """
        groups, lambdas = getattr(self, "_configured", (None, None))
        if groups is None:
            return
        for opt in self.trainer.optimizers:
            for group, conf in zip(opt.param_groups, groups, strict=False):
                group.update({k: v for k, v in conf.items() if k != "lr"})
        for config in self.trainer.lr_scheduler_configs:
            sched = config.scheduler
            if not isinstance(sched, torch.optim.lr_scheduler.LambdaLR):
                continue
            for fn, state in zip(sched.lr_lambdas, lambdas, strict=False):
                if state is not None:
                    fn.__dict__.update(copy.deepcopy(state))
            sched.base_lrs = [g["initial_lr"] for g in sched.optimizer.param_groups]
            for group, base, fn in zip(sched.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas, strict=True):
                group["lr"] = base * fn(sched.last_epoch)

    # -- evaluation ---------------------------------------------------------------------------
    def _eval_step(self, batch: dict, prefix: str, decode: bool) -> None:
        """Per-example NLL sum, token count, correct tokens (and decoded text), keyed by ``batch["idx"]``:
        under DDP the sampler repeats examples to even out ranks, and :meth:`_eval_end` keeps each
        ``idx`` once, so sums and sequence metrics equal the single-process values.

        Examples longer than the model's positions are cut to fit (the model's ``fit_to_positions``)
        and reported by :meth:`_eval_end` in a warning."""
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
        """:meth:`generate`; with an FSDP2-sharded model, every shard unit is gathered once before and
        resharded after, since ranks decode for different numbers of steps (per-forward all-gathers
        would not match up across ranks)."""
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
        """Decoded, detokenised hypotheses for a batch, one string per example: the model's
        :meth:`~xformer.model.ModelBase.generate` under the ``decode`` settings (greedy or beam).

        No decoder emits PAD or BOS (see :mod:`xformer.model.decoding`); the encoder-only tagger
        predicts only ordinary labels (never PAD, BOS or EOS).
        """
        cfg = self.decode_cfg
        ids = self.model.generate(
            batch,
            self.bos_id,
            self.eos_id,
            self.pad_id,
            cfg["max_len_a"],
            cfg["max_len_b"],
            cfg["beam_size"],
            cfg["alpha"],
            logits=logits,
        )
        return [self.detokenize(x) for x in ids]

    def _eval_end(self, prefix: str, suffix: str = "") -> dict[str, float]:
        acc = self._eval.pop(prefix, None)
        if acc is None:
            return {}
        if acc.get("cut"):
            cut = sorted(set(acc["cut"]))
            log.warning(
                "%s%s: %d example(s) longer than the model's %s positions (model.max_len) were cut to "
                "fit; example ids (0-based): %s%s",
                prefix,
                suffix,
                len(cut),
                getattr(self.model, "position_limit", None),
                ", ".join(map(str, cut[:20])),
                " …" if len(cut) > 20 else "",
            )
        rows, texts = self._gather_examples(acc)
        out, signature = corpus_metrics(rows, texts, self.seq_metrics, prefix, suffix)
        self.bleu_signature = signature or self.bleu_signature
        for key, val in out.items():
            # every rank holds the value reduced over all ranks (corpus_metrics over _gather_examples): Lightning's
            # advice to log it with sync_dist=True (an average of equal values) does not apply to these keys
            warnings.filterwarnings(
                "ignore",
                message=rf"It is recommended to use `self\.log\({re.escape(repr(key))}, \.\.\., sync_dist=True\)`",
                category=PossibleUserWarning,
            )
            # as a float64 CPU tensor: Lightning keeps float64 as it is (a Python float would become
            # float32), so callback metrics, checkpoint scores, test results, the CSV/W&B logs and
            # metrics.json all carry the exact value; batch_size=1 so the epoch mean is the value itself
            self.log(key, torch.tensor(val, dtype=torch.float64), sync_dist=False, rank_zero_only=False, batch_size=1)
        return out

    def _all_reduce(self, values: list[float]) -> list[float]:
        """Sum ``values`` over distributed ranks (identity in a single process)."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self._attached() and self.trainer.world_size > 1:
            t = self.trainer.strategy.reduce(t, reduce_op="sum")
        return t.tolist()

    def _gather_examples(self, acc: dict) -> tuple[list[tuple[float, int, int]], dict[int, tuple[str, str]]]:
        """Every rank's per-example ``(nll, n, correct)`` rows and ``idx -> (hyp, ref)`` texts, each
        example once (the first copy; copies padded in by the distributed sampler are identical)."""
        local = (acc["idx"], acc["nll"], acc["n"], acc["correct"], acc["text"])
        parts = [local]
        if self._attached() and self.trainer.world_size > 1:
            import torch.distributed as dist

            parts = [None] * self.trainer.world_size
            dist.all_gather_object(parts, local)
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
        rank = self.trainer.global_rank if self._attached() else 0
        self._eval_step(batch, "val", decode=limit is None or batch_idx * world + rank < limit)

    def on_validation_epoch_end(self) -> None:
        self._eval_end("val")
        self._log_data_epoch()

    @override
    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, f"test#{dataloader_idx}", decode=True)

    def on_test_epoch_end(self) -> None:
        self._log_data_epoch()
        for i, name in enumerate(self.test_split_names):
            acc = self._eval.pop(f"test#{i}", None)
            if acc is None:
                continue
            self._eval["test"] = acc
            self._eval_end("test", "" if name == "test" else f"@{name}")
