"""Every private Lightning name xformer reads, replaces or overrides, in one place.

Lightning offers no public hook for a few things xformer needs; each is reached here, through a
small function named for what it does, and nowhere else in xformer (``tests/test_lightning_private_names.py``
checks each entry of :data:`PRIVATE_NAMES` against the installed Lightning, one test per group below,
and that no other module names one of them). When a Lightning release moves a name, that test
fails before a run does, and this module is the one place to change. The supported range is pinned
in ``pyproject.toml``.

Groups (who calls them):

* training-epoch loop and trainer state -- :mod:`xformer.jobs.steps` (validation intervals counted in
  optimizer steps, the last-step validation, consistent resume); whether a module has a trainer --
  :mod:`xformer.train.module`;
* a logger's not-yet-started experiment -- :mod:`xformer.jobs.wandb_run` (W&B, rank 0) and
  :class:`xformer.jobs.resume.ResumableCSVLogger`;
* the CSV logger's writer columns -- :func:`refresh_csv_headers` (:mod:`xformer.train.module`);
* whether Rich is installed and the Rich bar's training description -- :mod:`xformer.jobs.console`;
* the accepted precision strings -- tests (the config check reads them from the ``Trainer``'s own
  ``precision`` annotation, :mod:`xformer.jobs.config_check.schema`);
* whether the loggers write this step's values -- :mod:`xformer.train.module` (train-time values are
  logged only where something reads them);
* the trainer's stop flag -- :class:`xformer.jobs.callbacks.StopCheckpoint` (Ctrl-C stops training as
  SIGTERM does);
* a ``WandbLogger``'s pending ``wandb.init`` arguments -- :mod:`xformer.jobs.wandb_run`.
"""

from __future__ import annotations

import typing
from typing import Any, Callable

from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT_STR
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.utilities.imports import _RICH_AVAILABLE

#: ``(owner, name)`` of every private Lightning name used here (owner as a dotted path or a description).
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("trainer.fit_loop.epoch_loop", "_should_check_val_fx"),
    ("trainer.fit_loop.epoch_loop", "_batches_that_stepped"),
    ("trainer.fit_loop.epoch_loop", "_should_accumulate"),
    ("trainer.fit_loop.epoch_loop", "_should_check_val_epoch"),
    ("trainer.fit_loop.epoch_loop", "_num_ready_batches_reached"),
    ("trainer.fit_loop", "_can_stop_early"),
    ("trainer", "_val_check_time_interval"),
    ("lightning.pytorch.LightningModule", "_trainer"),
    ("lightning.pytorch.loggers.Logger (WandbLogger, CSVLogger)", "_experiment"),
    ("lightning.pytorch.callbacks.RichProgressBar", "_get_train_description"),
    ("lightning.pytorch.utilities.imports", "_RICH_AVAILABLE"),
    ("lightning.fabric.plugins.precision.precision", "_PRECISION_INPUT_STR"),
    ("trainer", "_signal_connector"),
    ("trainer", "_logger_connector"),
    ("lightning.pytorch.loggers.WandbLogger", "_wandb_init"),
)


# -- training-epoch loop and trainer state (xformer.jobs.steps) ----------------------------------------
def val_check_decision(trainer: Any) -> Callable[[Any], bool]:
    """Lightning's "validate after this batch?" function of the training-epoch loop (``data_fetcher -> bool``)."""
    return trainer.fit_loop.epoch_loop._should_check_val_fx


def set_val_check_decision(trainer: Any, decide: Callable[[Any], bool]) -> None:
    """Make ``decide(data_fetcher)`` the training-epoch loop's "validate after this batch?" decision."""
    trainer.fit_loop.epoch_loop._should_check_val_fx = decide


def batches_that_stepped(trainer: Any) -> int:
    """Optimizer steps the loop has counted (the step axis of logged rows)."""
    return trainer.fit_loop.epoch_loop._batches_that_stepped


def should_accumulate(trainer: Any) -> bool:
    """True when the current micro-batch does not complete an optimizer step."""
    return trainer.fit_loop.epoch_loop._should_accumulate()


def should_check_val_epoch(trainer: Any) -> bool:
    """True when this epoch may validate (``check_val_every_n_epoch``)."""
    return trainer.fit_loop.epoch_loop._should_check_val_epoch()


