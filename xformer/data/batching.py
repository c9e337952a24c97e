"""Batch samplers and collate functions shared by the xformer DataModules.

Samplers yield lists of dataset indices (``DataLoader(batch_sampler=...)``) and shard batches across DDP ranks
themselves: use ``Trainer(use_distributed_sampler=False)``. Each has ``set_epoch(epoch)``, also reachable as
``.sampler.set_epoch`` (Lightning calls it on ``dataloader.batch_sampler.sampler`` when a training epoch starts;
outside Lightning call it yourself), and ``resume(epoch, batches_done)``: the next iteration continues ``epoch``
after its first ``batches_done`` batches, so :class:`xformer.data.loader.EpochStream` resumes a mid-epoch
checkpoint with exactly the batches an uninterrupted run sees.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset, Sampler, Subset

from xformer.data.tokenizers import PAD


class _EpochClock:
    """Holds the current epoch; exposed as ``batch_sampler.sampler`` so Lightning finds ``set_epoch``."""

    def __init__(self) -> None:
        self.epoch = 0
        self.skip: tuple[int, int] | None = None  # (epoch, batches) to skip once, set by resume()

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch used to seed the next iteration."""
        self.epoch = int(epoch)

    def take_skip(self) -> int:
        """Batches the iteration starting now must skip (a pending resume of this epoch), once."""
        skip, self.skip = self.skip, None
        return skip[1] if skip is not None and skip[0] == self.epoch else 0


class _EpochSampler(Sampler[list[int]]):
    """Base of the seeded batch samplers: the epoch (also settable through ``.sampler``) and ``resume``."""

    sampler: _EpochClock

    @property
    def epoch(self) -> int:
        """Epoch whose batches the next iteration yields."""
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (changes the batches' membership and order, or the draws)."""
        self.sampler.set_epoch(epoch)

    def resume(self, epoch: int, batches_done: int) -> None:
        """Make the next iteration continue ``epoch`` after this rank's first ``batches_done`` batches
        (or start ``epoch + 1`` when that is all of them); later iterations are whole epochs again.

        Raises:
            ValueError: a negative ``epoch`` or ``batches_done``.
        """
        if epoch < 0 or batches_done < 0:
            raise ValueError(f"resume needs epoch, batches_done >= 0, got {epoch}, {batches_done}")
        self.set_epoch(epoch)
        if batches_done >= len(self):
            epoch, batches_done = epoch + 1, 0
            self.set_epoch(epoch)
        self.sampler.skip = (epoch, batches_done) if batches_done else None


def shard_batches(
    batches: list[list[int]], num_replicas: int, rank: int, copy_offset: int | None = None
) -> list[list[int]]:
    """Give rank ``rank`` its share of ``batches`` so every rank gets the same number of batches.

    The list is first made a multiple of ``num_replicas`` long by repeating batches from its start (repeated
    examples carry the same ``idx``, so eval duplicates can be removed), then rank ``r`` takes
    ``batches[r::num_replicas]`` (interleaved, so ranks see batches of similar size at each step).
    With ``copy_offset`` (training: the data set's size ``n``) the repeated batches' indices are
    shifted by ``n``, which :class:`WeightlessCopies` reads as "this example is a copy: no loss, no
    tokens", so an epoch's uneven tail trains every example once (pytorch#25162).

    Raises:
        ValueError: ``rank`` not in ``[0, num_replicas)``.
    """
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
    if num_replicas == 1:
        return list(batches)
    n = len(batches)
    if n % num_replicas:
        n_pad = num_replicas - n % num_replicas
        shift = copy_offset or 0
        batches = list(batches) + [[j + shift for j in batches[i % n]] for i in range(n_pad)]
    return batches[rank::num_replicas]


class WeightlessCopies(Dataset):
    """A training data set as the DDP loader sees it: index ``i < n`` is example ``i``; index
    ``i >= n`` is example ``i - n`` as a *copy* that a rank trains on only so that every rank takes
    the same number of steps (see :func:`shard_batches`). Every example gets ``zero_weight``
    (``False``; ``True`` for a copy), which the collate functions batch and the training step reads:
    a copy's labels are ignored and its tokens are not counted.

    Args:
        base: the data set (``len(base) = n``); its other attributes are reached through this one.
    """

    def __init__(self, base: Dataset) -> None:
        self.base = base
        self.n = len(base)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        copy = i >= self.n
        return {**self.base[i - self.n if copy else i], "zero_weight": copy}

    def __getattr__(self, name: str):  # lengths(), sort_keys(), ... of the wrapped data set
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)


