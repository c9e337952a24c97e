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
    """

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Install the optimizer-step validation decision on ``trainer`` (once; fit only)."""
        if stage != "fit" or getattr(trainer, "_xformer_step_intervals", False):
            return
        trainer._xformer_step_intervals = True
        epoch_loop = trainer.fit_loop.epoch_loop
        lightning_decision = compat.val_check_decision(trainer)

        def should_check_val(data_fetcher: Any) -> bool:
            if (
                epoch_loop.restarting
                and epoch_loop.restarted_on_last
                and compat.batches_that_stepped(trainer) == trainer.global_step
            ):
                # the checkpoint was written after its step was fully counted -- after the step's
                # validation, e.g. when fit ended: nothing to skip (Lightning's skip path assumes a save
                # from inside the validation and would count the step a second time on the step axis)
                return False
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


def _is_final_step(trainer: L.Trainer) -> bool:
    """True after the micro-batch that completes the run's last optimizer step: ``max_steps`` reached,
    or the last batch of the last epoch under ``max_epochs``."""
    if trainer.max_steps is not None and trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        return True
    max_epochs = trainer.max_epochs
    if max_epochs is None or max_epochs == -1:
        return False
    return compat.num_ready_batches_reached(trainer) and trainer.current_epoch + 1 >= max_epochs


class ConsistentResume(L.Callback):
    """Make a checkpoint written when ``fit`` stopped mid-epoch resume where it stopped.

    Lightning marks the running epoch finished when ``max_steps`` (or ``max_time``) ends ``fit`` in its
    middle, and the ``last.ckpt`` written then (``StopCheckpoint``, the final validation's save) stores
    that. Resuming such a checkpoint with a larger ``max_steps`` started the *next* epoch but kept the
    batch position -- step 5 of a 3-batch-epoch run became "epoch 2, batch 2" with other data, while the
    uninterrupted run's step 5 is epoch 1, batch 2. The data loader's own state (epoch, batches done;
    :class:`xformer.data.batching.ResumableDataLoader`) is right, so before Lightning restores its loops
    this rewinds the epoch counters to that epoch when its batches are not all done: Lightning then
    takes the checkpoint for what it is, a stop mid-epoch (the case it restores exactly). Lightning's
    loop state has no hook for this and torchdata's ``StatefulDataLoader`` is not a dependency, so the
    checkpoint's ``loops`` entry is corrected here; other checkpoints are left as they are.

    A stop on an epoch's *last* batch is the other half: Lightning then either skipped the next
    epoch or gave the finished one an extra batch. Such a checkpoint is rewritten as "epoch ``e``
    done, nothing of ``e + 1`` started", and :class:`OptimizerStepIntervals` takes no validation
    decision at a restart from a checkpoint written after its step was fully counted (Lightning
    would otherwise shift the step axis by one when that step was a validation step). The loader's state carries
    the epoch's length (``epoch_batches``) to tell the two cases apart; older checkpoints lack it and
    are left alone. (Lightning's restored fetch counter is consistent with xformer's sampler skipping
    the consumed batches: the counter starts at the consumed count and the sampler yields the rest.)

    Two more positions: under ``trainer.limit_train_batches`` the epoch's length is the limit (the
    loader stores that, not the sampler's length), so a stop on a shortened epoch's last batch is an
    epoch's end; and a checkpoint written inside an accumulation window (SIGTERM between
    micro-batches) is rewound to the window's start -- the last batch whose update is in the saved
    weights -- so the resumed run accumulates the same micro-batches into the same step.
    """

    @override
    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Make ``checkpoint["loops"]`` agree with the data loader's stored position (see the class docstring)."""
        fit = (checkpoint.get("loops") or {}).get("fit_loop") or {}
        states = (fit.get("state_dict") or {}).get("combined_loader") or []
        progress = fit.get("epoch_progress")
        if not states or not isinstance(states[0], dict) or "batches_done" not in states[0] or not progress:
            return
        epoch, done = int(states[0]["epoch"]), int(states[0]["batches_done"])
        n_batches = int(states[0].get("epoch_batches", 0))
        batch_progress = (fit.get("epoch_loop.batch_progress") or {}).get("current") or {}
        accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
        inside = done % accumulate
        if n_batches and 0 < done < n_batches and inside and int(batch_progress.get("completed", -1)) == done:
            # saved inside an accumulation window (SIGTERM between micro-batches): the weights hold
            # no update from the window's first `inside` micro-batches, so the data position is the
            # last batch whose update they do hold -- the resumed run trains the whole window again
            done -= inside
            states[0]["batches_done"] = done
            totals = (fit.get("epoch_loop.batch_progress") or {}).get("total") or {}
            for counters in (batch_progress, totals):
                for key in ("ready", "started", "processed", "completed"):
                    if key in counters:
                        counters[key] = int(counters[key]) - inside
        if n_batches and done >= n_batches:  # stopped on an epoch's last batch: the next epoch starts
            if int(batch_progress.get("completed", -1)) != done:
                return  # saved inside the last batch (periodic save): Lightning restores that itself
            for counters in (progress["current"], progress["total"]):
                for key in ("ready", "started", "processed", "completed"):
                    counters[key] = epoch + 1
            for key in ("ready", "started", "processed", "completed"):
                batch_progress[key] = 0
            fit["epoch_loop.batch_progress"]["is_last_batch"] = False
            return
        if not n_batches:
            return  # an older checkpoint without the epoch length
        if done <= 0 or int(batch_progress.get("completed", done)) != done:
            return  # at an epoch start, or a position this callback cannot vouch for
        current, total = progress["current"], progress["total"]
        finished = int(current["processed"])
        if finished <= epoch or int(current["started"]) != epoch + 1:
            return  # the epoch is not marked finished: Lightning restores it as it is
        shift = finished - epoch
        for counters in (current, total):
            counters["processed"] = int(counters["processed"]) - shift
            counters["completed"] = int(counters["completed"]) - shift
