"""What a run prints on the terminal: one copy of each Lightning log line, and a progress bar whose
epoch label makes sense when the number of epochs is unlimited (``trainer.max_epochs=-1``)."""

from __future__ import annotations

import logging

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

from xformer.jobs.lightning_compat import RICH_AVAILABLE, RichBarWithDescription


def epoch_label(current_epoch: int, max_epochs: int | None) -> str:
    """``"Epoch N/M"`` (M the last epoch's index) when the run has an epoch limit, else ``"Epoch N"``.

    Lightning writes ``max_epochs - 1`` unconditionally, which reads ``Epoch 46/-2`` for ``-1``.
    """
    if max_epochs is None or max_epochs < 0:
        return f"Epoch {current_epoch}"
    return f"Epoch {current_epoch}/{max_epochs - 1}"


class RichBar(RichBarWithDescription):
    """Lightning's Rich progress bar with :func:`epoch_label` as the training description, showing
    the module's ``progress_metrics`` (host floats the module refreshes at logging steps) beside
    Lightning's own: values logged with ``prog_bar=True`` would be read back from the device at
    every batch, a sync per training step on a GPU."""

    def get_metrics(self, trainer, pl_module) -> dict:
        return {**super().get_metrics(trainer, pl_module), **getattr(pl_module, "progress_metrics", {})}

    def train_description(self, current_epoch: int) -> str:
        label = epoch_label(current_epoch, self.trainer.max_epochs)
        width = len(self.validation_description)  # padded as Lightning does, so the bar does not jump
        return f"{label:{width}}" if width > len(label) else label


def progress_bar() -> ProgressBar:
    """The bar Lightning would pick by default (Rich when installed, else tqdm, whose label has no
    epoch total), with the epoch label fixed."""
    return RichBar() if RICH_AVAILABLE else TQDMProgressBar()


def single_log_lines() -> None:
    """Print each Lightning log record once.

    The ``lightning`` package puts its own console handler on the ``lightning`` logger, and its
    records also reach the root logger that Hydra configures (console + the job's log file), so every
    line appeared twice. When the root logger has handlers, Lightning's own console handlers are
    removed and its records go through the root's alone; without root handlers nothing changes.
    """
    if not logging.getLogger().hasHandlers():
        return
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # Lightning's console handlers, nothing else
                logger.removeHandler(handler)
        logger.propagate = True
