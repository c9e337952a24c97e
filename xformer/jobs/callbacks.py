"""Lightning callbacks that keep long runs safe (all on in ``conf/callbacks/default.yaml``): stop at the first
non-finite loss or gradient norm, save ``last.ckpt`` where training stops (and requeue on SLURM's signal), and write
checkpoints at optimizer steps' ends, atomically. Exact resume as a whole: :mod:`xformer.jobs.resume`."""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint, Timer
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from xformer.data.loader import data_index
from xformer.lightning_compat import request_stop

from . import slurm
from .overrides import resume_command
from .resume import reroot

FIX = (  # what a diverged run tries next
    "Fix: lower optim.lr, raise optim.warmup_steps, keep trainer.gradient_clip_val > 0, "
    "or use trainer.precision=32-true"
)

log = logging.getLogger("xformer")


class NonFiniteLossError(RuntimeError):
    """A training step went non-finite; ``step``: that optimizer step (1-based), ``reason``: ``"non-finite
    train/loss"`` or ``"non-finite gradient norm"`` (the record's ``diverged.reason``)."""

    def __init__(self, message: str, step: int | None = None, reason: str = "non-finite train/loss") -> None:
        super().__init__(message)
        self.step = step
        self.reason = reason


VAL_LOSS = "val/loss"  # its rise above its first value marks a run as diverged


def grad_norm(module: torch.nn.Module) -> torch.Tensor | None:
    """The 2-norm of ``module``'s gradients (this rank's shard of FSDP's), a float32 scalar on the first
    gradient's device; ``None`` without gradients. One fused pass over the gradients (torch's ``get_total_norm``, as
    ``clip_grad_norm_`` computes it), no host sync."""
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in module.parameters()]
    grads = [g for g in grads if g is not None]
    if not grads:
        return None
    return torch.nn.utils.get_total_norm(grads, foreach=True).float()