def num_ready_batches_reached(trainer: Any) -> bool:
    """True after the epoch's last batch was fetched."""
    return trainer.fit_loop.epoch_loop._num_ready_batches_reached()


def can_stop_early(trainer: Any) -> bool:
    """True when the fit loop may honour ``should_stop`` now (its minimum steps/epochs are done)."""
    return trainer.fit_loop._can_stop_early


def val_check_time_interval(trainer: Any) -> Any:
    """The time-based ``val_check_interval`` (``None`` unless the interval is a duration)."""
    return trainer._val_check_time_interval


def logger_writes_this_step(trainer: Any) -> bool:
    """True when the training loop will hand this batch's step-level logged values to the loggers
    (Lightning's own ``should_update_logs``: every ``log_every_n_steps`` optimizer steps, and when
    the trainer stops). Read it in ``on_train_batch_end``, the last hook before the loop decides."""
    return bool(trainer._logger_connector.should_update_logs)


def has_trainer(module: Any) -> bool:
    """True when the LightningModule ``module`` is attached to a trainer (its ``trainer`` property
    raises otherwise, e.g. in a unit test that calls ``training_step`` directly)."""
    return module._trainer is not None


# -- loggers (xformer.jobs.wandb_run, xformer.jobs.resume) -------------------------------------------
def logger_started(logger: Any) -> bool:
    """True when ``logger``'s experiment exists already; asking through ``logger.experiment`` would
    start one (a W&B run on every rank, a CSV writer that deletes the old file)."""
    return logger._experiment is not None


# -- the CSV logger's writer (xformer.train.module, under ddp_spawn) --------------------------------
def refresh_csv_headers(trainer: Any) -> None:
    """Make each CSV logger of ``trainer`` know every column already in its ``metrics.csv``
    (``writer.metrics_keys``; the writer, ``logger.experiment``, is Lightning's private class).

    Under ``ddp_spawn`` the loggers are copies pickled from the job's process, which never sees the
    keys the spawned ranks logged during ``fit``; without this, ``test`` would rewrite the file with
    the shorter header and fail. Called from ``TransformerLitModule.setup`` (rank 0; a no-op otherwise).
    """
    import csv
    import os

    from lightning.pytorch.loggers import CSVLogger

    if not trainer.is_global_zero:
        return
    for lg in trainer.loggers:
        if not isinstance(lg, CSVLogger):
            continue
        writer = lg.experiment
        path = getattr(writer, "metrics_file_path", None)
        if path and os.path.isfile(path):
            with open(path, newline="") as f:
                header = next(csv.reader(f), [])
            writer.metrics_keys = sorted(set(writer.metrics_keys) | set(header))


# -- console (xformer.jobs.console) --------------------------------------------------------------------
RICH_AVAILABLE: bool = bool(_RICH_AVAILABLE)
"""Whether ``rich`` is installed (Lightning then picks its Rich progress bar)."""


class RichBarWithDescription(RichProgressBar):
    """Lightning's Rich bar whose training description comes from the public :meth:`train_description`."""

    def _get_train_description(self, current_epoch: int) -> str:
        return self.train_description(current_epoch)

    def train_description(self, current_epoch: int) -> str:
        """The text before the training bar (default: Lightning's own)."""
        return super()._get_train_description(current_epoch)


# -- precision (tests) ---------------------------------------------------------------------------------
PRECISION_INPUTS: tuple[str, ...] = tuple(str(p) for p in typing.get_args(_PRECISION_INPUT_STR))
"""The precision strings Lightning's ``Trainer(precision=...)`` accepts in full form (``"32-true"``, ...)."""


# -- the trainer's stop flag (xformer.jobs.callbacks.StopCheckpoint) ---------------------------------
def request_stop(trainer: Any) -> None:
    """Set the flag Lightning's training loop reads after each batch to stop as on SIGTERM
    (``trainer.received_sigterm`` becomes True; the SIGTERM checkpoint logic then runs)."""
    trainer._signal_connector.received_sigterm = True


# -- a WandbLogger's pending wandb.init arguments (xformer.jobs.wandb_run) ---------------------------
def wandb_init_kwargs(logger: Any) -> dict | None:
    """The keyword arguments a ``WandbLogger`` will pass to ``wandb.init`` (a dict it owns, so edits
    take effect), or None when the logger has none."""
    init = getattr(logger, "_wandb_init", None)
    return init if isinstance(init, dict) else None
