"""Datasets and the DataModule base class shared by every xformer data set (distributed loading: see
:class:`XformerDataModule`). The samplers are reseeded with ``(seed, epoch)`` every epoch: by Lightning's
``set_epoch`` on ``dataloader.batch_sampler.sampler`` for a plain Trainer, by the
:class:`~xformer.data.loader.EpochStream` when the data epochs run back to back
(:meth:`XformerDataModule.serve_epochs_back_to_back`, as xformer's driver runs them).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from typing_extensions import override

from xformer.config_types import NonNegative, Positive
from xformer.data.batching import (
    RandomBatchSampler,
    SequentialBatchSampler,
    SpreadSubset,
    TokenBudgetBatchSampler,
    WeightlessCopies,
    collate_lm,
    collate_seq2seq,
)
from xformer.data.errors import DataError
from xformer.data.loader import EpochStream, trainer_batches_consumed
from xformer.data.tokenizers import BOS, EOS, PAD, Tokenizer

log = logging.getLogger(__name__)


def base_args(base: type, args: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``args`` that ``base``'s constructor takes: what a subclass's constructor passes on
    unchanged, from its ``locals()`` taken before it binds any other name."""
    params = inspect.signature(base.__init__).parameters
    return {k: v for k, v in args.items() if k in params and k != "self"}


class Seq2SeqDataset(Dataset):
    """Tokenised sentence pairs.

    Example ``i`` is ``{"src": ids + [EOS], "tgt": [BOS] + ids + [EOS], "src_text": str,
    "tgt_text": str, "idx": i}`` (ids as ``list[int]``). Batch with
    :func:`~xformer.data.batching.collate_seq2seq`.

    Args:
        src_ids, tgt_ids: token ids per sentence without BOS/EOS (same length lists).
        src_text, tgt_text: the raw strings.
    """

    def __init__(
        self,
        src_ids: Sequence[Sequence[int]],
        tgt_ids: Sequence[Sequence[int]],
        src_text: Sequence[str],
        tgt_text: Sequence[str],
    ) -> None:
        if not len(src_ids) == len(tgt_ids) == len(src_text) == len(tgt_text):
            raise ValueError("Seq2SeqDataset: all inputs must have the same length")
        self.src = [list(s) + [EOS] for s in src_ids]
        self.tgt = [[BOS] + list(t) + [EOS] for t in tgt_ids]
        self.src_text = list(src_text)
        self.tgt_text = list(tgt_text)

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "src": self.src[i],
            "tgt": self.tgt[i],
            "src_text": self.src_text[i],
            "tgt_text": self.tgt_text[i],
            "idx": i,
        }

    def lengths(self) -> list[int]:
        """Per-example batching size: ``max(len(src), len(tgt))`` in tokens."""
        return [max(len(s), len(t)) for s, t in zip(self.src, self.tgt, strict=True)]

    def sort_keys(self) -> list[list[int]]:
        """``[src lengths, tgt lengths]``: tie-breakers for length bucketing (less padding on both sides)."""
        return [[len(s) for s in self.src], [len(t) for t in self.tgt]]

    def max_src_len(self) -> int:
        """Longest ``src`` (tokens, EOS included); 0 when empty."""
        return max(map(len, self.src), default=0)

    def max_tgt_len(self) -> int:
        """Longest ``tgt`` (tokens, BOS and EOS included); 0 when empty."""
        return max(map(len, self.tgt), default=0)