class NonFiniteLossGuard(L.Callback):
    """Raise :class:`NonFiniteLossError` right after the first optimizer step whose training loss or gradient
    norm (:func:`grad_norm`) is NaN or Inf (at the end of the next micro-batch, or at the checkpoint save or
    validation that comes first), so no checkpoint after it is written (docs/troubleshooting.md, "NaN or Inf
    loss"); the error names that step, the first over all ranks. Keeps ``(step, val/loss)`` of every validation, in the
    checkpoint, for :meth:`divergence`.

    Cost per optimizer step: one pass over the gradients (none under a loss scaler, ``16-mixed``, which skips
    the steps whose gradients overflowed); per micro-batch: a flag kept on the device, copied to the host as its
    work is queued and read there after the next micro-batch's work is queued (on a GPU: a pinned copy and an
    event, no stall), so a run stops one micro-batch after the bad one, naming the bad step; every checkpoint save
    and validation in ``fit`` reads the flag at once. With several ranks, one device all-reduce (max) of the flag
    per micro-batch, so all ranks stop after the same one."""

    def __init__(self) -> None:
        self._last_saved_step: int | None = None
        self._first: dict[str, torch.Tensor] | None = None  # first bad step, epoch, batch, loss, grad norm (device)
        self._pending: tuple[torch.Tensor, Any] | None = None  # the last flag's host copy, its CUDA event (or None)
        self._step_before_batch = 0
        self.validations: list[tuple[int, float]] = []  # (optimizer step, val/loss) of every validation

    def state_dict(self) -> dict[str, Any]:
        return {"validations": [list(v) for v in self.validations]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.validations = [(int(s), float(v)) for s, v in state_dict.get("validations", [])]

    @override
    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._check(trainer)  # no validation of a failed step's weights

    @override
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or VAL_LOSS not in trainer.callback_metrics:
            return
        self.forget_validation(step := int(trainer.global_step))
        self.validations.append((step, float(trainer.callback_metrics[VAL_LOSS])))

    def forget_validation(self, step: int) -> None:
        """Drop the validation after ``step`` (one the resumed run's schedule does not have)."""
        self.validations = [v for v in self.validations if v[0] != step]

    def divergence(self) -> dict[str, Any] | None:
        """``{"step", "reason", "first", "last"}`` when the last ``val/loss`` is non-finite or above the first
        (``step``: the first validation from which every later one stayed bad), else ``None``."""
        if not self.validations:
            return None
        first_step, first = self.validations[0]
        last = self.validations[-1][1]

        def bad(v: float) -> bool:
            return not math.isfinite(v) or v > first

        if not bad(last):
            return None
        k = len(self.validations) - 1
        while k > 0 and bad(self.validations[k - 1][1]):
            k -= 1
        step = self.validations[k][0]
        why = (
            f"{VAL_LOSS} is {last} (non-finite) at step {self.validations[-1][0]}"
            if not math.isfinite(last)
            else f"{VAL_LOSS} rose above its first validation ({first:.4g} at step {first_step}) from step "
            f"{step} on and ended at {last:.4g}"
        )
        return {"step": step, "reason": why, "first": first, "last": last}

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._first, self._pending = None, None

    @override
    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        if trainer.state.fn == "fit":
            self._check(trainer)  # before the file is written: a poisoned state is never saved
        self._last_saved_step = trainer.global_step

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check(trainer)

    @override
    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        self._step_before_batch = trainer.global_step

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs: Any, batch, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):
            return
        loss = loss.detach().float().mean()
        stepped = trainer.global_step != self._step_before_batch  # gradients are complete: their norm counts
        # a loss scaler (16-mixed) skips the steps whose gradients overflowed: their norm is no divergence
        scaled = getattr(trainer.precision_plugin, "scaler", None) is not None
        norm = grad_norm(pl_module) if stepped and not scaled else None
        norm = norm.to(loss.device) if norm is not None else torch.zeros_like(loss)
        if self._first is None or self._first["loss"].device != loss.device:
            minus = torch.full((), -1, dtype=torch.int64, device=loss.device)
            self._first = {"step": minus, "epoch": minus.clone(), "batch": minus.clone(), "loss": loss, "grad": norm}
        new = ~(torch.isfinite(loss) & torch.isfinite(norm)) & (self._first["step"] < 0)  # stays on the device
        epoch, index = data_index(trainer, batch_idx)
        step = self._step_before_batch + 1  # the optimizer step this micro-batch belongs to
        for key, value in (("step", step), ("epoch", epoch), ("batch", index), ("loss", loss), ("grad", norm)):
            self._first[key] = torch.where(new, value, self._first[key])
        if self._pending is not None:  # the last micro-batch's flag, copied to the host once its work was queued
            host, done = self._pending
            if done is not None:
                done.synchronize()  # that micro-batch's work only: this one's stays queued on the GPU
            self._check(trainer, bool(host.numpy() > 0))  # host memory: no device read
        flag = (self._first["step"] >= 0).to(torch.int32)
        if trainer.world_size > 1:  # any rank's, on the device: every rank stops after the same micro-batch
            flag = trainer.strategy.reduce(flag, reduce_op=torch.distributed.ReduceOp.MAX)
        cuda = flag.device.type == "cuda"
        host = torch.empty((), dtype=torch.int32, pin_memory=cuda)
        host.copy_(flag, non_blocking=cuda)
        done = torch.cuda.Event() if cuda else None
        if done is not None:
            done.record()
        self._pending = (host, done)

    def _check(self, trainer: L.Trainer, bad: bool | None = None) -> None:
        """Raise :class:`NonFiniteLossError` when any rank has seen a non-finite step (``bad``: all ranks' flag,
        already read; ``None``: read and reduce it now, a host sync)."""
        if self._first is None:
            return
        if bad is None:
            bad = bool(self._first["step"] >= 0)
            if trainer.world_size > 1:
                bad = trainer.strategy.reduce_boolean_decision(bad, all=False)
        if not bad:
            return
        keys = ("step", "epoch", "batch", "loss", "grad")
        row = torch.stack([self._first[k].double() for k in keys])
        rows = trainer.strategy.all_gather(row).reshape(-1, len(keys)) if trainer.world_size > 1 else row[None]
        # the first bad step over all ranks (a rank that saw none has step -1), one host read
        _, rank, first = min((v[0], r, v) for r, v in enumerate(rows.tolist()) if v[0] >= 0)
        f, step = dict(zip(keys, first, strict=True)), int(first[0])
        on = f", rank {rank}" if trainer.world_size > 1 else ""
        where = f"at step {step} (epoch {int(f['epoch'])}, batch {int(f['batch'])}{on})"
        what, reason = f"train/loss is {f['loss']}", "non-finite train/loss"
        if math.isfinite(f["loss"]):
            what, reason = f"the gradient norm is {f['grad']} (train/loss {f['loss']:.4g})", "non-finite gradient norm"
        kept = "No checkpoint had been written yet."
        for path in (getattr(cb, "last_model_path", None) for cb in trainer.checkpoint_callbacks):
            if path and os.path.isfile(path):
                at = f" (step {self._last_saved_step})" if self._last_saved_step is not None else ""
                kept = f"The last good checkpoint {path}{at} was kept; the failed step was not saved."
                break
        raise NonFiniteLossError(f"{what} {where}; training stopped. {kept} {FIX}", step=step, reason=reason)


