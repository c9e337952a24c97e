"""Exact resume. **The guarantee:** a training job restarted in its own folder from any of its checkpoints
trains the same batches in the same order, with the same epochs, dropout, learning rate and ``tokens_seen``, and
validates after the same optimizer steps as the uninterrupted run (docs/troubleshooting.md, "Resuming a killed
run"). Here: the loop counters (:class:`ConsistentResume`), the validation schedule
(:class:`OptimizerStepIntervals`), a moved folder's best checkpoint (:class:`RerootCheckpoints`), the CSV log
(:class:`ResumableCSVLogger`); elsewhere: the data position (:class:`xformer.data.loader.ResumableDataLoader`),
the dropout RNG (:class:`xformer.jobs.callbacks.StepSeed`)."""

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
from xformer.data.loader import optimizer_steps_in_epoch
from xformer.lightning_compat import logger_started

from .checkpoints import resolve_ckpt_path

_COUNTERS = ("ready", "started", "processed", "completed")


# -- loop progress ------------------------------------------------------------------------------
class ConsistentResume(L.Callback):
    """Make Lightning's loop counters in a checkpoint agree with the data loader's stored position.

    The counters matter because Lightning sets the batch sampler's epoch from its own epoch counter at each
    epoch start, and its accumulation windows and ``batch_idx`` from its batch counter. Lightning restores a
    save taken in ``on_train_batch_end`` exactly at any position; two other kinds of save it does not, and
    its loop state has no hook to say so:

    * a save after ``fit`` ends (``max_steps`` or ``max_time`` mid-epoch; also ``ModelCheckpoint(save_last=
      True)``, which saves in ``on_train_end`` when it has not saved before) marks the epoch finished: the
      epoch counters are rewound to the loader's epoch;
    * a save after an epoch's last batch completed (a validation there, SIGTERM; also of an epoch cut by
      ``limit_train_batches``) restores into epoch ``e`` with its batch counter at the end, so epoch
      ``e + 1`` would continue that count: it becomes "epoch ``e`` done, nothing of ``e + 1`` started".

    No checkpoint falls inside an accumulation window: stops (:class:`~xformer.jobs.callbacks.StopCheckpoint`,
    :class:`~xformer.jobs.callbacks.OptimizerStepTimer`) and validations (:class:`OptimizerStepIntervals`)
    wait for the end of the optimizer step in flight."""

    @override
    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        fit = (checkpoint.get("loops") or {}).get("fit_loop") or {}
        states = (fit.get("state_dict") or {}).get("combined_loader") or []
        progress = fit.get("epoch_progress")
        if not states or not isinstance(states[0], dict) or "batches_done" not in states[0] or not progress:
            return
        epoch, done = int(states[0]["epoch"]), int(states[0]["batches_done"])
        n_batches = int(states[0].get("epoch_batches", 0))
        batch_progress = (fit.get("epoch_loop.batch_progress") or {}).get("current") or {}
        if n_batches and done >= n_batches:  # stopped on an epoch's last batch: the next epoch starts
            if int(batch_progress.get("completed", -1)) != done:
                return  # saved inside the last batch (periodic save): Lightning restores that itself
            for counters in (progress["current"], progress["total"]):
                counters.update(dict.fromkeys(_COUNTERS, epoch + 1))
            batch_progress.update(dict.fromkeys(_COUNTERS, 0))
            fit["epoch_loop.batch_progress"]["is_last_batch"] = False
            return
        if not n_batches:
            return
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
    """Keep a moved job folder's best checkpoint, best score and top-k record when it resumes.

    ``ModelCheckpoint`` stores absolute paths and drops its best score and top-k record when its folder differs
    from the stored one (Lightning#15705). When the loaded checkpoint lies in a ``ModelCheckpoint``'s folder,
    the stored paths are re-rooted to that folder first; a checkpoint of another folder is left as it is."""

    @override
    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
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
    ckpt = resolve_ckpt_path(cfg, out_dir)
    if cfg.get("mode", "train") != "train" or ckpt is None:
        return None
    try:
        path = Path(ckpt).resolve()
        return path if path.is_file() and path.is_relative_to(out_dir.resolve()) else None
    except OSError:
        return None


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` that, with ``keep_before`` set, keeps the rows of an existing ``metrics.csv`` whose ``step``
    is below it instead of deleting the file; rows are flushed at every logged step, so a killed run's file
    holds everything up to its last step."""

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
        """Remove the ``val/*`` rows of the validation after optimizer ``step`` (labelled ``step - 1``) from
        ``metrics.csv``."""
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


def _step_interval(trainer: L.Trainer) -> int | None:
    """``trainer.val_check_interval`` in optimizer steps: an int as given, a fraction of an epoch as that
    fraction of the epoch's optimizer steps (at least 1); None for a time."""
    interval = getattr(trainer, "val_check_interval", None)  # unset when it is a time
    if isinstance(interval, bool) or getattr(trainer, "val_check_batch", 1) is None:
        return None
    if isinstance(interval, int):
        return interval
    if isinstance(interval, float) and math.isfinite(trainer.num_training_batches):
        steps = optimizer_steps_in_epoch(int(trainer.num_training_batches), trainer.accumulate_grad_batches)
        return max(1, int(steps * interval))
    return None


def _budget_reached(trainer: L.Trainer) -> bool:
    """True once the run's last optimizer step (``max_steps``, or the last batch under ``max_epochs``) is done."""
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


_UNRECORDED = object()  # a checkpoint whose OptimizerStepIntervals state holds no unscheduled step


class OptimizerStepIntervals(L.Callback):
    """Make ``trainer.val_check_interval`` count optimizer steps (Lightning counts batches, which differ under
    gradient accumulation, and has no hook for the decision), and validate after the last step so the
    objective and best checkpoint always exist. Every validation, and so every checkpoint written by one,
    falls at the end of an optimizer step, never inside an accumulation window.

    An integer counts ``global_step``, or the steps inside the epoch when ``check_val_every_n_epoch`` is
    set; a fraction of an epoch is that fraction of the epoch's optimizer steps; a time is Lightning's
    decision, taken at the first optimizer step's end once it is due. At a restart Lightning asks once whether the
    checkpoint's own step was due for validation; each checkpoint records whether it was written inside one
    (:meth:`state_dict`), which is the right answer.

    A validation the schedule did not ask for (after the budget's last step, or once more at a stop that
    early stopping or ``max_time`` requested) is recorded by its step in each checkpoint; a run resumed
    from that step with a larger budget takes it back (:meth:`on_train_start`)."""

    def __init__(self) -> None:
        self._current: L.Trainer | None = None  # the trainer of this fit
        self._trained = False  # this fit has trained a batch
        self._step_before_batch = 0
        self._restored_in_validation = False
        self._unscheduled_step: int | None = None  # the step of the last validation the schedule did not ask for
        self._restored_unscheduled: int | None | object = _UNRECORDED

    def state_dict(self) -> dict[str, Any]:
        """``{"in_validation", "unscheduled_step"}``: whether the checkpoint is written inside a validation of
        ``fit``, and the step of the last validation the schedule did not ask for (None: none yet)."""
        in_validation = bool(self._current is not None and self._current.validating)
        return {"in_validation": in_validation, "unscheduled_step": self._unscheduled_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored_in_validation = bool(state_dict.get("in_validation", False))
        self._restored_unscheduled = state_dict.get("unscheduled_step", _UNRECORDED)

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
                return self._restored_in_validation  # the restart question
            stepped = trainer.global_step != self._step_before_batch  # this micro-batch ended a step
            if interval_decision(data_fetcher, stepped):
                return True
            if (stepped and _budget_reached(trainer)) or stopping():
                self._unscheduled_step = trainer.global_step
                return True
            return False

        def epoch_validates() -> bool:
            epochs = trainer.check_val_every_n_epoch
            return trainer.enable_validation and (epochs is None or (trainer.current_epoch + 1) % epochs == 0)

        def stopping() -> bool:  # early stopping or max_time: Lightning validates once more at a stop
            interval = _step_interval(trainer)
            return interval is not None and epoch_validates() and trainer.should_stop and _may_stop_early(trainer)

        def interval_decision(data_fetcher: Any, stepped: bool) -> bool:
            interval = _step_interval(trainer)
            if interval is None:  # a time: Lightning's decision, taken at the end of an optimizer step
                return stepped and lightning_decision(data_fetcher)
            epochs = trainer.check_val_every_n_epoch
            if not stepped or not epoch_validates():
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
        """A larger budget resumed from a step validated only because the old run ended there: take that
        validation back from the loggers and callbacks that keep one (``forget_validation``)."""
        step, restored = trainer.global_step, self._restored_unscheduled
        if step == 0 or _budget_reached(trainer):
            return
        if restored is _UNRECORDED:  # a checkpoint without the record: an interval counted over all epochs
            interval = _step_interval(trainer)
            unscheduled = interval is not None and trainer.check_val_every_n_epoch is None and step % interval != 0
        else:
            unscheduled = restored == step
        if not unscheduled:
            return
        for keeper in [*trainer.loggers, *trainer.callbacks]:
            if callable(getattr(keeper, "forget_validation", None)):
                keeper.forget_validation(step)

    @override
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._trained, self._step_before_batch = True, trainer.global_step
