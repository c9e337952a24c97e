"""Exact resume: everything that lets a stopped run continue as if it had never stopped.

**The guarantee.** A training job restarted in its own folder with ``ckpt_path=last`` (or any
checkpoint inside that folder) trains, from the checkpoint's step on, the same batches in the same
order, with the same epoch numbers, dropout masks, learning rate, loss normaliser and
``tokens_seen`` as the uninterrupted run -- on CPU with ``trainer.deterministic=true`` its loss curve
and final weights are identical -- whichever checkpoint it resumes from (the periodic ``last.ckpt``,
a ``best-<step>.ckpt``, the SIGTERM/Ctrl-C save, the end of ``fit`` or of ``max_time``, the last save
before a SIGKILL) and wherever that checkpoint fell (inside an epoch, on an epoch's last batch, at the
end of an epoch shortened by ``trainer.limit_train_batches``, between the micro-batches of an
accumulation window, with ``data.num_workers`` > 0). A SIGKILL loses at most the steps since the last
periodic save. The job's CSV history and W&B run read like one run.
(Tested by ``tests/reliability/test_resume_matrix.py`` and ``test_resume_positions.py``.)

Where each piece of state lives:

=========================  ======================================================================
state                      stored / restored by
=========================  ======================================================================
weights, optimizer,        Lightning's checkpoint (``state_dict``, ``optimizer_states``,
LR schedule, global step   ``lr_schedulers``, ``loops``), written atomically
                           (:mod:`xformer.jobs.callbacks`)
data position              :class:`xformer.data.loader.ResumableDataLoader`: the epoch and the
                           batches of it the trainer consumed, restored through the batch
                           sampler's ``resume(epoch, batches_done)`` (:mod:`xformer.data.batching`)
loop progress              :class:`ConsistentResume` (here): makes Lightning's epoch/batch counters
                           agree with the data position for the positions Lightning stores
                           inconsistently (stop mid-epoch at ``max_steps``, stop on an epoch's last
                           batch, a cut accumulation window)
validation schedule        :class:`xformer.jobs.resume.OptimizerStepIntervals`: a function of the
                           step; each checkpoint records whether it was written inside a
                           validation (the answer to Lightning's restart question); a larger budget
                           takes back the shorter budget's last-step validation
dropout RNG                :class:`xformer.jobs.callbacks.StepSeed`: reseeded per batch from
                           ``(seed, epoch, batch, rank)``, so no RNG state needs storing
tokens, loss normaliser    the module's ``on_save_checkpoint`` (``checkpoint["xformer"]``), minus
                           the micro-batches of a cut accumulation window
logs                       :class:`ResumableCSVLogger` (here) and the W&B run id
                           (:func:`xformer.jobs.wandb_run.wandb_resume_kwargs`)
which checkpoint           :func:`own_checkpoint` (here); a sweep's jobs: :mod:`xformer.jobs.sweep_resume`
best checkpoint and score  Lightning's ``ModelCheckpoint`` state; :class:`RerootCheckpoints` (here)
of a moved job folder      re-roots its stored paths when the job folder moved or was copied
=========================  ======================================================================

Validation after optimizer steps: every ``trainer.val_check_interval`` steps, and after the last one.

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

import csv
import math
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig
from typing_extensions import override

from xformer import lightning_compat as compat
from xformer.lightning_compat import logger_started

__all__ = [
    "ConsistentResume",
    "OptimizerStepIntervals",
    "RerootCheckpoints",
    "ResumableCSVLogger",
    "checkpoint_step",
    "optimizer_steps_in_epoch",
    "own_checkpoint",
]


# -- loop progress ------------------------------------------------------------------------------
class ConsistentResume(L.Callback):
    """Make Lightning's loop counters in a checkpoint agree with the data loader's stored position.

    Lightning stores three positions inconsistently, and its loop state has no hook to say so:

    * ``max_steps`` (or ``max_time``) ending ``fit`` mid-epoch marks the epoch finished, so a resume
      with a larger budget would start the next epoch at the old batch index: the epoch counters are
      rewound to the loader's epoch (a stop mid-epoch, the case Lightning restores exactly);
    * a stop on an epoch's last batch (or on the last batch of an epoch shortened by
      ``trainer.limit_train_batches``: the loader stores the epoch's length as the trainer runs it)
      is rewritten as "epoch ``e`` done, nothing of ``e + 1`` started";
    * a checkpoint written inside an accumulation window (SIGTERM between micro-batches) is rewound
      to the window's start, the last batch whose update is in the saved weights, so the resumed run
      accumulates the same micro-batches into the same step.

    Checkpoints without the loader's epoch length, or at positions Lightning restores itself, are
    left as they are.
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


# -- a moved job folder ---------------------------------------------------------------------------
def _rerooted(path: Any, old: str, new: str) -> Any:
    """``path`` with its leading folder ``old`` replaced by ``new`` (other values unchanged)."""
    if not isinstance(path, str) or not path:
        return path
    if path == old:
        return new
    prefix = old.rstrip("/\\") + "/"
    return new.rstrip("/") + "/" + path[len(prefix) :] if path.startswith(prefix) else path


