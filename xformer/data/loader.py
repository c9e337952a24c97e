"""The training loader whose position is part of Lightning checkpoints: one epoch at a time
(:class:`ResumableDataLoader`), or the epochs back to back as one endless iterable (:class:`EpochStream`, as
xformer's driver runs them), with the data position of the micro-batch in flight (:func:`data_position`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

from xformer.data.batching import weightless_copy

__all__ = [
    "EpochStream",
    "batches_taken",
    "ResumableDataLoader",
    "data_index",
    "data_position",
    "epochs_done",
    "last_epoch_ends",
    "epoch_budget",
    "optimizer_steps_in_epoch",
    "trainer_batches_consumed",
    "trainer_batches_done",
    "trainer_epoch_batches",
    "training_stream",
]


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


def batches_taken(n: int, limit: int | float | None) -> int:
    """Batches taken from an epoch of ``n`` under ``limit`` (``limit_train_batches``: an int, or a fraction,
    rounded down as Lightning does; None = all). Raises: ValueError when a fraction takes none."""
    if limit is None or isinstance(limit, bool):
        return n
    if isinstance(limit, int):
        return min(n, max(0, limit))
    taken = int(n * float(limit))
    if taken < 1 and float(limit) > 0:
        raise ValueError(f"takes none of an epoch's {n} batches ({1 / n:.3g} or more takes one)")
    return min(n, taken)


Position = tuple[int, int, int]  # (epoch, batches of it done, batches the epoch has)


class EpochStream:
    """The training batches of ``loader``'s epochs one after another, as a single iterable without a length.

    Lightning runs it as one endless epoch, so its loop state never holds an epoch boundary: every
    checkpoint is a position inside that epoch, which Lightning restores as it saved it. The data epochs are
    counted here instead: :meth:`position` maps the trainer's count of training micro-batches to
    ``(epoch, batches done in it, batches it has)``, and the schedule, the logged ``epoch`` and the seeds read
    that. The loader's batch sampler is set to each epoch in turn (no ``set_epoch`` from Lightning: the
    stream has no ``sampler`` attribute for it to find).

    Args:
        loader: a :class:`ResumableDataLoader` (its batch sampler has ``resume(epoch, n)``).
        consumed: the trainer's count of training micro-batches whose update is done (checkpoints store
            the position after it; e.g. :func:`trainer_batches_consumed`).
        max_epochs: epochs to serve (None or -1: no end).
        limit_batches: batches taken from each epoch: an int, or a fraction of the epoch (as
            ``lightning.Trainer(limit_train_batches=...)``); None = all.
        accumulate: micro-batches per optimizer step. An epoch whose batch count is not a multiple of it
            ends with copies of its last batch that weigh nothing (``zero_weight``: no loss, no tokens),
            so every window of the epoch is whole, an epoch's end is an optimizer step's end, and the
            epoch's last step is the update of its last batches alone (as Lightning's shorter last window).

    Raises:
        ValueError: ``limit_batches`` leaves no batch of an epoch.
    """

    _KEEP = 256  # positions remembered behind the newest yielded batch (the trainer's fetcher runs ahead)

    def __init__(
        self,
        loader: ResumableDataLoader,
        consumed: Callable[[], int],
        max_epochs: int | None = None,
        limit_batches: int | float | None = None,
        accumulate: int = 1,
    ) -> None:
        if accumulate < 1:
            raise ValueError(f"accumulate must be >= 1, got {accumulate}")
        self.loader = loader
        self.accumulate = int(accumulate)
        self._consumed = consumed
        self.max_epochs = None if max_epochs is None or max_epochs < 0 else int(max_epochs)
        self.limit_batches = limit_batches
        self._start: tuple[int, int] = (0, 0)  # where the next iteration starts: (epoch, batches done)
        self._base = 0  # the trainer's consumed count at that start
        self._seen: dict[int, Position] = {}  # consumed count -> position after that micro-batch
        self._iterating = False  # an iteration has started (the batch sampler follows it)
        self._restored: Position | None = None  # the position a checkpoint stored, as stored

    def epoch_batches(self) -> int:
        """Batches taken from the batch sampler's current epoch (its length, or fewer under ``limit_batches``),
        before the weightless copies that fill its last window."""
        return batches_taken(len(self.loader.batch_sampler), self.limit_batches)

    def _at_base(self) -> Position:
        """The position the stream starts from: a restored one as it was stored (an epoch's last batch stays
        that, the next iteration starts the next epoch), else the start epoch's beginning."""
        if self._restored is not None:
            return self._restored
        self.loader.batch_sampler.set_epoch(self._start[0])
        return (*self._start, self._windows(self.epoch_batches()))

    def _windows(self, batches: int) -> int:
        """``batches`` rounded up to whole accumulation windows."""
        return -(-batches // self.accumulate) * self.accumulate

    def position(self, consumed: int) -> Position:
        """``(epoch, batches done, epoch's batches)`` once ``consumed`` training micro-batches (the trainer's
        count) are done. Raises: LookupError for a count this stream has not yielded or has forgotten."""
        if consumed in self._seen:
            return self._seen[consumed]
        if consumed == self._base and not self._iterating:  # restored, not iterated yet
            return self._at_base()
        raise LookupError(f"training micro-batch {consumed} is not among the ones this stream yielded last")

    def __iter__(self):
        consumed = self._consumed()
        if consumed != self._base or consumed in self._seen:  # iterated before: continue where training is
            epoch, done, n = self._restored = self.position(consumed)
            self._start, self._base = ((epoch + 1, 0) if done >= n else (epoch, done)), consumed
        epoch, done = self._start
        count, sampler = self._base, self.loader.batch_sampler
        self._seen.clear()
        self._seen[count] = self._at_base()  # the start (also past the last epoch)
        self._iterating = True
        while self.max_epochs is None or epoch < self.max_epochs:
            sampler.resume(epoch, done)
            real = self.epoch_batches()
            n = self._windows(real)
            last = None
            for last in itertools.islice(iter(self.loader), max(0, real - done)):
                done, count = done + 1, count + 1
                self._seen[count] = (epoch, done, n)
                self._seen.pop(count - self._KEEP, None)
                yield last
            while last is not None and done < n:  # the epoch's last window, filled with copies that weigh 0
                done, count = done + 1, count + 1
                self._seen[count] = (epoch, done, n)
                self._seen.pop(count - self._KEEP, None)
                yield weightless_copy(last)
            epoch, done = epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "batches_done", "epoch_batches"}`` after the micro-batches the trainer has consumed (the
        same keys as :meth:`ResumableDataLoader.state_dict`, so either reads the other's)."""
        epoch, done, n = self.position(self._consumed())
        return {"epoch": epoch, "batches_done": done, "epoch_batches": n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Start the next iteration after ``state``'s position (the next epoch's start when it was an epoch's
        last batch)."""
        epoch, done = int(state["epoch"]), int(state["batches_done"])
        n = int(state.get("epoch_batches") or 0)
        self._start = (epoch + 1, 0) if n and done >= n else (epoch, done)
        self._restored = (epoch, done, n) if n else None
        self._base = self._consumed()
        self._seen.clear()
        self._iterating = False


def trainer_batches_consumed(trainer: L.Trainer | None) -> int:
    """Training micro-batches ``trainer`` has processed over the whole run (its checkpoints carry the count
    over; 0 without a trainer)."""
    if trainer is None:
        return 0
    return int(trainer.fit_loop.epoch_loop.batch_progress.total.processed)


def training_stream(trainer: L.Trainer) -> EpochStream | None:
    """The :class:`EpochStream` ``trainer`` trains on, or None (another loader, or none yet)."""
    stream = getattr(trainer, "train_dataloader", None)
    return stream if isinstance(stream, EpochStream) else None


def data_position(trainer: L.Trainer) -> Position | None:
    """``(epoch, batches done, epoch's batches)`` of the training micro-batch in flight (during its hooks, from
    ``on_train_batch_start`` to ``on_train_batch_end``), counted by the :class:`EpochStream` the trainer runs;
    None when it runs another loader."""
    stream = training_stream(trainer)
    if stream is None:
        return None
    return stream.position(int(trainer.fit_loop.epoch_loop.batch_progress.total.ready))


def last_epoch_ends(trainer: L.Trainer) -> bool:
    """Whether the training micro-batch in flight is the last batch of the last epoch (``max_epochs``): of the
    :class:`EpochStream`'s epochs, or of Lightning's own when the trainer runs another loader."""
    stream = training_stream(trainer)
    if stream is not None:
        position = data_position(trainer)
        return stream.max_epochs is not None and position is not None and epochs_done(position) >= stream.max_epochs
    if not trainer.max_epochs or trainer.max_epochs < 0 or trainer.current_epoch + 1 < trainer.max_epochs:
        return False
    progress = trainer.fit_loop.epoch_loop.batch_progress
    return progress.is_last_batch or progress.current.ready == trainer.num_training_batches


def epoch_budget(trainer: L.Trainer) -> int | None:
    """The run's epoch budget: the :class:`EpochStream`'s, else Lightning's (None: none)."""
    stream = training_stream(trainer)
    limit = stream.max_epochs if stream is not None else getattr(trainer, "max_epochs", None)
    return None if limit is None or limit < 0 else int(limit)


def data_index(trainer: L.Trainer, batch_idx: int) -> tuple[int, int]:
    """``(epoch, index of the batch in it)`` of the training micro-batch in flight: from the
    :class:`EpochStream`, else Lightning's ``(current_epoch, batch_idx)``."""
    position = data_position(trainer)
    if position is None:
        return int(trainer.current_epoch), int(batch_idx)
    return position[0], position[1] - 1


def epochs_done(position: Position) -> int:
    """Whole epochs finished at ``position``."""
    epoch, done, n = position
    return epoch + (done >= n)
