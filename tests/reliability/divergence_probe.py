"""Callbacks for the divergence tests (added to a ``run.py`` job with ``+callbacks.<name>._target_=...``).

* :class:`StepProbe` -- records, per optimizer step in flight, whether its training loss and its gradient were
  finite, in a JSON-lines file: the tests' reference for the first bad step.
* :class:`PoisonGradient` -- puts a NaN into one gradient element at one optimizer step, the loss staying finite.
"""

from __future__ import annotations

import json
import math

import lightning as L
import torch
from typing_extensions import override


class StepProbe(L.Callback):
    """Append ``{"step", "what", "finite"}`` to ``path``: ``what`` is ``"loss"`` (each micro-batch's loss, before its
    backward) or ``"grad"`` (every gradient element, before the optimizer step); ``step``: the optimizer step in
    flight (``trainer.global_step + 1``). Written before any later hook can stop the run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _write(self, step: int, what: str, finite: bool) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, "what": what, "finite": finite}) + "\n")

    @override
    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._write(trainer.global_step + 1, "loss", math.isfinite(float(loss)))

    @override
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self._write(trainer.global_step + 1, "grad", all(bool(torch.isfinite(g).all()) for g in grads))


class PoisonGradient(L.Callback):
    """Set the first element of the first parameter's gradient to NaN before optimizer step ``step`` (1-based), on
    global rank ``rank`` only (``None``: every rank)."""

    def __init__(self, step: int, rank: int | None = None) -> None:
        self.step = int(step)
        self.rank = rank

    @override
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step + 1 == self.step and self.rank in (None, trainer.global_rank):
            grad = next(p.grad for p in pl_module.parameters() if p.grad is not None)
            grad.view(-1)[0] = math.nan
