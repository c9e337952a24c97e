"""A callback for tests: records, in a JSON file, the optimizer step (``global_step``) at every
training batch, validation and checkpoint save of a ``run.py`` job (added with
``+callbacks.probe._target_=tests.train.step_probe.Probe +callbacks.probe.path=<file>``)."""

from __future__ import annotations

import json

import lightning as L
from typing_extensions import override

from xformer.data.loader import data_index, data_position


class Probe(L.Callback):
    """Append ``{"kind", "step", "epoch", ...}`` events to ``path`` as they happen.

    Args:
        path: JSON file rewritten after every event (a killed run keeps what it recorded).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.events: list[dict] = []

    def _add(self, kind: str, trainer: L.Trainer, **extra) -> None:
        epoch = position[0] if (position := data_position(trainer)) is not None else trainer.current_epoch
        self.events.append({"kind": kind, "step": trainer.global_step, "epoch": epoch, **extra})
        with open(self.path, "w") as f:
            json.dump(self.events, f)

    @override
    def on_fit_start(self, trainer, pl_module) -> None:  # noqa: D102
        with open(self.path, "w") as f:  # a fit with nothing left to train records no event
            json.dump(self.events, f)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: D102
        self._add(
            "batch",
            trainer,
            batch_idx=data_index(trainer, batch_idx)[1],  # the data's epoch and batch, as StepSeed reads them
            tokens_seen=int(getattr(pl_module, "tokens_seen", 0)),
            # the step label of its log rows: Lightning's own counter, read here to test the labels
            logged_step=trainer.fit_loop.epoch_loop._batches_that_stepped,
        )

    @override
    def on_validation_end(self, trainer, pl_module) -> None:  # noqa: D102
        if not trainer.sanity_checking:
            self._add("val", trainer)

    @override
    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:  # noqa: D102
        self._add("save", trainer)


def events(path) -> list[dict]:
    """The events a :class:`Probe` wrote to ``path``."""
    with open(path) as f:
        return json.load(f)
