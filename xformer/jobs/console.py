"""What a run prints on the terminal: each Lightning log line once, only library messages true about this
run, a progress bar that reads right with ``max_epochs=-1`` and after a mid-epoch resume, a test table
with one column per test split, and one line per validation."""

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
    """``"Epoch N/M"`` (M the last epoch's index) with an epoch limit, else ``"Epoch N"`` (Lightning writes
    ``Epoch 46/-2`` for ``max_epochs=-1``)."""
    if max_epochs is None or max_epochs < 0:
        return f"Epoch {current_epoch}"
    return f"Epoch {current_epoch}/{max_epochs - 1}"


class RichBar(RichBarWithDescription):
    """Lightning's Rich bar with :func:`epoch_label`, showing the module's host-side ``progress_metrics`` (values
    logged with ``prog_bar=True`` would be read from the device at every batch)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        """Set the total to the batches this epoch really runs (done plus left before the epoch or ``max_steps``
        ends): with ``max_epochs=-1`` Lightning's total is the steps left, wrong after a mid-epoch resume."""
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
    """The bar Lightning would pick by default (Rich when installed, else tqdm), with the epoch label fixed."""
    return RichBar() if importlib.util.find_spec("rich") is not None else TQDMProgressBar()


def single_log_lines() -> None:
    """Print each Lightning log record once: with root handlers (Hydra's), Lightning's own console handlers are
    removed and its records go through the root's."""
    if not logging.getLogger().hasHandlers():
        return
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # Lightning's console handlers, nothing else
                logger.removeHandler(handler)
        logger.propagate = True


#: Lightning's lines that tell an xformer user nothing the config or the test table does not, and its
#: litlogger advert (no option turns it off).
_LIGHTNING_NOISE = (
    "💡 Tip:",
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "`weights_only` was not set",
    "Restoring states from the checkpoint path",
    "Loaded model weights from the checkpoint",
    "Seed set to",
)


def _not_noise(record: logging.LogRecord) -> bool:
    return not str(record.getMessage()).startswith(_LIGHTNING_NOISE)


def quiet_console(resuming: bool = False) -> None:
    """Keep library messages that are noise or false for this run off the console (idempotent); ``resuming``:
    also Lightning's "Checkpoint directory ... exists and is not empty"."""
    for name in (
        "lightning.pytorch.utilities.rank_zero",
        "lightning.fabric.utilities.rank_zero",
        "lightning.pytorch.trainer.connectors.checkpoint_connector",
        "lightning.fabric.utilities.seed",
    ):
        logging.getLogger(name).addFilter(_not_noise)  # a filter already there is not added twice
    # false here: logging counts optimizer steps across epochs
    warnings.filterwarnings(
        "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval"
    )
    warnings.filterwarnings(  # torch's deprecation, raised inside Lightning's own pytree helper
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
    if resuming:
        warnings.filterwarnings(
            "ignore",
            message=r"Checkpoint directory .* exists and is not empty",
            module=r"lightning\.pytorch\.callbacks\.model_checkpoint",
        )


def test_table(results: dict[str, float], split_names: list[str]) -> str:
    """The test results as a text table, one row per metric and one column per split (``test/<metric>`` is split
    ``test``, ``test/<metric>@<split>`` is ``<split>``); keys outside ``test/`` ignored, ``""`` when none."""
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
    """One console line after each validation (rank 0): the step, the objective ``metric`` with its best so far
    (``mode``: ``min`` or ``max``), and the task's own metric."""

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
