"""Every private Lightning name xformer reads, replaces or overrides, in one place.

A leaf module (it imports Lightning only), so every layer of xformer may use it. Each name is reached
through a small function named for what it does, and nowhere else in xformer
(``tests/test_lightning_private_names.py`` checks each entry of :data:`PRIVATE_NAMES` against the
installed Lightning and that no other module names one of them). When a Lightning release moves a
name, that test fails before a run does. The supported range is pinned in ``pyproject.toml``.
"""

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


# -- loggers (xformer.jobs.wandb_run, xformer.jobs.resume) -------------------------------------------
def logger_started(logger: Any) -> bool:
    """True when ``logger``'s experiment exists already; asking through ``logger.experiment`` would
    start one (a W&B run on every rank, a CSV writer that deletes the old file)."""
    return logger._experiment is not None


# -- the CSV logger's writer (xformer.train.module) ----------------------------------------------
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
