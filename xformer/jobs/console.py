"""What a run prints on the terminal: one copy of each Lightning log line, only messages that are
true about this run (:func:`quiet_console`), a progress bar whose epoch label makes sense when the
number of epochs is unlimited (``trainer.max_epochs=-1``) and whose count makes sense after a
mid-epoch resume, and a test-results table with one column per test split (:func:`test_table`)."""

from __future__ import annotations

import importlib.util
import logging
import math
import warnings
from typing import Literal

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

from xformer.jobs.distributed import logging_spec, replay_logging
from xformer.lightning_compat import RichBarWithDescription

log = logging.getLogger("xformer")


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

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        """Lightning's update, with the total set to the batches this epoch will really run: with
        ``max_epochs=-1`` Lightning's total is ``min(epoch length, max_steps - global_step)``, the
        steps *left*, while the count is the batch index in the epoch, which after a mid-epoch
        resume starts where the checkpoint was (``120/33``). Here the total is the batches done in
        this epoch plus those left before the epoch or ``max_steps`` ends."""
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        n = trainer.num_training_batches
        if (
            self.progress is None
            or self.train_progress_bar_id is None
            or not trainer.max_steps
            or trainer.max_steps < 0
            or trainer.max_epochs != -1
            or math.isinf(n)
        ):
            return
        steps_left = max(0, trainer.max_steps - trainer.global_step)
        batches_left = steps_left * max(1, int(trainer.accumulate_grad_batches or 1))
        self.progress.update(self.train_progress_bar_id, total=min(n, batch_idx + 1 + batches_left))

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = {**super().get_metrics(trainer, pl_module), **getattr(pl_module, "progress_metrics", {})}
        metrics.pop("v_num", None)  # the logger's version string: nothing a user reads
        return metrics

    def train_description(self, current_epoch: int) -> str:
        label = epoch_label(current_epoch, self.trainer.max_epochs)
        width = len(self.validation_description)  # padded as Lightning does, so the bar does not jump
        return f"{label:{width}}" if width > len(label) else label


def progress_bar() -> ProgressBar:
    """The bar Lightning would pick by default (Rich when installed, else tqdm, whose label has no
    epoch total), with the epoch label fixed."""
    return RichBar() if importlib.util.find_spec("rich") is not None else TQDMProgressBar()


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


# Messages of libraries that are noise or false for an xformer run, each matched narrowly:
_LIGHTNING_TIP = "💡 Tip:"  # Lightning advertises its litlogger package at every Trainer (no option turns it off)
#: torch >= 2.10 deprecates constructing ``LeafSpec``; Lightning's own ``utilities/_pytree.py`` still
#: does (nothing of xformer's), once per run.
_LEAFSPEC_MESSAGE = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _DropRecords(logging.Filter):
    """A logging filter that drops the records whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)


_TIP_FILTER = _DropRecords(_LIGHTNING_TIP)
#: Lightning's lines that say nothing to a user of an xformer run: the accelerator report (the run's
#: device is in its config), the checkpoint restore it does for the test of the best checkpoint (the
#: test table names it) and the ``weights_only`` default of its own checkpoint files.
_LIGHTNING_NOISE = _DropRecords(
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "`weights_only` was not set",
    "Restoring states from the checkpoint path",
    "Loaded model weights from the checkpoint",
    "Seed set to",
)


def quiet_console(resuming: bool = False) -> None:
    """Keep library messages that say nothing true about this run off the console (idempotent):
    Lightning's litlogger tip (a logging filter on its ``rank_zero`` logger), torch's ``LeafSpec``
    deprecation that Lightning's pytree helper triggers (a warnings filter on that message from that
    module only) and, when the job resumes from its own checkpoint (``resuming``), Lightning's
    "Checkpoint directory ... exists and is not empty" (of course it is: it holds that checkpoint).
    W&B's "anonymous setting" warning is avoided where the W&B run is created
    (:func:`xformer.jobs.wandb_run.start_wandb`), and the CSV logger's "Previous log files ... will be
    deleted" on resume where the log is kept (:class:`xformer.jobs.resume.ResumableCSVLogger`)."""
    for name in (
        "lightning.pytorch.utilities.rank_zero",
        "lightning.fabric.utilities.rank_zero",
        "lightning.pytorch.trainer.connectors.checkpoint_connector",
        "lightning.fabric.utilities.seed",
    ):
        logger = logging.getLogger(name)
        for flt in (_TIP_FILTER, _LIGHTNING_NOISE):
            if flt not in logger.filters:
                logger.addFilter(flt)
    # the number of batches per epoch is below trainer.log_every_n_steps: logging still happens
    # every N optimizer steps across epochs (xformer counts steps), so the hint is wrong here
    warnings.filterwarnings(
        "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval"
    )
    warnings.filterwarnings(
        "ignore", message=_LEAFSPEC_MESSAGE, category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree"
    )
    if resuming:
        warnings.filterwarnings(
            "ignore",
            message=r"Checkpoint directory .* exists and is not empty",
            module=r"lightning\.pytorch\.callbacks\.model_checkpoint",
        )