class PromptLMDataset(Dataset):
    """Sequence pairs in decoder-only form: ``tgt = [BOS] + src + [SEP] + target + [EOS]``.

    Example ``i`` is ``{"tgt": list[int], "loss_mask": list[bool], "prompt_len": int,
    "src_text": str, "tgt_text": str, "idx": i}``; ``loss_mask`` is True on the ``target`` ids and
    the final EOS, ``prompt_len = len(src) + 2`` (BOS, source, SEP). Batch with
    :func:`~xformer.data.batching.collate_lm`.

    Args:
        src_ids, tgt_ids: ids without specials.
        src_text, tgt_text: raw strings (``tgt_text`` is the answer only).
        sep_id: id of the separator token.
    """

    def __init__(
        self,
        src_ids: Sequence[Sequence[int]],
        tgt_ids: Sequence[Sequence[int]],
        src_text: Sequence[str],
        tgt_text: Sequence[str],
        sep_id: int,
    ) -> None:
        if not len(src_ids) == len(tgt_ids) == len(src_text) == len(tgt_text):
            raise ValueError("PromptLMDataset: all inputs must have the same length")
        self.seqs = [[BOS, *s, sep_id, *t, EOS] for s, t in zip(src_ids, tgt_ids, strict=True)]
        self.prompt_lens = [len(s) + 2 for s in src_ids]
        self.src_text = list(src_text)
        self.tgt_text = list(tgt_text)

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int) -> dict[str, Any]:
        seq, p = self.seqs[i], self.prompt_lens[i]
        return {
            "tgt": seq,
            "loss_mask": [False] * p + [True] * (len(seq) - p),
            "prompt_len": p,
            "src_text": self.src_text[i],
            "tgt_text": self.tgt_text[i],
            "idx": i,
        }

    def lengths(self) -> list[int]:
        """Per-example batching size: ``len(tgt)``."""
        return [len(s) for s in self.seqs]

    def max_tgt_len(self) -> int:
        """Longest ``tgt`` in tokens; 0 when empty."""
        return max(map(len, self.seqs), default=0)