class SpreadSubset(Subset):
    """``fraction`` of ``dataset``'s examples, evenly spread over their lengths (``dataset.lengths()``, else
    over their order): of the examples sorted by length, the middle one of each of ``k = int(n * fraction)``
    equal strata. A fractional ``trainer.limit_val_batches`` becomes this subset, so validation on a fraction
    represents the split instead of taking the first (shortest) batches. Items keep their own ``idx``.

    Raises:
        ValueError: ``fraction`` outside ``(0, 1]``."""

    def __init__(self, dataset: Dataset, fraction: float) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        n = len(dataset)
        lengths = np.asarray(dataset.lengths() if hasattr(dataset, "lengths") else np.zeros(n), dtype=np.int64)
        k = max(1, int(n * fraction))
        middles = np.argsort(lengths, kind="stable")[(2 * np.arange(k) + 1) * n // (2 * k)]
        super().__init__(dataset, np.sort(middles).tolist())
        self._lengths = lengths[self.indices].tolist()

    def lengths(self) -> list[int]:
        return self._lengths

    def sort_keys(self) -> list[list[int]]:
        keys = self.dataset.sort_keys() if hasattr(self.dataset, "sort_keys") else ()
        return [[k[i] for i in self.indices] for k in keys]


class TokenBudgetBatchSampler(_EpochSampler):
    """Length-bucketed batches whose padded size ``max_len_in_batch * n_sentences <= tokens_per_batch``.

    Per epoch (seeded by ``(seed, epoch)``):

    1. ``shuffle=True``: examples are put in random order (``shuffle=False``: original order).
    2. They are sorted by length, then by ``sort_keys`` (stable, so remaining ties keep the
       random order), and cut greedily into batches: an example joins the current batch while
       ``max_len * (n + 1) <= budget``. An example longer than the budget gets a batch of its own.
    3. ``shuffle=True``: the batch order is shuffled (``False``: :func:`spread_order`).
    4. With ``num_replicas > 1`` the batches are split across ranks by :func:`shard_batches`.

    The sorted sequence of lengths -- hence the number of batches -- is the same every epoch, while batch
    membership (ties between equal lengths are broken randomly) and batch order change with the epoch.

    Args:
        lengths: per-example size in tokens (for seq2seq: ``max(len(src), len(tgt))``).
        tokens_per_batch: padded-token budget per batch, **per device**.
        shuffle: randomise batch membership and order (train) or not (eval: sorted, deterministic).
        seed: base seed; the epoch's generator is ``numpy.random.default_rng((seed, epoch))``.
        num_replicas: number of DDP ranks sharing the data.
        rank: this process's rank.
        sort_keys: optional extra per-example keys that order examples of equal length, e.g.
            ``[src_lengths, tgt_lengths]`` so both sides of a seq2seq batch pad little.

    Yields:
        ``list[int]`` of dataset indices, ordered by length within the batch.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        tokens_per_batch: int,
        shuffle: bool,
        seed: int,
        num_replicas: int = 1,
        rank: int = 0,
        sort_keys: Sequence[Sequence[int]] = (),
        weightless_copies: bool = False,
    ) -> None:
        if tokens_per_batch < 1:
            raise ValueError(f"tokens_per_batch must be >= 1, got {tokens_per_batch}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.tokens_per_batch, self.shuffle, self.seed = int(tokens_per_batch), bool(shuffle), int(seed)
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.sort_keys = [np.asarray(k, dtype=np.int64) for k in sort_keys]
        if any(len(k) != len(self.lengths) for k in self.sort_keys):
            raise ValueError("every sort key must have one entry per example")
        self.weightless_copies = bool(weightless_copies)
        self.sampler = _EpochClock()
        self._cache: tuple[int, list[list[int]]] | None = None

    def all_batches(self) -> list[list[int]]:
        """All batches of the current epoch before sharding across ranks (cached per epoch)."""
        epoch = self.epoch
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        n = len(self.lengths)
        rng = np.random.default_rng((self.seed, epoch))
        idx = rng.permutation(n) if self.shuffle else np.arange(n)
        idx = idx[np.lexsort([k[idx] for k in reversed(self.sort_keys)] + [self.lengths[idx]])]  # last key first
        batches = _greedy_batches(idx, self.lengths[idx], self.tokens_per_batch)
        # shuffled, or for evaluation in spread order: a fraction of the batches (``limit_val_batches``, the
        # decode subset) then spans the lengths instead of taking the shortest examples
        perm = rng.permutation(len(batches)) if self.shuffle else spread_order(len(batches))
        batches = [batches[i] for i in perm]
        self._cache = (epoch, batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        skip = self.sampler.take_skip()
        offset = len(self.lengths) if self.weightless_copies else None
        yield from shard_batches(self.all_batches(), self.num_replicas, self.rank, offset)[skip:]

    def __len__(self) -> int:
        """Number of batches this rank yields in the current epoch."""
        return -(-len(self.all_batches()) // self.num_replicas)


def spread_order(n: int) -> list[int]:
    """``range(n)`` in van der Corput order from its second point (the item for point ``x`` is
    ``floor(n * x)``, the points are 1/2, 1/4, 3/4, 1/8, ... and 0 last; repeats skipped): every prefix is
    spread evenly over ``range(n)`` and keeps off its ends (8 -> 4 2 6 1 5 3 7 0). For ``n`` length-sorted
    batches the first ``k`` then span the lengths, and the shortest batch, which holds the most examples,
    does not weigh on a short prefix. With ``2**bits >= n`` points spaced ``<= 1`` apart, every index is reached.
    """
    order: list[int] = []
    seen: set[int] = set()
    bits = max(1, (n - 1).bit_length())
    for j in [*range(1, 2**bits), 0]:
        i = n * int(f"{j:0{bits}b}"[::-1], 2) >> bits
        if i not in seen:
            seen.add(i)
            order.append(i)
    return order


def _greedy_batches(idx: np.ndarray, lens: np.ndarray, budget: int) -> list[list[int]]:
    """Cut length-sorted ``idx`` into batches with ``max(lens) * count <= budget`` (>= 1 per batch)."""
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for i, ln in zip(idx.tolist(), lens.tolist(), strict=True):
        new_max = max(cur_max, ln)
        if cur and new_max * (len(cur) + 1) > budget:
            batches.append(cur)
            cur, new_max = [], ln
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of PAD positions when each batch is padded to its longest member.

    ``1 - sum(real tokens) / sum(max_len_in_batch * batch_size)`` over ``batches``; 0.0 for no
    batches.
    """
    lengths = np.asarray(lengths)
    real = padded = 0
    for b in batches:
        ls = lengths[np.asarray(b, dtype=np.int64)]
        real += int(ls.sum())
        padded += int(ls.max()) * len(b)
    return 0.0 if padded == 0 else 1.0 - real / padded


class SequentialBatchSampler(_EpochSampler):
    """Deterministic fixed-size batches ``[0..B-1], [B..2B-1], ...`` of ``range(n)``, sharded across ranks.

    For evaluation of fixed-length examples (e.g. LM windows). The last batch may be smaller.
    With ``num_replicas > 1``, batches are split by :func:`shard_batches` (repeating batches so
    every rank has the same count; remove duplicates with ``batch["idx"]``).

    Args:
        n: number of examples.
        batch_size: examples per batch (per device).
        num_replicas, rank: DDP layout.
    """

    def __init__(self, n: int, batch_size: int, num_replicas: int = 1, rank: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.n, self.batch_size = int(n), int(batch_size)
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.sampler = _EpochClock()  # the epoch changes nothing here: no randomness

    def __iter__(self) -> Iterator[list[int]]:
        batches = [list(range(s, min(s + self.batch_size, self.n))) for s in range(0, self.n, self.batch_size)]
        yield from shard_batches(batches, self.num_replicas, self.rank)

    def __len__(self) -> int:
        """Batches this rank yields."""
        n_batches = -(-self.n // self.batch_size)  # ceiling divisions
        return -(-n_batches // self.num_replicas)


class RandomBatchSampler(_EpochSampler):
    """``n_batches`` batches of ``batch_size`` indices drawn uniformly (with replacement) from ``range(n)``.

    For training on random windows of a token stream: an "epoch" is a fixed number of batches, so
    ``limit_train_batches`` and LR schedules behave. Draws for epoch ``e`` come from
    ``numpy.random.default_rng((seed, e))``: ``num_replicas * n_batches`` batches are drawn and rank
    ``r`` takes every ``num_replicas``-th, so ranks see different windows.

    Args:
        n: number of indices to draw from.
        batch_size: indices per batch (per device).
        n_batches: batches per epoch **per rank**.
        seed: base seed.
        num_replicas, rank: DDP layout.
    """

    def __init__(
        self, n: int, batch_size: int, n_batches: int, seed: int, num_replicas: int = 1, rank: int = 0
    ) -> None:
        if n < 1 or batch_size < 1 or n_batches < 1:
            raise ValueError(f"need n, batch_size, n_batches >= 1, got {n}, {batch_size}, {n_batches}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        self.n, self.batch_size, self.n_batches = int(n), int(batch_size), int(n_batches)
        self.seed, self.num_replicas, self.rank = int(seed), int(num_replicas), int(rank)
        self.sampler = _EpochClock()

    def __iter__(self) -> Iterator[list[int]]:
        skip = self.sampler.take_skip()
        rng = np.random.default_rng((self.seed, self.epoch))
        draws = rng.integers(0, self.n, size=(self.n_batches * self.num_replicas, self.batch_size))
        for row in draws[self.rank :: self.num_replicas][skip:]:
            yield row.tolist()

    def __len__(self) -> int:
        """Batches per epoch for this rank (``n_batches``)."""
        return self.n_batches


def _pad(seqs: Sequence[Sequence[int] | torch.Tensor], pad_value: Any, dtype: torch.dtype) -> torch.Tensor:
    """Stack variable-length 1-D sequences into a ``(B, max_len)`` tensor padded with ``pad_value``."""
    return pad_sequence([torch.as_tensor(s, dtype=dtype) for s in seqs], batch_first=True, padding_value=pad_value)


def collate_seq2seq(examples: Sequence[dict[str, Any]], pad_id: int = PAD) -> dict[str, Any]:
    """Pad seq2seq examples into a batch.

    Args:
        examples: dicts with ``src`` (ids + EOS), ``tgt`` (BOS + ids + EOS), ``src_text``,
            ``tgt_text`` and ``idx`` (see :class:`xformer.data.base.Seq2SeqDataset`).
        pad_id: padding id.

    Returns:
        ``{"src": LongTensor (B, S), "tgt": LongTensor (B, T), "src_text": list[str],
        "tgt_text": list[str], "idx": LongTensor (B,)}``; ``S``/``T`` are the longest lengths in
        the batch, shorter rows are right-padded with ``pad_id``.
    """
    return {
        "src": _pad([e["src"] for e in examples], pad_id, torch.long),
        "tgt": _pad([e["tgt"] for e in examples], pad_id, torch.long),
        "src_text": [e["src_text"] for e in examples],
        "tgt_text": [e["tgt_text"] for e in examples],
        "idx": torch.tensor([e["idx"] for e in examples], dtype=torch.long),
        **_zero_weight(examples),
    }


def weightless_copy(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with every row marked ``zero_weight`` (BoolTensor ``(B,)``, ``B`` read from ``batch["tgt"]``):
    trained for its place in an accumulation window, with no loss and no tokens counted."""
    rows = batch["tgt"].shape[0]
    return {**batch, "zero_weight": torch.ones(rows, dtype=torch.bool)}


def _zero_weight(examples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{"zero_weight": BoolTensor (B,)}`` when the examples carry it (:class:`WeightlessCopies`), else ``{}``."""
    if examples and "zero_weight" in examples[0]:
        return {"zero_weight": torch.tensor([bool(e["zero_weight"]) for e in examples], dtype=torch.bool)}
    return {}


def collate_lm(examples: Sequence[dict[str, Any]], pad_id: int = PAD) -> dict[str, Any]:
    """Pad language-model examples into a batch.

    Args:
        examples: dicts with ``tgt`` (ids, length ``T_i + 1``) and ``idx``; optionally
            ``loss_mask`` (bools, same length as ``tgt``), ``prompt_len`` (int), ``src_text``,
            ``tgt_text`` -- each either in every example or in none.
        pad_id: padding id.

    Returns:
        ``{"tgt": LongTensor (B, T+1), "idx": LongTensor (B,)}`` plus, when present,
        ``"loss_mask": BoolTensor (B, T+1)`` (False on padding), ``"prompt_len": LongTensor (B,)``,
        ``"src_text"``/``"tgt_text"``: ``list[str]``. The model consumes ``tgt[:, :-1]`` and
        predicts ``tgt[:, 1:]``; apply ``loss_mask[:, 1:]`` to those predictions.
    """
    out: dict[str, Any] = {
        "tgt": _pad([e["tgt"] for e in examples], pad_id, torch.long),
        "idx": torch.tensor([e["idx"] for e in examples], dtype=torch.long),
    }
    first = examples[0] if examples else {}
    if "loss_mask" in first:
        out["loss_mask"] = _pad([e["loss_mask"] for e in examples], False, torch.bool)
    if "prompt_len" in first:
        out["prompt_len"] = torch.tensor([e["prompt_len"] for e in examples], dtype=torch.long)
    for key in ("src_text", "tgt_text"):
        if key in first:
            out[key] = [e[key] for e in examples]
    out.update(_zero_weight(examples))
    return out
