"""Validation after optimizer steps: every ``trainer.val_check_interval`` steps, and after the last one.

xformer documents ``trainer.val_check_interval``, ``trainer.log_every_n_steps`` and the checkpoint
callbacks' ``every_n_train_steps`` as counts of optimizer steps. Lightning agrees for checkpoints and
logging, but an integer ``val_check_interval`` counts batches: with 3-batch epochs and
``accumulate_grad_batches=2`` (Lightning also steps on an epoch's last batch) ``val_check_interval=4``
would validate after steps 2, 5 and 8 instead of 4 and 8. Lightning has no option or hook for that
decision, so :class:`OptimizerStepIntervals` replaces it on the running trainer (the one private
name it uses, :mod:`xformer.lightning_compat`); everything it reads is public trainer state.

It also validates after the last optimizer step (``max_steps``, or the end of the last of
``max_epochs``) when that step is not a validation step anyway, so the objective and the best
checkpoint always exist (``max_steps=5`` with ``val_check_interval=500``). When a finished job is
resumed with a larger budget, that validation is not on the new budget's schedule:
:meth:`OptimizerStepIntervals.on_train_start` takes it back from the job's records (the CSV history,
the divergence guard), so they read as the uninterrupted run's.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
from typing_extensions import override

from xformer import lightning_compat as compat

__all__ = ["OptimizerStepIntervals", "optimizer_steps_in_epoch"]


def optimizer_steps_in_epoch(batches_done: int, accumulate: int) -> int:
    """Optimizer steps taken after ``batches_done`` batches of an epoch with ``accumulate`` batches per
    step (Lightning restarts the accumulation window at every epoch and steps on an epoch's last batch,
    so a trailing partial window counts as one step once its last batch is done)."""
    return math.ceil(batches_done / max(1, accumulate))


def _step_interval(trainer: L.Trainer) -> int | None:
    """The integer ``val_check_interval`` (optimizer steps); None for a fraction of an epoch or a time."""
    interval = getattr(trainer, "val_check_interval", None)  # unset when it is a time
    return interval if isinstance(interval, int) and not isinstance(interval, bool) else None


def _budget_reached(trainer: L.Trainer) -> bool:
    """True once the run's last optimizer step is done: ``max_steps`` reached, or the last batch of the
    last epoch under ``max_epochs``."""
    if trainer.max_steps is not None and trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        return True
    if trainer.max_epochs is None or trainer.max_epochs == -1 or trainer.current_epoch + 1 < trainer.max_epochs:
        return False
    progress = trainer.fit_loop.epoch_loop.batch_progress
    return progress.is_last_batch or progress.current.ready == trainer.num_training_batches


def _may_stop_early(trainer: L.Trainer) -> bool:
    """True when the fit loop honours ``trainer.should_stop`` now (``min_epochs``/``min_steps`` met)."""
    fit = trainer.fit_loop
    epochs_met = not fit.min_epochs or fit.epoch_progress.current.processed >= fit.min_epochs
    return epochs_met and (not fit.min_steps or trainer.global_step >= fit.min_steps)


class OptimizerStepIntervals(L.Callback):
    """Make an integer ``trainer.val_check_interval`` count optimizer steps, and validate after the last
    step when it is not a validation step (see the module docstring).

    With ``check_val_every_n_epoch=None`` (xformer's default) the interval counts the run's optimizer
    steps (``global_step``); with ``check_val_every_n_epoch`` set it counts the steps inside the
    epoch, as Lightning's batch count does. A fraction of an epoch or a time is left to Lightning.

    At a restart Lightning asks the decision once before the first resumed batch, about the
    checkpoint's own step: "validation due" makes it skip that validation and count the step on the
    log axis. That is right for a checkpoint written inside the step's validation (the step is not
    yet counted there), wrong for one written after it (a stop or the end of ``fit``: it would be
    counted twice), so each checkpoint records which it is (:meth:`state_dict`).
    """

    def __init__(self) -> None:
        self._current: L.Trainer | None = None  # the trainer of this fit
        self._trained = False  # this fit has trained a batch
        self._step_before_batch = 0
        self._restored_in_validation = False

    def state_dict(self) -> dict[str, Any]:
        """``{"in_validation"}``: whether the checkpoint is written inside a validation of ``fit``."""
        return {"in_validation": bool(self._current is not None and self._current.validating)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored_in_validation = bool(state_dict.get("in_validation", False))

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Install the optimizer-step validation decision on ``trainer`` (fit only)."""
        epoch_loop = trainer.fit_loop.epoch_loop
        lightning_decision = compat.val_check_decision(trainer)
        self._current, self._trained = trainer, False
        if stage != "fit" or getattr(lightning_decision, "__self__", None) is not epoch_loop:
            return  # not fitting, or installed already

        def should_check_val(data_fetcher: Any) -> bool:
            if not self._trained and epoch_loop.restarting and epoch_loop.restarted_on_last:
                return self._restored_in_validation  # the restart question (class docstring)
            stepped = trainer.global_step != self._step_before_batch  # this micro-batch ended a step
            return interval_decision(data_fetcher, stepped) or (stepped and _budget_reached(trainer))

        def interval_decision(data_fetcher: Any, stepped: bool) -> bool:
            interval = _step_interval(trainer)
            if interval is None:
                return lightning_decision(data_fetcher)  # a fraction of an epoch or a time: Lightning's
            epochs = trainer.check_val_every_n_epoch
            if not trainer.enable_validation or (epochs is not None and (trainer.current_epoch + 1) % epochs):
                return False
            if trainer.should_stop and _may_stop_early(trainer):
                return True  # early stopping validates once more, as in Lightning
            if not stepped:
                return False
            if epochs is None:
                steps = trainer.global_step
            else:
                steps = optimizer_steps_in_epoch(
                    epoch_loop.batch_progress.current.ready, trainer.accumulate_grad_batches
                )
            return steps > 0 and steps % interval == 0

        compat.set_val_check_decision(trainer, should_check_val)

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Resumed with a larger budget from a step validated only as the last step of the shorter one:
        take that validation back from the loggers and callbacks that keep one (``forget_validation``)."""
        step, interval = trainer.global_step, _step_interval(trainer)
        if step == 0 or interval is None or trainer.check_val_every_n_epoch is not None:
            return
        if step % interval == 0 or _budget_reached(trainer):
            return
        for keeper in [*trainer.loggers, *trainer.callbacks]:
            if callable(getattr(keeper, "forget_validation", None)):
                keeper.forget_validation(step)

    @override
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Note the step before this micro-batch (it completes a step when ``global_step`` moves)."""
        self._trained, self._step_before_batch = True, trainer.global_step
