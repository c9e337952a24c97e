"""Test callbacks that stop a ``run.py`` job after a given number of training micro-batches, the way
a real stop would: ``SigtermAt`` sends the process SIGTERM (as SLURM preemption does; the run stops at
the end of the optimizer step in flight and ``StopCheckpoint`` saves), ``TimeUpAt`` makes Lightning's ``max_time`` timer
expire (``trainer.max_time`` must be set so the timer exists), ``SigkillAt`` kills the process with
SIGKILL as a crash, the OOM killer or a lost node does (nothing runs after it: the job folder keeps
what the periodic ``last.ckpt`` saved before)."""

from __future__ import annotations

import os
import signal

import lightning as L
from lightning.pytorch.callbacks import Timer
from typing_extensions import override


class SigtermAt(L.Callback):
    """Send SIGTERM to this process as its ``batches``-th training micro-batch starts (the signal arrives
    while that micro-batch is in flight)."""

    def __init__(self, batches: int) -> None:
        self.batches, self.seen = int(batches), 0

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        self.seen += 1
        if self.seen == self.batches:
            os.kill(os.getpid(), signal.SIGTERM)


class TimeUpAt(L.Callback):
    """Make the trainer's ``max_time`` run out during this process's ``batches``-th micro-batch."""

    def __init__(self, batches: int) -> None:
        self.batches, self.seen = int(batches), 0

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        self.seen += 1
        if self.seen == self.batches:
            timers = [cb for cb in trainer.callbacks if isinstance(cb, Timer)]
            assert timers, "TimeUpAt needs trainer.max_time"
            for timer in timers:
                timer._duration = 0.0


class SigkillAt(L.Callback):
    """SIGKILL this process at the start of its ``batches``-th training micro-batch: the batch has
    been fetched (and, by Lightning's prefetching fetcher and any workers, the ones after it) but not
    trained; no callback, checkpoint or log write runs after it."""

    def __init__(self, batches: int) -> None:
        self.batches, self.seen = int(batches), 0

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        self.seen += 1
        if self.seen == self.batches:
            os.kill(os.getpid(), signal.SIGKILL)


class SigintAt(L.Callback):
    """Press Ctrl-C (SIGINT to this process) as its ``batches``-th training micro-batch starts.

    SIGINT gets Python's default handler when this callback is built (before ``fit``), as in a
    terminal, also when the test session runs in the background (which would leave it ignored):
    ``StopCheckpoint`` then installs its own from ``on_train_start``."""

    def __init__(self, batches: int) -> None:
        self.batches, self.seen = int(batches), 0
        signal.signal(signal.SIGINT, signal.default_int_handler)

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        self.seen += 1
        if self.seen == self.batches:
            os.kill(os.getpid(), signal.SIGINT)


class SigtermInValidation(L.Callback):
    """Send SIGTERM to this process as the ``validations``-th validation of ``fit`` starts."""

    def __init__(self, validations: int) -> None:
        self.validations, self.seen = int(validations), 0

    @override
    def on_validation_start(self, trainer, pl_module) -> None:  # noqa: D102
        if trainer.sanity_checking:
            return
        self.seen += 1
        if self.seen == self.validations:
            os.kill(os.getpid(), signal.SIGTERM)


class RaiseAt(L.Callback):
    """Raise ``RuntimeError`` at the end of training step ``step`` when ``enabled`` (a failure inside
    training that no config check can foresee; sweep ``enabled`` to fail one job of several)."""

    def __init__(self, step: int, enabled: bool = True) -> None:
        self.step, self.enabled = int(step), bool(enabled)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: D102
        if self.enabled and trainer.global_step == self.step:
            raise RuntimeError(f"a failure inside training at step {self.step}")


class SignalInValidation(L.Callback):
    """Send ``sig`` (``"SIGTERM"`` or ``"SIGINT"``) as the first batch of the validation after optimizer step
    ``step`` starts (of ``fit``: the signal arrives while that validation runs)."""

    def __init__(self, step: int, sig: str = "SIGTERM") -> None:
        self.step, self.sig, self.sent = int(step), signal.Signals[sig], False
        if self.sig == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    @override
    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:  # noqa: D102
        if not self.sent and trainer.state.fn == "fit" and trainer.global_step == self.step:
            self.sent = True
            os.kill(os.getpid(), self.sig)
