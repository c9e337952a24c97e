"""What a job prints on the terminal: Lightning's log lines once and without noise, a progress bar in optimizer
steps (:class:`StepBar`), one line per validation (:class:`ValidationLine`) and a test table (:func:`test_table`)."""

from __future__ import annotations

import logging
import math
import sys
import time
import warnings
from typing import Literal

import lightning as L
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar
from typing_extensions import override

from xformer.data.loader import data_position

from .callbacks import StepEnds
from .distributed import logging_spec, replay_logging

log = logging.getLogger("xformer")


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_text(step: int, total: int | None, steps_run: int, elapsed_s: float, epoch: int | None) -> str:
    """The bar's text, e.g. ``epoch 1 · step 16/108 · 5.92 steps/s · 0:00:03 elapsed · 0:00:16 left`` (the rate of
    this run's ``steps_run`` steps over ``elapsed_s``; ``--`` before the first step)."""
    rate = steps_run / elapsed_s if steps_run > 0 and elapsed_s > 0 else None
    parts = [] if epoch is None else [f"epoch {epoch}"]
    parts.append(f"step {step}/{total}" if total else f"step {step}")
    parts.append(f"{rate:.3g} steps/s" if rate else "-- steps/s")
    parts.append(f"{_clock(elapsed_s)} elapsed")
    if total:
        parts.append(f"{_clock((total - step) / rate)} left" if rate else "--:--:-- left")
    return " · ".join(parts)


class StepBar(StepEnds, ProgressBar):
    """The training progress in optimizer steps (:func:`progress_text`) with the module's host-side
    ``progress_metrics``: a Rich bar on a terminal, else one plain line every ``plain_every`` of ``max_steps``
    (without it: every ``log_every_n_steps`` steps) and at the last step."""

    def __init__(self, plain_every: float = 0.1) -> None:
        super().__init__()
        self.plain_every = plain_every
        self._enabled = True
        self._progress = None  # the Rich display on a terminal
        self._task = None
        self._start: tuple[int, float] = (0, 0.0)  # (global_step, time) when this fit started training

    @override
    def disable(self) -> None:
        self._enabled = False

    @override
    def enable(self) -> None:
        self._enabled = True

    @override
    def print(self, *args, **kwargs) -> None:
        print(*args, **kwargs, flush=True)

    @override
    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = {**super().get_metrics(trainer, pl_module), **getattr(pl_module, "progress_metrics", {})}
        metrics.pop("v_num", None)  # the logger's version string: nothing a user reads
        return metrics

    def text(self, trainer: L.Trainer) -> str:
        """:func:`progress_text` and the metrics, for ``trainer`` now."""
        step, (start, t0) = trainer.global_step, self._start
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        position = data_position(trainer)
        line = progress_text(step, total, step - start, time.monotonic() - t0, position[0] if position else None)
        metrics = self.get_metrics(trainer, trainer.lightning_module)
        shown = " · ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, float))
        return f"{line} · {shown}" if shown else line

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = (trainer.global_step, time.monotonic())
        if not self._enabled or not trainer.is_global_zero or not sys.stdout.isatty():
            return
        from rich.progress import BarColumn, Progress, TextColumn

        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        self._progress = Progress(BarColumn(), TextColumn("{task.fields[text]}"), transient=False)
        self._task = self._progress.add_task("", total=total, completed=trainer.global_step, text="")
        self._progress.start()

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        if not self.stepped(trainer) or not self._enabled or not trainer.is_global_zero:
            return  # inside an accumulation window
        if self._progress is not None:
            self._progress.update(self._task, completed=step, text=self.text(trainer))
            return
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        every = max(1, int(total * self.plain_every)) if total else max(1, int(trainer.log_every_n_steps or 1))
        if step % every == 0 or step == total or step == self._start[0] + 1:
            print(self.text(trainer), flush=True)

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    @override
    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.on_train_end(trainer, pl_module)


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
    "Ignoring `Trainer(max_time=",  # xformer's timer (the same max_time, checked at optimizer steps' ends) is the one
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
    warnings.filterwarnings("ignore", r"The number of training batches \(\d+\) is smaller than the logging interval")
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
        metrics, step, total, parts = trainer.callback_metrics, trainer.global_step, trainer.max_steps, []
        if (value := metrics.get(self.metric)) is not None:
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
