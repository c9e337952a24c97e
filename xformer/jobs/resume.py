"""Exact resume. The guarantee: a training job restarted in its own folder from any of its checkpoints trains and
validates as the uninterrupted run (docs/troubleshooting.md, "Resuming a killed run"). Here: the dropout RNG
(:class:`StepSeed`), the validation schedule (:class:`OptimizerStepIntervals`), a moved folder's best checkpoint
(:func:`reroot`), the CSV log (:class:`ResumableCSVLogger`); the data position:
:class:`xformer.data.loader.EpochStream`."""

from __future__ import annotations

import csv
import random
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from typing_extensions import override

from xformer import lightning_compat as compat
from xformer.data.loader import data_index
from xformer.lightning_compat import logger_started


# -- a moved job folder ---------------------------------------------------------------------------
def _rerooted(path: Any, old: str, new: str) -> Any:
    """``path`` with its leading folder ``old`` replaced by ``new`` (other values unchanged)."""
    if not isinstance(path, str) or not path:
        return path
    if path == old:
        return new
    prefix = old.rstrip("/\\") + "/"
    return new.rstrip("/") + "/" + path[len(prefix) :] if path.startswith(prefix) else path


def reroot(trainer: L.Trainer, callback: Any, checkpoint: dict) -> None:
    """Re-root ``callback``'s stored paths in ``checkpoint`` to its folder when the loaded checkpoint lies there
    (from ``on_load_checkpoint``): ``ModelCheckpoint`` drops its best score and top-k record when its folder
    differs from the stored one (Lightning#15705)."""
    loaded, dirpath = trainer.ckpt_path, callback.dirpath
    state = (checkpoint.get("callbacks") or {}).get(callback.state_key)
    if not (loaded and dirpath and state) or Path(dirpath).resolve() != Path(loaded).resolve().parent:
        return
    if not (old := state.get("dirpath")) or old == dirpath:
        return
    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        if key in state:
            state[key] = _rerooted(state[key], old, dirpath)
    if isinstance(state.get("best_k_models"), dict):
        state["best_k_models"] = {_rerooted(k, old, dirpath): v for k, v in state["best_k_models"].items()}
    state["dirpath"] = dirpath