class WindowDataset(Dataset):
    """Windows of ``block_size + 1`` consecutive ids of a token stream (language modelling).

    Example ``i`` is ``{"tgt": LongTensor (block_size+1,), "idx": i}`` taken from
    ``data[i*stride : i*stride + block_size + 1]``; only full windows exist. ``stride=1`` gives
    every start position (sample them at random for training); ``stride=block_size`` gives
    contiguous, non-overlapping input windows (every token predicted once) for evaluation.

    Args:
        data: 1-D array of token ids.
        block_size: model context ``T``.
        stride: distance between window starts.
    """

    def __init__(self, data: np.ndarray, block_size: int, stride: int) -> None:
        if block_size < 1 or stride < 1:
            raise ValueError(f"block_size and stride must be >= 1, got {block_size}, {stride}")
        self.data = torch.from_numpy(np.ascontiguousarray(data, dtype=np.int64))
        self.block_size, self.stride = int(block_size), int(stride)
        self._n = max(0, (len(self.data) - self.block_size - 1) // self.stride + 1)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self._n:
            raise IndexError(i)
        s = i * self.stride
        return {"tgt": self.data[s : s + self.block_size + 1], "idx": i}


class XformerDataModule(L.LightningDataModule):
    """Base of every xformer DataModule: the attributes and loaders the trainer relies on.

    Subclasses implement :meth:`_build` (called once by :meth:`setup`), which sets ``self.tokenizer`` (target
    side), ``self.train_set``, ``self.val_set`` and ``self.test_sets`` (ordered ``{split_name: dataset}``) and may
    set ``src_vocab_size``. After :meth:`setup`: ``task`` (``"seq2seq"``/``"lm"``), ``metrics``, ``src_vocab_size``,
    ``tgt_vocab_size``, ``pad_id``, ``bos_id``, ``eos_id``, ``max_src_len``, ``max_tgt_len`` (tokens incl.
    specials, over every split; ``max_src_len`` is 0 for LM), ``test_split_names``.

    Distributed: loaders shard batches themselves by the attached trainer's ``(world_size, global_rank)``; create
    the Trainer with ``use_distributed_sampler=False`` (else Lightning injects a DistributedSampler into the batch
    sampler and raises ``TypeError``). Eval shards repeat batches so every rank runs the same number of steps;
    drop duplicates with ``batch["idx"]``.

    Args:
        root: data folder (meaning depends on the data set; None = download or generate).
        tokens_per_batch: padded-token budget per batch per device (token-budget loaders).
        num_workers, pin_memory: DataLoader options.
        seed: seed for data generation/splitting and batch shuffling.
    """

    task: str = "seq2seq"
    metrics: list[str] = []
    sep_id: int | None = None  # prompt-LM data: the separator before the answer (see detokenize)

    def __init__(
        self,
        root: str | None = None,
        tokens_per_batch: Positive = 4096,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.root, self.tokens_per_batch, self.seed = root, int(tokens_per_batch), int(seed)
        self.num_workers, self.pin_memory = int(num_workers), bool(pin_memory)
        self.pad_id, self.bos_id, self.eos_id = PAD, BOS, EOS
        self.metrics = list(type(self).metrics)
        self.tokenizer: Tokenizer | None = None
        self.src_vocab_size = self.tgt_vocab_size = self.max_src_len = self.max_tgt_len = None  # set by setup()
        self.test_split_names: list[str] = []
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_sets: dict[str, Dataset] = {}
        self._is_built = False

    # ---- lifecycle -------------------------------------------------------------------------

    @override
    def setup(self, stage: str | None = None) -> None:
        """Build tokenizer and all splits once; later calls (any ``stage``) do nothing."""
        if self._is_built:
            return
        self._build()
        assert self.tokenizer is not None, "_build must set self.tokenizer"
        self.tgt_vocab_size = self.tokenizer.vocab_size
        if self.src_vocab_size is None:
            self.src_vocab_size = self.tgt_vocab_size
        self.test_split_names = list(self.test_sets)
        splits = [self.train_set, self.val_set, *self.test_sets.values()]
        self.max_src_len = max((d.max_src_len() for d in splits if hasattr(d, "max_src_len")), default=0)
        self.max_tgt_len = max((d.max_tgt_len() for d in splits if hasattr(d, "max_tgt_len")), default=0)
        self._is_built = True

    def _build(self) -> None:
        raise NotImplementedError

    def _set_splits(self, pairs: dict[str, Sequence[tuple[str, str]]], name: str) -> None:
        """Tokenise ``{split: [(source, target), ...]}`` into ``train_set``, ``val_set`` and, in order, the other
        splits as ``test_sets``: :class:`Seq2SeqDataset` (:class:`PromptLMDataset` when ``task == "lm"``)."""
        enc = self.tokenizer.encode_batch
        make = functools.partial(PromptLMDataset, sep_id=self.sep_id) if self.task == "lm" else Seq2SeqDataset
        sets = {}
        for split, rows in pairs.items():
            src, tgt = [p[0] for p in rows], [p[1] for p in rows]
            sets[split] = make(enc(src), enc(tgt), src, tgt)
        log.info("%s: %s", name, {k: len(v) for k, v in sets.items()})
        self.train_set, self.val_set = sets.pop("train"), sets.pop("val")
        self.test_sets = sets

    def _require_setup(self) -> None:
        if not self._is_built:
            raise RuntimeError(f"{type(self).__name__}: call setup() before asking for loaders")

    # ---- decoding --------------------------------------------------------------------------

    def detokenize(self, ids: Iterable[int] | torch.Tensor) -> str:
        """Target-side ids to a string comparable to ``tgt_text``.

        With a ``sep_id``, keeps only what follows the last ``<sep>`` (so both a full prompt-LM ``tgt``
        row and a generated continuation give the answer). Stops at the first ``eos_id`` (a leading BOS
        is skipped), drops special ids, decodes. ``ids`` may be a list or a 1-D tensor.
        """
        self._require_setup()
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if self.sep_id is not None and self.sep_id in ids:
            ids = ids[len(ids) - ids[::-1].index(self.sep_id) :]
        return self.tokenizer.decode(ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids)

    # ---- loaders ---------------------------------------------------------------------------

    def _replicas(self) -> tuple[int, int]:
        """``(num_replicas, rank)`` from the attached Trainer, ``(1, 0)`` without one."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None and getattr(trainer, "world_size", 1) > 1:
            return int(trainer.world_size), int(trainer.global_rank)
        return 1, 0

    def _loader(self, dataset: Dataset, train: bool, persistent: bool = True) -> DataLoader:
        """Token-budget loader (default for seq2seq and prompt-LM data sets)."""
        num_replicas, rank = self._replicas()
        weightless = train and num_replicas > 1  # an uneven epoch tail: copies train nothing
        sampler = TokenBudgetBatchSampler(
            dataset.lengths(),
            self.tokens_per_batch,
            shuffle=train,
            seed=self.seed,
            num_replicas=num_replicas,
            rank=rank,
            sort_keys=dataset.sort_keys() if hasattr(dataset, "sort_keys") else (),
            weightless_copies=weightless,
        )
        if weightless:
            dataset = WeightlessCopies(dataset)
        collate = collate_seq2seq if self.task == "seq2seq" else collate_lm
        return self._make_loader(dataset, sampler, functools.partial(collate, pad_id=self.pad_id), persistent)

    def _make_loader(self, dataset: Dataset, batch_sampler, collate_fn, persistent: bool) -> DataLoader:
        """DataLoader over ``batch_sampler``; workers persist across epochs for train/val only."""
        return DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=collate_fn,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=persistent and self.num_workers > 0,
        )

    _back_to_back: dict[str, Any] | None = None  # EpochStream options, set by serve_epochs_back_to_back
    _stream: EpochStream | None = None  # the training stream of the current fit
    _restored_position: dict[str, int] | None = None  # from a checkpoint, for the next stream

    def serve_epochs_back_to_back(self, epoch_batches: int | None = None, accumulate: int = 1) -> None:
        """Make :meth:`train_dataloader` an :class:`~xformer.data.loader.EpochStream`: epochs of ``epoch_batches``
        batches (None = all), filled to whole windows of ``accumulate`` micro-batches, one after another, which the
        trainer runs as one endless epoch ended by ``max_steps``. xformer's driver does this; a plain
        ``lightning.Trainer`` gets the epochs themselves."""
        self._back_to_back = {"epoch_batches": epoch_batches, "accumulate": accumulate}

    def train_dataloader(self) -> DataLoader | EpochStream:
        """Shuffled (per ``(seed, epoch)``) training loader, sharded across DDP ranks (its epochs back to back
        after :meth:`serve_epochs_back_to_back`)."""
        self._require_setup()
        loader = self._loader(self.train_set, train=True)
        if self._back_to_back is None:
            return loader
        self._stream = EpochStream(
            loader, consumed=lambda: trainer_batches_consumed(getattr(self, "trainer", None)), **self._back_to_back
        )
        if self._restored_position is not None:
            self._stream.load_state_dict(self._restored_position)
            self._restored_position = None
        return self._stream

    def state_dict(self) -> dict[str, Any]:
        """``{"train_position": ...}``: the :class:`~xformer.data.loader.EpochStream`'s position, in every
        checkpoint (Lightning also keeps a loader's state, but restores it only into an epoch it considers
        unfinished; after a run that ended by ``max_epochs`` its one epoch is finished). Empty without a
        stream."""
        return {"train_position": self._stream.state_dict()} if self._stream is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's training position for the next :meth:`train_dataloader` stream."""
        self._restored_position = state_dict.get("train_position")

    def limit_val_examples(self, fraction: float) -> tuple[int, int]:
        """Validate on ``fraction`` of the validation examples, evenly spread over their lengths
        (:class:`~xformer.data.batching.SpreadSubset`). Returns ``(examples kept, examples in the split)``."""
        self._require_setup()
        full = len(self.val_set)
        self.val_set = SpreadSubset(self.val_set, fraction)
        return len(self.val_set), full

    def val_dataloader(self) -> DataLoader:
        """Deterministic validation loader (sharded across ranks; duplicates share ``idx``)."""
        self._require_setup()
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> list[DataLoader]:
        """One deterministic loader per name in ``test_split_names``, same order."""
        self._require_setup()
        return [self._loader(self.test_sets[name], train=False, persistent=False) for name in self.test_split_names]


def random_windows(ids: np.ndarray, block_size: int, n: int, seed: int) -> Subset:
    """``n`` distinct windows of ``block_size + 1`` ids at uniformly random starts (without
    replacement; all windows if there are fewer), drawn from ``numpy.random.default_rng((seed, 1))``:
    the same windows for the same ``seed``, whenever and however often they are asked for. Example ``i``
    is ``{"tgt": (block_size+1,), "idx": start}`` (distinct starts: ``idx`` identifies it across ranks)."""
    windows = WindowDataset(ids, block_size, stride=1)
    rng = np.random.default_rng((int(seed), 1))
    return Subset(windows, rng.choice(len(windows), size=min(n, len(windows)), replace=False).tolist())


class WindowLMDataModule(XformerDataModule):
    """Base for LM on a token stream: random windows for training, contiguous windows for eval.

    Subclasses' :meth:`_build` set ``self.tokenizer`` and ``self.train_ids``/``val_ids``/``test_ids`` (1-D int
    arrays; ``test_ids`` None reuses ``val_ids``), then call ``super()._build()`` to make the datasets.

    Batches: ``{"tgt": LongTensor (B, block_size+1), "idx": LongTensor (B,)}``; the model consumes ``tgt[:, :-1]``
    and predicts ``tgt[:, 1:]``. ``B`` is ``batch_size``, or ``max(1, tokens_per_batch // block_size)`` when
    ``tokens_per_batch`` is given. Training windows start uniformly at random; an epoch is
    ``train_windows_per_epoch`` windows over all ranks (``None``: ``len(train_ids) // block_size``, one pass over
    the training tokens on average). Eval windows start at multiples of ``block_size`` (every token after the
    first predicted once; a trailing partial window is dropped), ``idx`` the window number.

    Cheap validation (``val_estimate_batches = k``): ``k`` batches of random val windows instead of the whole split
    (:func:`random_windows`, seeded by ``seed``: the same windows at every validation), as nanoGPT's
    ``estimate_loss`` with ``eval_iters = k``. The full contiguous pass stays in ``val_full_set``.
    """

    task = "lm"
    metrics: list[str] = []

    def __init__(
        self,
        root: str | None = None,
        tokens_per_batch: Positive | None = None,
        block_size: Positive = 64,
        batch_size: Positive = 64,
        train_windows_per_epoch: int | None = None,
        num_workers: NonNegative = 0,
        pin_memory: bool = False,
        seed: int = 0,
        val_estimate_batches: int | None = None,
    ) -> None:
        if val_estimate_batches is not None and int(val_estimate_batches) < 1:
            raise DataError(
                f"data.val_estimate_batches={val_estimate_batches}: must be >= 1 (or null for the full validation pass)"
            )
        self.val_estimate_batches = None if val_estimate_batches is None else int(val_estimate_batches)
        if tokens_per_batch is not None:
            batch_size = max(1, int(tokens_per_batch) // int(block_size))
        super().__init__(
            root=root,
            tokens_per_batch=batch_size * block_size,
            num_workers=num_workers,
            pin_memory=pin_memory,
            seed=seed,
        )
        self.block_size, self.batch_size = int(block_size), int(batch_size)
        self.train_windows_per_epoch = train_windows_per_epoch
        self.train_ids = self.val_ids = self.test_ids = None  # 1-D int arrays, set by subclasses' _build

    def _build(self) -> None:
        T = self.block_size
        for name, ids in (("train", self.train_ids), ("val", self.val_ids)):
            if ids is None or len(ids) < T + 1:
                n = 0 if ids is None else len(ids)
                raise DataError(
                    f"{type(self).__name__}: {name} split has {n} tokens, "
                    f"fewer than block_size + 1 = {T + 1}; lower block_size"
                )
        self.train_set = WindowDataset(self.train_ids, T, stride=1)
        self.val_full_set = WindowDataset(self.val_ids, T, stride=T)
        self.val_set = self.val_full_set
        if self.val_estimate_batches:
            self.val_set = random_windows(self.val_ids, T, self.val_estimate_batches * self.batch_size, self.seed)
        test = self.val_ids if self.test_ids is None else self.test_ids
        self.test_sets = {"test": WindowDataset(test, T, stride=T)}

    def setup(self, stage: str | None = None) -> None:
        """Build once (idempotent); ``max_tgt_len = block_size + 1``, ``max_src_len = 0``."""
        super().setup(stage)
        self.max_src_len, self.max_tgt_len = 0, self.block_size + 1

    def _loader(self, dataset: Dataset, train: bool, persistent: bool = True) -> DataLoader:
        """Random-window loader for training, contiguous-window loader for evaluation."""
        num_replicas, rank = self._replicas()
        if train:
            total = self.train_windows_per_epoch or max(1, len(self.train_ids) // self.block_size)
            n_batches = max(1, total // (self.batch_size * num_replicas))
            sampler = RandomBatchSampler(len(dataset), self.batch_size, n_batches, self.seed, num_replicas, rank)
        else:
            sampler = SequentialBatchSampler(len(dataset), self.batch_size, num_replicas, rank)
        return self._make_loader(dataset, sampler, functools.partial(collate_lm, pad_id=self.pad_id), persistent)
