"""The training data's epochs back to back (``EpochStream``): the same batches as the loader's epochs one
by one, positions that map the trainer's count of micro-batches to (epoch, batch), and a state that
restarts the stream after any batch, an epoch's last included. The stream never ends: the run's ``max_steps``
ends it."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DataLoader

from xformer.data.batching import RandomBatchSampler, TokenBudgetBatchSampler
from xformer.data.loader import EpochStream

LENGTHS = [3, 5, 2, 7, 4, 4, 6, 1, 2, 8] * 3


def _loader(kind: str) -> DataLoader:
    if kind == "token_budget":
        sampler = TokenBudgetBatchSampler(LENGTHS, 16, shuffle=True, seed=3)
        return DataLoader(list(range(len(LENGTHS))), batch_sampler=sampler)
    return DataLoader(list(range(40)), batch_sampler=RandomBatchSampler(40, 3, 5, seed=1))


def _epochs(kind: str, n_epochs: int, limit=None) -> list[list[list[int]]]:
    """The reference: each epoch of a fresh loader, set the plain way, cut to ``limit`` batches."""
    loader, out = _loader(kind), []
    for epoch in range(n_epochs):
        loader.batch_sampler.set_epoch(epoch)
        batches = [b.tolist() for b in loader]
        out.append(batches[: len(batches) if limit is None else limit])
    return out


class _Counter:
    """Stands in for the trainer's count of processed micro-batches."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        return self.n


@pytest.mark.parametrize("kind", ["token_budget", "random"])
@pytest.mark.parametrize("limit", [None, 2])
def test_the_stream_is_the_epochs_one_after_another(kind, limit):
    ref = _epochs(kind, 3, limit)
    counter = _Counter()
    stream = EpochStream(_loader(kind), consumed=counter, epoch_batches=limit)
    seen = []
    for batch in itertools.islice(stream, sum(len(e) for e in ref)):
        counter.n += 1
        seen.append(batch.tolist())
        epoch, done, n = stream.position(counter.n)
        assert batch.tolist() == ref[epoch][done - 1] and n == len(ref[epoch])
    assert seen == [b for epoch in ref for b in epoch]
    assert stream.position(counter.n)[0] == 2 and stream.position(counter.n)[1] == len(ref[2])


@pytest.mark.parametrize("kind", ["token_budget", "random"])
def test_a_restored_stream_continues_after_any_batch(kind):
    """A state taken after each batch (an epoch's last one included) restarts a new stream at the next batch;
    the trainer's count carries over, as a checkpoint's loop state does."""
    ref = [b for epoch in _epochs(kind, 3) for b in epoch]
    for consumed in range(len(ref)):
        counter = _Counter()
        stream = EpochStream(_loader(kind), consumed=counter)
        for _ in itertools.islice(stream, consumed + 1):  # the trainer's fetcher runs one batch ahead
            pass
        counter.n = consumed
        state = stream.state_dict()
        fresh = EpochStream(_loader(kind), consumed=counter)
        fresh.load_state_dict(state)
        assert [b.tolist() for b in itertools.islice(fresh, len(ref) - consumed)] == ref[consumed:], consumed


def test_a_state_at_an_epochs_last_batch_restarts_at_the_next_epoch():
    """A stored position (epoch, batches done, epoch's batches) restarts the stream at the next batch; a
    finished epoch at the next epoch's start."""
    ref = _epochs("random", 3)
    flat = [b for epoch in ref for b in epoch]
    for state, start in (
        ({"epoch": 1, "batches_done": 2, "epoch_batches": 5}, 5 + 2),
        ({"epoch": 0, "batches_done": 5, "epoch_batches": 5}, 5),
    ):
        stream = EpochStream(_loader("random"), consumed=_Counter())
        stream.load_state_dict(state)
        assert [b.tolist() for b in itertools.islice(stream, len(flat) - start)] == flat[start:]


def test_a_position_the_stream_has_not_reached_is_an_error():
    counter = _Counter()
    stream = EpochStream(_loader("random"), consumed=counter)
    next(iter(stream))
    with pytest.raises(LookupError):
        stream.position(7)


def test_under_accumulation_each_epoch_ends_with_a_whole_window_of_weightless_copies():
    """5 batches an epoch, 2 micro-batches a step: each epoch gets one copy of its last batch, all of whose rows
    have ``zero_weight`` (the training step counts no loss and no tokens for them), so the epoch's last step
    is the update of its last batch alone, and the next epoch starts a window."""
    data = [{"tgt": torch.tensor([i])} for i in range(40)]
    loader = DataLoader(data, batch_sampler=RandomBatchSampler(40, 3, 5, seed=1))
    ref = _epochs("random", 2)
    counter = _Counter()
    stream = EpochStream(loader, consumed=counter, accumulate=2)
    got = []
    for batch in itertools.islice(stream, 12):
        counter.n += 1
        got.append((batch["tgt"][:, 0].tolist(), batch.get("zero_weight")))
        assert stream.position(counter.n)[2] == 6
    for epoch in range(2):
        real, copy = got[6 * epoch : 6 * epoch + 5], got[6 * epoch + 5]
        assert [b for b, _ in real] == ref[epoch] and all(w is None for _, w in real)
        assert copy[0] == ref[epoch][-1] and copy[1].tolist() == [True] * 3
