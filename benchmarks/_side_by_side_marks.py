"""A Lightning callback for benchmarks/nanogpt_side_by_side.py: prints a marker line when the first
training step is done and around every validation, so the script can time start-up and evaluation
from the moments it reads them (it is added with ``+callbacks.side_by_side._target_=...``)."""

from __future__ import annotations

import sys

import lightning as L
from typing_extensions import override


def _mark(what: str) -> None:
    print(f"[side-by-side] {what}", file=sys.stdout, flush=True)


class Marks(L.Callback):
    """Markers: ``first step`` (after optimizer step 1), ``val start``/``val end`` (each validation)."""

    def __init__(self) -> None:
        self._first = True

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._first and trainer.global_step >= 1:
            self._first = False
            _mark("first step")

    @override
    def on_validation_start(self, trainer, pl_module) -> None:
        _mark("val start")

    @override
    def on_validation_end(self, trainer, pl_module) -> None:
        _mark("val end")
