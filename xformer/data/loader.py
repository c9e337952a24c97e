"""The training loader whose position inside an epoch is part of Lightning checkpoints."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

__all__ = ["ResumableDataLoader", "optimizer_steps_in_epoch", "trainer_batches_done", "trainer_epoch_batches"]


def trainer_batches_done(trainer: L.Trainer | None) -> int:
    """Training batches of the current epoch ``trainer`` has consumed (0 without a trainer): the
    loop's processed count, not the loader's fetch count (the data fetcher runs one batch ahead)."""
    if trainer is None:
        return 0
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)


def trainer_epoch_batches(trainer: L.Trainer | None, n: int) -> int:
    """Training batches ``trainer`` takes from an epoch of ``n``: fewer under
    ``trainer.limit_train_batches`` (Lightning's ``num_training_batches``), else ``n``."""
    limit = getattr(trainer, "num_training_batches", None) if trainer is not None else None
    if isinstance(limit, int) and 0 < limit < n:
        return limit
    return n


def optimizer_steps_in_epoch(batches_done: int, accumulate: int) -> int:
    """Optimizer steps after ``batches_done`` batches of an epoch with ``accumulate`` batches per step (Lightning
    steps on an epoch's last batch, so a trailing partial window counts as one step)."""
    return math.ceil(batches_done / max(1, accumulate))


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` whose position inside an epoch is part of Lightning checkpoints.

    Lightning calls ``state_dict()`` when it saves a checkpoint and ``load_state_dict()`` before it
    iterates a restored run's loader (it does so for every loader that has both). The state is the
    batch sampler's epoch and ``batches_done()`` -- how many batches of that epoch the trainer has
    consumed (not how many were fetched: loaders prefetch); restoring calls the batch sampler's
    ``resume`` so the next iteration yields exactly the batches the interrupted run had not reached.

    Why not torchdata's ``StatefulDataLoader``: its state is its own count of the batches it has
    yielded, which runs ahead of the trainer whenever Lightning's data fetcher has fetched the next
    batch (it does, to know whether the epoch ends). The position here comes from the trainer's
    progress counter, exact however far the loader has fetched, and the samplers restart an epoch
    at any batch (``resume``) with no worker state to restore.

    Args:
        *args, **kwargs: ``DataLoader`` arguments; ``batch_sampler`` must have ``resume(epoch, n)``.
        batches_done: returns the batches of the current epoch already consumed (e.g.
            :func:`trainer_batches_done`); None counts 0 (the state then restarts the epoch).
        epoch_batches: maps the sampler's epoch length to the number of batches the trainer takes
            from an epoch (:func:`trainer_epoch_batches`); None = all of them.
    """

    def __init__(
        self,
        *args: Any,
        batches_done: Callable[[], int] | None = None,
        epoch_batches: Callable[[int], int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._batches_done = batches_done
        self._epoch_batches = epoch_batches

    def epoch_batches(self) -> int:
        """Batches the trainer takes from this epoch: the batch sampler's length, or fewer under
        ``trainer.limit_train_batches``."""
        n = len(self.batch_sampler)
        return int(self._epoch_batches(n)) if self._epoch_batches is not None else n

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "batches_done", "epoch_batches"}`` of the batch sampler's current epoch
        (``epoch_batches``: the epoch's length as the trainer runs it, so a reader can tell a
        finished epoch from a stop inside it)."""
        return {
            "epoch": int(self.batch_sampler.sampler.epoch),
            "batches_done": int(self._batches_done()) if self._batches_done is not None else 0,
            "epoch_batches": self.epoch_batches(),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next iteration continue where ``state`` was taken: inside its epoch, or at the
        start of the next one when all of the epoch's ``epoch_batches`` were done."""
        epoch, done = int(state["epoch"]), int(state["batches_done"])
        n = int(state.get("epoch_batches") or 0)
        if n and done >= n:
            epoch, done = epoch + 1, 0
        self.batch_sampler.resume(epoch, done)