class StepEnds(L.Callback):
    """Tells whether the training micro-batch that just ended completed an optimizer step (:meth:`stepped`:
    ``global_step`` moved during it), from public hooks."""

    _step_before_batch = 0  # global_step when the current micro-batch started

    def stepped(self, trainer: L.Trainer) -> bool:
        return trainer.global_step != self._step_before_batch

    @override
    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        self._step_before_batch = trainer.global_step


class StepEndCheckpoint(StepEnds, ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` whose saves by ``every_n_train_steps`` or ``train_time_interval`` fall at
    an optimizer step's end only (after a resume under accumulation Lightning's can save inside a window), written
    by :class:`AtomicCheckpointIO`, keeping a moved folder's best checkpoint (:func:`~xformer.jobs.resume.reroot`);
    else ``ModelCheckpoint``'s arguments, state and files (docs/troubleshooting.md, "Resuming a killed run")."""

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs: Any, batch, batch_idx: int) -> None:
        if self.stepped(trainer):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # unless another CheckpointIO is configured
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()  # every checkpoint of the run, written atomically

    @override
    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        reroot(trainer, self, checkpoint)  # a moved job folder keeps its best checkpoint


class StopCheckpoint(StepEndCheckpoint):
    """``last.ckpt`` every ``every_n_train_steps`` optimizer steps and where training stops: on SIGTERM, Ctrl-C,
    SLURM's requeue signal (then requeue the job) and when ``fit`` ends (docs/troubleshooting.md, "Ctrl-C" and
    "Preemption"). The handlers only mark this rank; the ranks agree at each optimizer step's end and stop after the
    same step through Lightning's ``SIGTERMException``, the one exception this saves on. Lightning's SIGTERM handler
    is replaced during ``fit``: it stops after any micro-batch and deadlocks in a collective (Lightning#20806).

    Args:
        save_on_train_end: save ``last.ckpt`` when ``fit`` ends normally.
        kwargs: ``ModelCheckpoint``'s (``dirpath``, ``every_n_train_steps``, ``save_top_k``, ...)."""

    def __init__(self, save_on_train_end: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.save_on_train_end = save_on_train_end
        self._previous: dict[int, Any] = {}  # the handlers this fit replaced
        self._sigints = 0  # Ctrl-C presses during this fit
        self._marked = False  # a stop signal reached this rank, not yet acted on
        self._held = False  # a stop requested before this validation, requested again at its end
        self._slurm: int | None = None  # SLURM's requeue signal, installed
        self._engine_handler: Any = None
        self._received: int | None = None  # SLURM's requeue signal, received
        self._requeue_registered = False

    @property
    def received_signal(self) -> str | None:
        """SLURM's requeue signal once received (``"SIGUSR2"``/``"SIGUSR1"``), else None."""
        return None if self._received is None else signal.Signals(self._received).name

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self._slurm is not None or "SLURM_JOB_ID" not in os.environ:  # no requeue signal outside SLURM
            return
        signum = slurm.submitit_signal() or slurm.lightning_requeue_signal(trainer)
        if signum is None or threading.current_thread() is not threading.main_thread():
            return
        self._engine_handler = signal.signal(signum, self._on_slurm_signal)
        self._slurm = signum

    def _on_slurm_signal(self, signum: int, _frame: Any) -> None:
        first = self._received is None
        self._received = signum
        if first and slurm.global_rank() == 0:
            then = "saving last.ckpt after the step in flight, then requeueing this job"
            log.warning("SLURM sent %s: %s", signal.Signals(signum).name, then)

    def _path(self) -> Path | None:
        return Path(self.dirpath) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}" if self.dirpath else None

    # -- Ctrl-C and SIGTERM ---------------------------------------------------------------------
    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._sigints, self._marked = 0, False
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(_signum: int) -> None:
            self._marked = True  # acted on at the end of the optimizer step in flight, or of this validation

        def on_sigint(signum, _frame) -> None:
            self._sigints += 1
            if self._sigints > 1:
                print("\nsecond Ctrl-C: quitting now, nothing more saved", file=sys.stderr, flush=True)
                os._exit(130)
            line = "\nCtrl-C: stopping after this optimizer step and saving last.ckpt (Ctrl-C again to quit at once)"
            print(line, file=sys.stderr, flush=True)
            stop(signum)

        def on_sigterm(signum, _frame) -> None:
            log.info("received SIGTERM: stopping after this optimizer step and saving last.ckpt")
            if not self._marked and trainer.strategy.launcher is not None:
                trainer.strategy.launcher.kill(signum)  # the ranks Lightning started (none under torchrun/srun)
            stop(signum)

        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # else ignored or someone else's
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_sigint)
        self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, on_sigterm)

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs: Any, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)  # the periodic last.ckpt
        if (signal.SIGTERM not in self._previous and self._slurm is None) or not self.stepped(trainer):
            return  # no handlers of ours, or inside an accumulation window
        # the ranks get a signal at different moments: they agree at the end of the same step
        if trainer.strategy.reduce_boolean_decision(self._marked or self._received is not None, all=False):
            request_stop(trainer)

    # A stop waits for the validation it meets: Lightning's evaluation loop would stop after one batch and save
    # a checkpoint that a resumed run takes for a finished validation (Lightning restarts after it).
    @override
    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._held = trainer.state.fn == "fit" and not trainer.sanity_checking and trainer.received_sigterm
        if self._held:  # requested at the end of the step this validation follows
            request_stop(trainer, False)

    @override
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)  # this validation's checkpoints first
        arrived = trainer.world_size == 1 and (self._marked or self._received is not None)  # a signal meanwhile
        if trainer.state.fn == "fit" and not trainer.sanity_checking and (self._held or arrived):
            request_stop(trainer)  # Lightning stops right after this validation
        self._held = False

    def _restore_handlers(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
        self._previous = {}

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # ModelCheckpoint's own save at the end is replaced by ``save_on_train_end``'s
        path = self._path()
        if self.save_on_train_end and path is not None and trainer.global_step > 0:
            trainer.save_checkpoint(path)
        self._restore_handlers()

    @override
    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        super().on_exception(trainer, pl_module, exception)  # ModelCheckpoint's save_on_exception, off by default
        try:
            self._save_on_stop(trainer, exception)
        finally:
            self._restore_handlers()
        requeue = self._received is not None and isinstance(exception, SIGTERMException) and slurm.global_rank() == 0
        if requeue and not self._requeue_registered:  # after last.ckpt is saved
            self._requeue_registered = True
            atexit.register(slurm.requeue, self._received, self._engine_handler)

    def _save_on_stop(self, trainer: L.Trainer, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        name = "SIGINT" if self._sigints else self.received_signal or "SIGTERM"
        exception.stop_signal = name  # the signal that stopped training, for the job's outcome
        if trainer.state.fn != "fit":
            # testing a best checkpoint's weights, or validating: keep the last.ckpt training wrote
            return
        what = "Ctrl-C" if name == "SIGINT" else "SIGTERM"
        path = self._path()
        if path is None:
            log.warning("%s at step %d: no checkpoint folder configured, nothing saved", what, trainer.global_step)
            return
        trainer.save_checkpoint(path)
        if trainer.is_global_zero:
            if name in ("SIGTERM", "SIGINT"):
                who, then = what, f"resume with: {resume_command(path.parent.parent)}"
            else:  # SLURM's requeue signal
                who, then = f"{name} (SLURM's requeue signal)", "the requeued job resumes from it by itself"
            log.warning("%s: saved %s at step %d; %s", who, path, trainer.global_step, then)


class OptimizerStepTimer(StepEnds, Timer):
    """Lightning's ``Timer`` (``trainer.max_time``: ``duration``) checked at optimizer steps' ends only, so the
    clock never stops inside an accumulation window; its state key is ``Timer``'s, so elapsed time carries over."""

    def __init__(self, duration: Any, **kwargs: Any) -> None:
        super().__init__(duration=duration, interval="step", **kwargs)

    @property
    @override
    def state_key(self) -> str:
        return Timer.__qualname__

    @override
    def on_train_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self.stepped(trainer):
            super().on_train_batch_end(trainer, *args, **kwargs)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` atomically: a temporary file in the same folder, ``fsync``, ``os.replace``,
    then the folder ``fsync``-ed. On any error ``path`` keeps its previous content and no temporary file is
    left; the error propagates."""
    path = Path(str(path).removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # e.g. platforms without directory fds
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose ``save_checkpoint`` is atomic for local paths; remote ones are Lightning's."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or ("://" in str(path) and not str(path).startswith("file://")):  # remote
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_torch_save(checkpoint, path)