# -- the job's logs -------------------------------------------------------------------------------
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

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Lightning's, with the data's ``epoch`` written as an integer, as Lightning writes its own."""
        if "epoch" in metrics:
            metrics = {**metrics, "epoch": int(metrics["epoch"])}
        super().log_metrics(metrics, step)

    def forget_validation(self, step: int) -> None:
        """Remove the ``val/*`` rows of the validation after optimizer ``step`` (labelled ``step - 1``) from
        ``metrics.csv``."""
        if getattr(rank_zero_only, "rank", 0):
            return
        self.experiment.save()
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
    """True once the run's last optimizer step (``max_steps``) is done (read in ``on_train_batch_end``)."""
    return trainer.max_steps is not None and trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps


_UNRECORDED = object()  # a checkpoint whose OptimizerStepIntervals state holds no unscheduled step


class StepSeed(L.Callback):
    """Reseed ``torch``, ``numpy`` and ``random`` at every training batch from ``(seed, epoch, batch index in
    the epoch, global rank)`` (the data's epoch and batch: :func:`~xformer.data.loader.data_index`), so a
    resumed run draws the same dropout masks with no RNG state stored."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)

    @override
    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        epoch, index = data_index(trainer, batch_idx)
        state = np.random.SeedSequence([self.seed, epoch, index, trainer.global_rank])
        s = int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
        if pl_module.device.type == "cpu":
            # the CPU generator alone: torch.manual_seed also queues a lazy CUDA seed with a stack trace
            torch.default_generator.manual_seed(s)
        else:
            torch.manual_seed(s)
        np.random.seed(s % 2**32)
        random.seed(s)


class OptimizerStepIntervals(StepSeed):
    """xformer's one callback of the step count: the dropout seed (:class:`StepSeed`), the job's wall clock
    (:meth:`elapsed`) and the validation schedule in optimizer steps (Lightning counts batches), so every
    validation falls at a step's end; after the last step (``max_steps``) the run validates once more. Each
    checkpoint records whether it was written inside a validation (Lightning's restart question) and the step of a
    validation the schedule did not ask for, which a resume with a larger budget takes back.

    Args:
        val_check_interval: the interval in optimizer steps (:func:`xformer.config.steps.steps_from_epochs`); None:
            a time, Lightning's decision at the first step's end once due.
        dense_every, dense_until: ``val_dense``: also validate every ``dense_every`` steps up to ``dense_until``.
        seed: the dropout seed (:class:`StepSeed`).
        start: the job's clock (``time.time()``; default: now); :meth:`elapsed` (``wall_time_s``) adds the seconds
            the resumed checkpoint had counted."""

    def __init__(
        self,
        val_check_interval: int | None = None,
        dense_every: int | None = None,
        dense_until: int = 0,
        seed: int = 0,
        start: float | None = None,
    ) -> None:
        super().__init__(seed)
        self.start = time.time() if start is None else start
        self.before = 0.0  # seconds counted by the runs before the checkpoint this fit resumed
        self._loaded = 0.0
        self.val_check_interval = val_check_interval
        self.dense_every = dense_every
        self.dense_until = dense_until or 0
        self._current: L.Trainer | None = None  # the trainer of this fit
        self._trained = False  # this fit has trained a batch
        self._step_before_batch = 0
        self._restored_in_validation = False
        self._unscheduled_step: int | None = None  # the step of the last validation the schedule did not ask for
        self._restored_unscheduled: int | None | object = _UNRECORDED

    def state_dict(self) -> dict[str, Any]:
        in_validation = bool(self._current is not None and self._current.validating)
        return {"in_validation": in_validation, "unscheduled_step": self._unscheduled_step, "elapsed_s": self.elapsed()}

    def elapsed(self) -> float:
        return self.before + time.time() - self.start

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = float(state_dict.get("elapsed_s", 0.0))
        self._restored_in_validation = bool(state_dict.get("in_validation", False))
        self._restored_unscheduled = state_dict.get("unscheduled_step", _UNRECORDED)
        if self._restored_unscheduled is not _UNRECORDED:  # still the last one until this fit validates so
            self._unscheduled_step = self._restored_unscheduled

    def scheduled(self, trainer: L.Trainer) -> bool:
        """Whether the optimizer step that just ended is one the schedule validates after."""
        step, interval = trainer.global_step, self.val_check_interval
        if self.dense_every and 0 < step <= self.dense_until and step % self.dense_every == 0:
            return trainer.enable_validation
        return interval is not None and trainer.enable_validation and step % interval == 0

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
            interval = self.val_check_interval  # None: a time, Lightning's decision
            if stepped and (lightning_decision(data_fetcher) if interval is None else self.scheduled(trainer)):
                return True
            # early stopping or max_time, honoured once min_steps is met
            stopping = interval is not None and trainer.should_stop
            stopping = stopping and trainer.global_step >= (trainer.fit_loop.min_steps or 0)
            if (stepped and budget_reached(trainer)) or stopping:  # early stopping or max_time: one more
                self._unscheduled_step = trainer.global_step
                return True
            return False

        compat.set_val_check_decision(trainer, should_check_val)

    @override
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # fit only (testing a best checkpoint loads callback states too, which must not reset the clock); also
        # a fit with nothing left to train, which never starts training
        self.before = self._loaded

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Take back (``forget_validation``) a validation the resumed step had only because the old run ended there."""
        step, restored = trainer.global_step, self._restored_unscheduled
        if step == 0 or budget_reached(trainer):
            return
        if restored is _UNRECORDED:  # a checkpoint without the record: an interval counted over all epochs
            unscheduled = self.val_check_interval is not None and step % self.val_check_interval != 0
        else:
            unscheduled = restored == step
        if not unscheduled:
            return
        for keeper in [*trainer.loggers, *trainer.callbacks]:
            if callable(getattr(keeper, "forget_validation", None)):
                keeper.forget_validation(step)

    @override
    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        self._trained, self._step_before_batch = True, trainer.global_step
