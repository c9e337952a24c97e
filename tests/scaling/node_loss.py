"""Test callback: lose one node of a multi-node job at a chosen optimizer step, once per marker file."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import lightning as L
from typing_extensions import override


class LoseNodeAt(L.Callback):
    """On global rank ``rank``, as the batch after optimizer step ``step`` starts: write ``{"step", "time",
    "pids"}`` to ``marker`` and send ``how`` to this node's launcher (``parent=True``: the ``torchrun`` agent
    this rank's process was started by) and to this process. ``how="KILL"`` is a node whose processes die
    (their connections close); ``how="STOP"`` is a node that vanishes with its connections open (power or
    network lost), which only the collective timeout notices. Does nothing once ``marker`` exists, so the
    same command, run again, trains on."""

    def __init__(self, step: int, marker: str, rank: int = 1, how: str = "KILL", parent: bool = True) -> None:
        self.step, self.marker, self.rank = int(step), Path(marker), int(rank)
        self.signum = getattr(signal, "SIG" + how)
        self.parent = bool(parent)

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        if trainer.global_rank != self.rank or trainer.global_step != self.step or self.marker.exists():
            return
        pids = [os.getppid(), os.getpid()] if self.parent else [os.getpid()]
        self.marker.write_text(json.dumps({"step": self.step, "time": time.time(), "pids": pids}))
        for pid in pids:
            os.kill(pid, self.signum)