class RerootCheckpoints(L.Callback):
    """Keep a moved job's best checkpoint, best score and top-k record when it resumes.

    ``ModelCheckpoint`` stores absolute paths in each checkpoint (its folder, the best and the
    last checkpoint, the top-k files) and on loading drops the best score, the top-k record and
    the last path when its folder differs from the stored one ("The dirpath has changed",
    Lightning#15705). A job folder moved or copied (another path, another machine, a renamed sweep
    folder) and resumed from its own checkpoint then took its next validation as the best, whatever
    its score, and tested that checkpoint. When the checkpoint being loaded lies in a
    ``ModelCheckpoint``'s own folder, this rewrites the stored paths under the stored folder to the
    same places under the current folder before the callback loads them, so it loads everything as
    for a job resumed in place. A checkpoint of another folder (``ckpt_path`` pointing elsewhere)
    is left as it is.
    """

    @override
    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Re-root the stored paths of each ``ModelCheckpoint`` whose folder holds the loaded checkpoint."""
        loaded = trainer.ckpt_path
        states = checkpoint.get("callbacks") or {}
        if not loaded or not isinstance(states, dict):
            return
        here = Path(loaded).resolve().parent
        for cb in trainer.checkpoint_callbacks:
            state = states.get(getattr(cb, "state_key", None))
            dirpath = getattr(cb, "dirpath", None)
            if not isinstance(state, dict) or not dirpath or Path(dirpath).resolve() != here:
                continue
            old = state.get("dirpath")
            if not isinstance(old, str) or not old or old == dirpath:
                continue
            for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
                if key in state:
                    state[key] = _rerooted(state[key], old, dirpath)
            if isinstance(state.get("best_k_models"), dict):
                state["best_k_models"] = {_rerooted(k, old, dirpath): v for k, v in state["best_k_models"].items()}
            state["dirpath"] = dirpath


# -- which checkpoint, and the job's logs --------------------------------------------------------
def own_checkpoint(cfg: DictConfig, out_dir: Path) -> Path | None:
    """The checkpoint this job resumes from when it is one of its own (``ckpt_path=last`` with an
    existing ``checkpoints/last.ckpt``, or a path inside ``out_dir``), else None."""
    from .checkpoints import resolve_ckpt_path

    ckpt = resolve_ckpt_path(cfg, out_dir)
    if cfg.get("mode", "train") != "train" or ckpt is None:
        return None
    try:
        path = Path(ckpt).resolve()
        return path if path.is_file() and path.is_relative_to(out_dir.resolve()) else None
    except OSError:
        return None


def checkpoint_step(path: Path) -> int | None:
    """``global_step`` stored in a Lightning checkpoint (memory-mapped: tensors are not read)."""
    from .checkpoints import UnreadableCheckpoint, read_checkpoint

    try:
        ckpt = read_checkpoint(path)
    except UnreadableCheckpoint:  # Lightning reports it when it loads the checkpoint
        return None
    step = ckpt.get("global_step") if isinstance(ckpt, dict) else None
    return int(step) if step is not None else None


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` that, when ``keep_before`` is set, keeps the rows of an existing
    ``metrics.csv`` whose ``step`` is below it (they are written back first) instead of deleting
    the file. Rows are flushed at every logged step (``flush_logs_every_n_steps=1`` by default), so
    a killed run's file holds everything up to its last step."""

    def __init__(self, *args: Any, keep_before: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("flush_logs_every_n_steps", 1)
        super().__init__(*args, **kwargs)
        self._keep_before = keep_before

    @property
    def experiment(self):
        from lightning.pytorch.utilities.rank_zero import rank_zero_only

        if logger_started(self) or self._keep_before is None or getattr(rank_zero_only, "rank", 0):
            return super().experiment
        path = Path(self.log_dir) / "metrics.csv"
        rows: list[dict] = []
        if path.is_file():
            with open(path, newline="") as f:
                rows = [
                    r for r in csv.DictReader(f) if r.get("step", "").isdigit() and int(r["step"]) < self._keep_before
                ]
        with warnings.catch_warnings():  # "Previous log files ... will be deleted": false, they are kept
            warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
            writer = super().experiment  # deletes metrics.csv (its rows before the checkpoint come back below)
        if rows:
            kept = [{k: (int(v) if k == "step" else v) for k, v in r.items() if v != ""} for r in rows]
            writer.metrics[:0] = kept
            writer.save()
        return writer

    def forget_validation(self, step: int) -> None:
        """Remove the ``val/*`` rows of the validation after optimizer ``step`` (labelled ``step - 1``,
        as Lightning labels them) from ``metrics.csv``: one the resumed run's schedule does not have."""
        from lightning.pytorch.utilities.rank_zero import rank_zero_only

        if getattr(rank_zero_only, "rank", 0):
            return
        writer = self.experiment
        writer.save()
        path = Path(self.log_dir) / "metrics.csv"
        if not path.is_file():
            return
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            rows = [
                r
                for r in reader
                if r.get("step") != str(step - 1) or not any(r.get(k) for k in fields if k.startswith("val/"))
            ]
        with open(path, "w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=fields)
            out.writeheader()
            out.writerows(rows)


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
