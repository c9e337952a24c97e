"""Exact resume. **The guarantee:** a training job restarted in its own folder from any of its checkpoints
trains the same batches in the same order, with the same epochs, dropout, learning rate and ``tokens_seen``, and
validates after the same optimizer steps as the uninterrupted run (docs/troubleshooting.md, "Resuming a killed
run"). Here: the validation schedule and the epoch budget (:class:`OptimizerStepIntervals`), a moved folder's
best checkpoint (:class:`RerootCheckpoints`), the CSV log (:class:`ResumableCSVLogger`); elsewhere: the data
position (:class:`xformer.data.loader.EpochStream`: Lightning runs the data epochs as one endless epoch, so
no checkpoint holds an epoch boundary of its loop), the dropout RNG (:class:`xformer.jobs.callbacks.StepSeed`)."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig
from typing_extensions import override

from xformer import lightning_compat as compat
from xformer.data.loader import Position, data_position, last_epoch_ends, optimizer_steps_in_epoch, training_stream
from xformer.lightning_compat import logger_started

from .checkpoints import resolve_ckpt_path


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


def budget_reached(trainer: L.Trainer) -> bool:
    """True once the run's last optimizer step (``max_steps``, or the last batch of the data's ``max_epochs``)
    is done (read in ``on_train_batch_end``)."""
    if trainer.max_steps is not None and trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        return True
    return last_epoch_ends(trainer)


def _may_stop_early(trainer: L.Trainer) -> bool:
    """True when the fit loop honours ``trainer.should_stop`` now (``min_epochs``/``min_steps`` met)."""
    fit = trainer.fit_loop
    epochs_met = not fit.min_epochs or fit.epoch_progress.current.processed >= fit.min_epochs
    return epochs_met and (not fit.min_steps or trainer.global_step >= fit.min_steps)


_UNRECORDED = object()  # a checkpoint whose OptimizerStepIntervals state holds no unscheduled step


class OptimizerStepIntervals(L.Callback):
    """The validation schedule and the epoch budget, as functions of the optimizer step and the data position
    (:func:`~xformer.data.loader.data_position`); Lightning counts batches of its own epochs, which differ
    under gradient accumulation and, with the data epochs run back to back, are one endless epoch. Every
    validation, and so every checkpoint written by one, falls at the end of an optimizer step.

    ``val_check_interval``: an integer counts ``global_step``, or the steps inside each epoch when
    ``check_val_every_n_epoch`` is set; a fraction of an epoch is that fraction of the epoch's optimizer
    steps; a time is Lightning's decision, taken at the first optimizer step's end once it is due.
    ``check_val_every_n_epoch``: only epochs whose number + 1 it divides validate. After the last step
    (``max_steps``, or the last batch of the data's ``max_epochs``) the run validates, so the objective and
    best checkpoint always exist, and stops.

    At a restart Lightning asks once whether the checkpoint's own step was due for validation; each
    checkpoint records whether it was written inside one (:meth:`state_dict`), which is the right answer.
    A validation the schedule did not ask for (after the budget's last step, or once more at a stop that
    early stopping or ``max_time`` requested) is recorded by its step in each checkpoint; a run resumed
    from that step with a larger budget takes it back (:meth:`on_train_start`).

    Args:
        val_check_interval: the trainer's ``val_check_interval`` (None: Lightning's, a time).
        check_val_every_n_epoch: the trainer's ``check_val_every_n_epoch``.
        dense_every, dense_until: also validate every ``dense_every`` optimizer steps up to step ``dense_until``
            (``val_dense`` in the config), so that an outcome such as the steps to reach a level is measured,
            not bounded by the first regular validation; None or 0: no extra validations."""

    def __init__(
        self,
        val_check_interval: int | float | None = 1.0,
        check_val_every_n_epoch: int | None = None,
        dense_every: int | None = None,
        dense_until: int = 0,
    ) -> None:
        self.val_check_interval = val_check_interval
        self.check_val_every_n_epoch = check_val_every_n_epoch
        self.dense_every = dense_every
        self.dense_until = dense_until or 0
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
        if self._restored_unscheduled is not _UNRECORDED:  # still the last one until this fit validates so
            self._unscheduled_step = self._restored_unscheduled

    def step_interval(self, trainer: L.Trainer, position: Position | None) -> int | None:
        """The interval in optimizer steps: an int as given, a fraction as that fraction of the optimizer steps
        of ``position``'s epoch (at least 1); None for a time."""
        interval = self.val_check_interval
        if isinstance(interval, bool) or interval is None:
            return None
        if isinstance(interval, int):
            return interval
        if isinstance(interval, float) and position is not None:
            steps = optimizer_steps_in_epoch(position[2], trainer.accumulate_grad_batches)
            return max(1, int(steps * interval))
        return None

    def _epoch_validates(self, trainer: L.Trainer, epoch: int) -> bool:
        every = self.check_val_every_n_epoch
        return trainer.enable_validation and (every is None or (epoch + 1) % every == 0)

    def scheduled(self, trainer: L.Trainer, position: Position | None) -> bool:
        """Whether the optimizer step that just ended at ``position`` is one the schedule validates after."""
        interval = self.step_interval(trainer, position)
        step = trainer.global_step
        if self.dense_every and 0 < step <= self.dense_until and step % self.dense_every == 0:
            return trainer.enable_validation
        if interval is None:
            return False
        if self.check_val_every_n_epoch is None:
            return trainer.enable_validation and trainer.global_step % interval == 0
        if position is None:
            return False
        epoch, done, _ = position  # epochs hold whole windows: a step ends at a multiple of accumulate
        steps = optimizer_steps_in_epoch(done, trainer.accumulate_grad_batches)
        return done > 0 and steps % interval == 0 and self._epoch_validates(trainer, epoch)

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
            position = data_position(trainer)
            if stepped and self.step_interval(trainer, position) is None:  # a time: Lightning's decision
                if lightning_decision(data_fetcher):
                    return True
            elif stepped and self.scheduled(trainer, position):
                return True
            if (stepped and budget_reached(trainer)) or stopping(position):
                self._unscheduled_step = trainer.global_step
                return True
            return False

        def stopping(position: Position | None) -> bool:  # early stopping or max_time: one more validation
            epoch = position[0] if position is not None else 0
            return (
                self.step_interval(trainer, position) is not None
                and self._epoch_validates(trainer, epoch)
                and trainer.should_stop
                and _may_stop_early(trainer)
            )

        compat.set_val_check_decision(trainer, should_check_val)

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A larger budget resumed from a step validated only because the old run ended there: take that
        validation back from the loggers and callbacks that keep one (``forget_validation``). A run resumed
        after the data's last epoch stops at once (Lightning's own epoch has no end to reach)."""
        step, restored = trainer.global_step, self._restored_unscheduled
        if step > 0 and training_stream(trainer) is not None and last_epoch_ends(trainer):
            trainer.should_stop = True  # resumed after the data's last epoch: nothing to train
        if step == 0 or budget_reached(trainer):
            return
        if restored is _UNRECORDED:  # a checkpoint without the record: an interval counted over all epochs
            interval = self.step_interval(trainer, data_position(trainer))
            unscheduled = interval is not None and self.check_val_every_n_epoch is None and step % interval != 0
        else:
            unscheduled = restored == step
        if not unscheduled:
            return
        for keeper in [*trainer.loggers, *trainer.callbacks]:
            if callable(getattr(keeper, "forget_validation", None)):
                keeper.forget_validation(step)

    @override
    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Stop after the last batch of the data's ``max_epochs`` (Lightning's own epoch never ends)."""
        if training_stream(trainer) is not None and last_epoch_ends(trainer):
            trainer.should_stop = True

    @override
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._trained, self._step_before_batch = True, trainer.global_step
