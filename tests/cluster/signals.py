"""Test callback for the cluster tests: ask SLURM to send this job its requeue signal, as SLURM does
``--signal`` seconds before a time limit, at a chosen training batch of each attempt."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import lightning as L
from typing_extensions import override

from xformer.jobs.callbacks import StopCheckpoint


class SlurmSignalAt(L.Callback):
    """On global rank 0, as this attempt's ``batches``-th training batch starts, run ``scancel
    --signal=<signal> <job>`` -- SLURM delivers it to every task of the job -- for the first ``times``
    attempts (``SLURM_RESTART_COUNT`` 0 .. times-1), then wait until the signal has arrived (up to
    ``wait_s``), so it falls while that batch's optimizer step is in flight and the stop comes after that
    very step. Appends ``{"restart", "start_step"}`` when each attempt starts training and ``{"restart",
    "signal_step"}`` (the step in flight when the signal came) to ``log`` (JSON lines)."""

    def __init__(self, batches: int, log: str, signal: str = "USR2", times: int = 1, wait_s: float = 5.0) -> None:
        self.batches, self.path, self.signal = int(batches), Path(log), signal
        self.times, self.wait_s, self.seen = int(times), float(wait_s), 0
        self.restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        self._sent = False

    def _rank0(self, trainer) -> bool:
        return trainer.global_rank == 0

    @override
    def on_train_start(self, trainer, pl_module) -> None:  # noqa: D102
        if self._rank0(trainer):
            self._write({"restart": self.restart, "start_step": int(trainer.global_step)})

    def _write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        self.seen += 1
        if self.seen != self.batches or self.restart >= self.times:
            return
        if self._rank0(trainer):
            subprocess.run(["scancel", f"--signal={self.signal}", os.environ["SLURM_JOB_ID"]], check=True)
        self._sent = True
        requeue = [cb for cb in trainer.callbacks if isinstance(cb, StopCheckpoint)]
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:  # the handler runs between these sleeps
            time.sleep(0.05)
            if any(cb.received_signal for cb in requeue):
                break

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: D102
        if self._sent and self._rank0(trainer):
            self._write({"restart": self.restart, "signal_step": int(trainer.global_step)})
        self._sent = False
