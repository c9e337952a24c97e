"""The training data's epochs back to back, as xformer's driver trains on them (:class:`EpochStream`: one endless
iterable that Lightning runs as one epoch, while the run counts optimizer steps), and the data position of the
micro-batch in flight (:func:`data_position`): the data's epoch is a data-side count, logged, shown in the bar,
seeding the shuffle and dropout, and stored in every checkpoint for exact resume."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import lightning as L
from torch.utils.data import DataLoader

from xformer.data.batching import weightless_copy

__all__ = ["EpochStream", "Position", "data_index", "data_position", "trainer_batches_consumed"]

Position = tuple[int, int, int]  # (epoch, batches of it done, batches the epoch has)


class EpochStream:
    """The training batches of ``loader``'s epochs one after another, as a single iterable without a length.

    Lightning runs it as one endless epoch, so its loop state never holds an epoch boundary: every
    checkpoint is a position inside that epoch, which Lightning restores as it saved it. The data epochs are
    counted here instead: :meth:`position` maps the trainer's count of training micro-batches to
    ``(epoch, batches done in it, batches it has)``, and the logged ``epoch``, the bar and the seeds read
    that. The loader's batch sampler is set to each epoch in turn (no ``set_epoch`` from Lightning: the
    stream has no ``sampler`` attribute for it to find).

    Args:
        loader: a ``DataLoader`` whose batch sampler has ``resume(epoch, n)``.
        consumed: the trainer's count of training micro-batches whose update is done (checkpoints store
            the position after it; e.g. :func:`trainer_batches_consumed`).
        epoch_batches: batches taken from each epoch (``trainer.limit_train_batches`` converted by
            :func:`xformer.config.steps.steps_from_epochs`); None = all.
        accumulate: micro-batches per optimizer step. An epoch whose batch count is not a multiple of it
            ends with copies of its last batch that weigh nothing (``zero_weight``: no loss, no tokens),
            so every window of the epoch is whole, an epoch's end is an optimizer step's end, and the
            epoch's last step is the update of its last batches alone (as Lightning's shorter last window).
    """

    _KEEP = 256  # positions remembered behind the newest yielded batch (the trainer's fetcher runs ahead)

    def __init__(
        self,
        loader: DataLoader,
        consumed: Callable[[], int],
        epoch_batches: int | None = None,
        accumulate: int = 1,
    ) -> None:
        if accumulate < 1:
            raise ValueError(f"accumulate must be >= 1, got {accumulate}")
        self.loader = loader
        self.accumulate = int(accumulate)
        self._consumed = consumed
        self.limit = epoch_batches
        self._start: tuple[int, int] = (0, 0)  # where the next iteration starts: (epoch, batches done)
        self._base = 0  # the trainer's consumed count at that start
        self._seen: dict[int, Position] = {}  # consumed count -> position after that micro-batch
        self._iterating = False  # an iteration has started (the batch sampler follows it)
        self._restored: Position | None = None  # the position a checkpoint stored, as stored

    def epoch_batches(self) -> int:
        """Batches taken from the batch sampler's current epoch (its length, or fewer under ``epoch_batches``),
        before the weightless copies that fill its last window."""
        n = len(self.loader.batch_sampler)
        return n if self.limit is None else min(n, self.limit)

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
        while True:  # the run's budget (max_steps) ends it
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
        """``{"epoch", "batches_done", "epoch_batches"}`` after the micro-batches the trainer has consumed."""
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
    return 0 if trainer is None else int(trainer.fit_loop.epoch_loop.batch_progress.total.processed)


def data_position(trainer: L.Trainer) -> Position | None:
    """``(epoch, batches done, epoch's batches)`` of the training micro-batch in flight (during its hooks, from
    ``on_train_batch_start`` to ``on_train_batch_end``), counted by the :class:`EpochStream` the trainer runs;
    None when it runs another loader."""
    stream = getattr(trainer, "train_dataloader", None)
    if not isinstance(stream, EpochStream):
        return None
    return stream.position(int(trainer.fit_loop.epoch_loop.batch_progress.total.ready))


def data_index(trainer: L.Trainer, batch_idx: int) -> tuple[int, int]:
    """``(epoch, index of the batch in it)`` of the training micro-batch in flight: from the
    :class:`EpochStream`, else (a plain ``lightning.Trainer`` on the data module's loader) Lightning's
    ``(current_epoch, batch_idx)``."""
    position = data_position(trainer)
    return (int(trainer.current_epoch), int(batch_idx)) if position is None else (position[0], position[1] - 1)