def test_table(results: dict[str, float], split_names: list[str]) -> str:
    """The test results as a text table with one column per test split, named by the split, and
    one row per metric: key ``test/<metric>`` belongs to split ``test``, ``test/<metric>@<split>``
    to ``<split>`` (the module's naming). Lightning's own table has a "DataLoader i" column per
    loader, each showing every split's values, since the module logs them all at the epoch end.

    Args:
        results: the test metrics (``trainer.test`` results merged), e.g. ``{"test/loss": 0.1,
            "test/loss@long": 2.3}``; keys outside ``test/`` are ignored.
        split_names: the data module's test splits, in order (e.g. ``["test", "long"]``).

    Returns:
        the table as text (empty when there are no test metrics).
    """
    cols = list(split_names) or ["test"]
    cells: dict[str, dict[str, float]] = {}
    for key, value in results.items():
        if not key.startswith("test/"):
            continue
        metric, _, split = key[len("test/") :].partition("@")
        split = split or "test"
        if split not in cols:
            cols.append(split)
        cells.setdefault(metric, {})[split] = float(value)
    if not cells:
        return ""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="test results")
    table.add_column("metric", style="cyan")
    for split in cols:
        table.add_column(split, justify="right", style="magenta")
    for metric, row in cells.items():
        table.add_row(metric, *(f"{row[s]:.4f}" if s in row else "-" for s in cols))
    console = Console(width=max(60, 16 * (len(cols) + 1)), force_terminal=False, color_system=None)
    with console.capture() as capture:
        console.print(table)
    return capture.get()


class ValidationLine(L.Callback):
    """One console line after each validation (rank 0): the step, the objective and the task's own
    metric, and the best objective so far, e.g.
    ``validation at step 500/1500: val/loss 1.234 (best 1.234 at step 500) · val/exact_match 0.981``.

    Args:
        metric: the objective (``objective.metric``); ``mode``: ``min`` or ``max`` (``objective.mode``).
    """

    TASK_METRICS = ("val/bleu", "val/exact_match", "val/acc")

    def __init__(self, metric: str = "val/loss", mode: Literal["min", "max"] = "min") -> None:
        self.metric, self.mode = metric, mode
        self.best: tuple[float, int] | None = None
        self._logging = logging_spec()  # the job's console and log file, for ranks ddp_spawn starts

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:  # noqa: ARG002 - hook signature
        replay_logging(self._logging)  # a ddp_spawn rank: this callback is a pickled copy; else nothing to do

    def state_dict(self) -> dict:
        return {"best": self.best}

    def load_state_dict(self, state_dict: dict) -> None:
        best = state_dict.get("best")
        self.best = None if best is None else (float(best[0]), int(best[1]))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:  # noqa: ARG002 - hook signature
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        step, total = trainer.global_step, trainer.max_steps
        parts = []
        value = metrics.get(self.metric)
        if value is not None:
            v = float(value)
            better = self.best is None or (v < self.best[0] if self.mode == "min" else v > self.best[0])
            if better and math.isfinite(v):
                self.best = (v, step)
            best = f" (best {self.best[0]:.4g} at step {self.best[1]})" if self.best else ""
            parts.append(f"{self.metric} {v:.4g}{best}")
        task = next((k for k in self.TASK_METRICS if k in metrics and k != self.metric), None)
        if task:
            parts.append(f"{task} {float(metrics[task]):.4g}")
        if parts:
            of = f"/{total}" if total and total > 0 else ""
            log.info("validation at step %d%s: %s", step, of, " · ".join(parts))
