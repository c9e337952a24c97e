"""Every private Lightning name xformer reads, replaces or overrides, each behind a function named for what it
does; a leaf module (imports Lightning only). ``tests/test_lightning_private_names.py`` checks each
:data:`PRIVATE_NAMES` entry against the installed Lightning (range pinned in ``pyproject.toml``) and that no
other module names one."""

from __future__ import annotations

from typing import Any, Callable

#: ``(owner, name)`` of every private Lightning name used here, each with why no public API does it.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    # no hook or option validates every N optimizer steps (an int interval counts batches) and after the last
    ("trainer.fit_loop.epoch_loop", "_should_check_val_fx"),
    # `logger.experiment` starts the experiment it is asked about (a W&B run, a CSV file deleted)
    ("lightning.pytorch.loggers.Logger (WandbLogger, CSVLogger)", "_experiment"),
    # no public setter: the stop after this batch that raises SIGTERMException (should_stop validates once more)
    ("trainer", "_signal_connector"),
    # WandbLogger keeps its wandb.init arguments only privately; settings after construction go there
    ("lightning.pytorch.loggers.WandbLogger", "_wandb_init"),
)


# -- the validation decision (xformer.jobs.resume) ----------------------------------------------------
def val_check_decision(trainer: Any) -> Callable[[Any], bool]:
    """Lightning's "validate after this batch?" function of the training-epoch loop (``data_fetcher -> bool``)."""
    return trainer.fit_loop.epoch_loop._should_check_val_fx


def set_val_check_decision(trainer: Any, decide: Callable[[Any], bool]) -> None:
    """Make ``decide(data_fetcher)`` the training-epoch loop's "validate after this batch?" decision."""
    trainer.fit_loop.epoch_loop._should_check_val_fx = decide


# -- a logger's experiment (xformer.jobs.resume) ---------------------------------------------------
def logger_started(logger: Any) -> bool:
    """True when ``logger``'s experiment exists already; asking through ``logger.experiment`` would
    start one (a W&B run on every rank, a CSV writer that deletes the old file)."""
    return logger._experiment is not None


# -- the CSV logger's writer (xformer.train.module) ----------------------------------------------
def refresh_csv_headers(trainer: Any) -> None:
    """Make each CSV logger of ``trainer`` (rank 0) know every column already in its ``metrics.csv``
    (``writer.metrics_keys``; the writer, ``logger.experiment``, is Lightning's private class): under
    ``ddp_spawn`` the loggers are copies that missed the ranks' ``fit`` keys, and ``test`` would fail."""
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


# -- the trainer's stop flag (xformer.jobs.callbacks.StopCheckpoint) ---------------------------------
def request_stop(trainer: Any, stop: bool = True) -> None:
    """Set (``stop``) or clear the flag Lightning's training and evaluation loops read after each batch to stop as
    on SIGTERM (``trainer.received_sigterm``; the SIGTERM checkpoint logic then runs)."""
    trainer._signal_connector.received_sigterm = stop


# -- a WandbLogger's pending wandb.init arguments (xformer.jobs.wandb_run) ---------------------------
def wandb_init_kwargs(logger: Any) -> dict | None:
    """The keyword arguments a ``WandbLogger`` will pass to ``wandb.init`` (a dict it owns, so edits
    take effect), or None when the logger has none."""
    init = getattr(logger, "_wandb_init", None)
    return init if isinstance(init, dict) else None
