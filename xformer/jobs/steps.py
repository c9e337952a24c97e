""" "Every N steps" means every N optimizer steps, also under gradient accumulation.

xformer's config documents ``trainer.val_check_interval``, ``trainer.log_every_n_steps`` and the
checkpoint callbacks' ``every_n_train_steps`` as counts of *training steps*, i.e. optimizer updates.
Lightning agrees for checkpoints (``ModelCheckpoint`` tests ``trainer.global_step``) and logging, but
not for validation when ``trainer.accumulate_grad_batches > 1``:

* an integer ``val_check_interval`` counts *batches* (``total_batch_idx``), so with 3-batch epochs
  and ``accumulate_grad_batches=2`` (two optimizer steps per epoch: Lightning also steps on an epoch's
  last batch) ``val_check_interval=4`` validated after steps 2, 5 and 8 instead of 4 and 8;
* ``log_every_n_steps`` already counts optimizer steps (the loop's count of stepped batches), and so does the
  step label of every logged row; ``val/*`` rows carry the label of the last trained step.

Lightning has no option for the validation interval (documented in batches), so
:class:`OptimizerStepIntervals` replaces that one decision on the running trainer: validation runs
after the micro-batch that completes an optimizer step whose number is a multiple of the interval.
The other reasons Lightning validates for (an early stop, ``val_check_interval`` as a time or a
fraction of an epoch) are left to Lightning.

It also validates once more after the last optimizer step (``max_steps`` or the end of the last of
``max_epochs``) when that step is not a validation step anyway, so the objective -- a validation
metric -- and the best checkpoint always exist: ``max_steps=5`` with ``val_check_interval=500``
used to finish with no objective value. The driver installs the callback in every run.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
from typing_extensions import override

from xformer.jobs import lightning_compat as compat

__all__ = ["OptimizerStepIntervals", "optimizer_steps_in_epoch"]


def optimizer_steps_in_epoch(batches_done: int, accumulate: int) -> int:
    """Optimizer steps taken after ``batches_done`` batches of an epoch with ``accumulate`` batches per
    step (Lightning restarts the accumulation window at every epoch and steps on an epoch's last batch,
    so a trailing partial window counts as one step once its last batch is done)."""
    return math.ceil(batches_done / max(1, accumulate))


class OptimizerStepIntervals(L.Callback):
    """Make an integer ``trainer.val_check_interval`` count optimizer steps, and validate after the last
    step when it is not a validation step (see the module docstring).

    With ``check_val_every_n_epoch=None`` (xformer's default) the interval counts the run's optimizer
    steps (``global_step``); with ``check_val_every_n_epoch`` set it counts the steps inside the
    epoch, as Lightning's batch count does. Nothing changes without gradient accumulation.

    The decision is a function of the optimizer step (and the budget, for the step after the last
    one): a resumed run validates after the same steps as an uninterrupted one, whichever
    checkpoint it resumed from. The one other answer is given at a restart, before the first
    resumed batch, about the checkpoint's own step (see ``should_check_val``).
    """

    def __init__(self) -> None:
        self._trained = False  # this fit has trained a batch

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Install the optimizer-step validation decision on ``trainer`` (once; fit only)."""
        if stage != "fit" or getattr(trainer, "_xformer_step_intervals", False):
            return
        trainer._xformer_step_intervals = True
        epoch_loop = trainer.fit_loop.epoch_loop
        lightning_decision = compat.val_check_decision(trainer)
        self._trained = False

        def should_check_val(data_fetcher: Any) -> bool:
            if not self._trained and epoch_loop.restarting and epoch_loop.restarted_on_last:
                # asked at a restart, before any batch of this fit: a checkpoint written after its
                # batch completed. Inside that step's validation (an interval's or the extra one after
                # the last step) Lightning has not yet counted the step on the log axis (its
                # logger-step counter is one behind): answering "validation due" makes it skip the
                # validation it already ran and count the step, so the next step is logged under its
                # own label. Written after the step was fully counted (a SIGTERM or Ctrl-C stop, the
                # end of fit): nothing to skip, or the step would be counted twice. After the first
                # resumed batch the loop still reads "restarting" until that iteration ends: the
                # decision there is the schedule's, like every other step's.
                return compat.batches_that_stepped(trainer) < trainer.global_step
            due = interval_decision(data_fetcher)
            if not due and not compat.should_accumulate(trainer) and _is_final_step(trainer):
                return True  # training ends off a validation step: validate once more
            return due

        def interval_decision(data_fetcher: Any) -> bool:
            interval = trainer.val_check_interval
            if (
                not isinstance(interval, int)
                or isinstance(interval, bool)
                or compat.val_check_time_interval(trainer) is not None
            ):
                return lightning_decision(data_fetcher)  # a fraction of an epoch or a time: Lightning's
            if not compat.should_check_val_epoch(trainer):
                return False
            if trainer.should_stop and compat.can_stop_early(trainer):
                return True  # early stopping validates once more, as in Lightning
            if compat.should_accumulate(trainer):
                return False  # this micro-batch did not finish an optimizer step
            if trainer.check_val_every_n_epoch is None:
                steps = trainer.global_step
            else:
                steps = optimizer_steps_in_epoch(
                    epoch_loop.batch_progress.current.ready, trainer.accumulate_grad_batches
                )
            return steps > 0 and steps % interval == 0

        compat.set_val_check_decision(trainer, should_check_val)

    @override
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Note that this fit has trained a batch (the restart question is behind it)."""
        self._trained = True


def _is_final_step(trainer: L.Trainer) -> bool:
    """True after the micro-batch that completes the run's last optimizer step: ``max_steps`` reached,
    or the last batch of the last epoch under ``max_epochs``."""
    if trainer.max_steps is not None and trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        return True
    max_epochs = trainer.max_epochs
    if max_epochs is None or max_epochs == -1:
        return False
    return compat.num_ready_batches_reached(trainer) and trainer.current_epoch + 1 >= max_epochs
