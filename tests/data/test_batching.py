"""Batch samplers, sharding across ranks, collate functions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xformer.data.batching import (
    RandomBatchSampler,
    SequentialBatchSampler,
    TokenBudgetBatchSampler,
    collate_lm,
    collate_seq2seq,
    padding_fraction,
    shard_batches,
    spread_order,
)


@pytest.fixture(scope="module")
def lengths():
    rng = np.random.default_rng(123)
    ls = rng.integers(3, 60, size=3000).tolist()
    ls[7] = 500  # longer than the budget below: must get a batch of its own
    return ls


def _flat(batches):
    return [i for b in batches for i in b]


def test_budget_respected_and_each_example_once(lengths):
    s = TokenBudgetBatchSampler(lengths, 400, shuffle=True, seed=0)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        assert sorted(_flat(batches)) == list(range(len(lengths)))
        for b in batches:
            assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 400
        assert [7] in batches


def test_deterministic_per_seed_and_epoch_and_varies_across_epochs(lengths):
    a = TokenBudgetBatchSampler(lengths, 400, shuffle=True, seed=5)
    b = TokenBudgetBatchSampler(lengths, 400, shuffle=True, seed=5)
    a.set_epoch(3)
    b.set_epoch(3)
    assert list(a) == list(b)
    e3 = list(a)
    a.set_epoch(4)
    e4 = list(a)
    assert e3 != e4
    assert {tuple(sorted(x)) for x in e3} != {tuple(sorted(x)) for x in e4}, "membership should change too"
    c = TokenBudgetBatchSampler(lengths, 400, shuffle=True, seed=6)
    c.set_epoch(3)
    assert list(c) != e3
    # the default single pool keeps the number of batches fixed across epochs
    assert len(e3) == len(e4)


def test_lightning_finds_set_epoch_on_batch_sampler_sampler(lengths):
    s = TokenBudgetBatchSampler(lengths, 400, shuffle=True, seed=0)
    s.sampler.set_epoch(2)  # what Lightning calls (dataloader.batch_sampler.sampler.set_epoch)
    t = TokenBudgetBatchSampler(lengths, 400, shuffle=True, seed=0)
    t.set_epoch(2)
    assert s.epoch == 2 and list(s) == list(t)


def test_eval_order_is_sorted_and_unshuffled(lengths):
    s = TokenBudgetBatchSampler(lengths, 400, shuffle=False, seed=0)
    s.set_epoch(0)
    e0 = list(s)
    s.set_epoch(9)
    assert list(s) == e0
    by_length = sorted(e0, key=lambda b: (lengths[b[0]], lengths[b[-1]]))  # as cut from the sorted split
    flat_lens = [lengths[i] for i in _flat(by_length)]
    assert flat_lens == sorted(flat_lens)


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_a_fraction_of_the_eval_batches_represents_the_split(fraction):
    """``limit_val_batches=0.25`` (and the decode subset) take the first batches of the eval loader: their
    examples' mean length is the split's (within 10 %), not the shortest examples' (issue 51, row 6)."""
    lengths = np.random.default_rng(0).integers(2, 12, size=96).tolist()
    batches = list(TokenBudgetBatchSampler(lengths, 40, shuffle=False, seed=0))
    taken = _flat(batches[: int(len(batches) * fraction)])  # Lightning's fractional limit
    mean = float(np.mean([lengths[i] for i in taken]))
    assert abs(mean - float(np.mean(lengths))) <= 0.1 * float(np.mean(lengths))
    assert sorted(_flat(batches)) == list(range(96))  # every example once


def test_spread_order_is_a_permutation_whose_prefixes_spread():
    assert spread_order(8) == [4, 2, 6, 1, 5, 3, 7, 0]  # the binary fractions 1/2, 1/4, 3/4, ... of 8
    for n in (1, 5, 6, 13, 18, 100):
        order = spread_order(n)
        assert sorted(order) == list(range(n))
        for k in range(4, n + 1):  # no stretch of the range left out by a prefix is much over n / k long
            ends = [-1, *sorted(order[:k]), n]
            assert max(b - a for a, b in zip(ends[:-1], ends[1:], strict=True)) <= 2 * n / k + 1, (n, k)
    assert max(spread_order(100)[:4]) < 90 and min(spread_order(100)[:4]) > 10  # a short prefix keeps off the ends


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("shuffle", [True, False])
def test_ranks_disjoint_equal_length_and_cover_all(lengths, world, shuffle):
    per_rank = []
    for r in range(world):
        s = TokenBudgetBatchSampler(lengths, 400, shuffle=shuffle, seed=1, num_replicas=world, rank=r)
        s.set_epoch(2)
        per_rank.append(list(s))
        assert len(per_rank[-1]) == len(s)
    assert len({len(b) for b in per_rank}) == 1, "every rank must get the same number of batches"
    n_all = len(TokenBudgetBatchSampler(lengths, 400, shuffle=shuffle, seed=1))
    assert sum(len(b) for b in per_rank) == -(-n_all // world) * world
    # padding batches are repeats; without them the ranks' batches are disjoint and cover everything
    seen = [tuple(b) for batches in per_rank for b in batches]
    unique = set(seen)
    assert len(unique) == n_all
    assert sorted(_flat([list(b) for b in unique])) == list(range(len(lengths)))


def test_shard_batches_pads_by_repeating():
    batches = [[0], [1], [2], [3], [4]]
    assert shard_batches(batches, 2, 0) == [[0], [2], [4]]
    assert shard_batches(batches, 2, 1) == [[1], [3], [0]]
    with pytest.raises(ValueError):
        shard_batches(batches, 2, 2)


def test_padding_fraction():
    assert padding_fraction([2, 4, 4], [[0, 1], [2]]) == pytest.approx(1 - 10 / 12)
    assert padding_fraction([3], []) == 0.0


def test_padding_fraction_on_multi30k_train(multi30k_dm):
    """Target: < 10 % pad tokens on Multi30k train at 4096 tokens per batch (each side)."""
    ds = multi30k_dm.train_set
    lens, (src_lens, tgt_lens) = ds.lengths(), ds.sort_keys()
    s = TokenBudgetBatchSampler(lens, 4096, shuffle=True, seed=0, sort_keys=[src_lens, tgt_lens])
    batches = s.all_batches()
    for ls in (lens, src_lens, tgt_lens):
        assert padding_fraction(ls, batches) < 0.10
    assert all(max(lens[i] for i in b) * len(b) <= 4096 for b in batches)


def test_sequential_and_random_batch_samplers():
    seq = [list(SequentialBatchSampler(10, 3, num_replicas=2, rank=r)) for r in range(2)]
    assert seq[0] == [[0, 1, 2], [6, 7, 8]] and seq[1] == [[3, 4, 5], [9]]
    assert len(SequentialBatchSampler(10, 3, 2, 0)) == 2 and len(SequentialBatchSampler(10, 3)) == 4
    r0 = RandomBatchSampler(100, 4, 5, seed=0, num_replicas=2, rank=0)
    r1 = RandomBatchSampler(100, 4, 5, seed=0, num_replicas=2, rank=1)
    b0, b1 = list(r0), list(r1)
    assert len(b0) == len(r0) == 5 and all(len(b) == 4 for b in b0) and b0 != b1
    assert list(r0) == b0
    r0.set_epoch(1)
    assert list(r0) != b0


def test_collate_seq2seq_shapes_and_padding():
    ex = [
        {"src": [5, 6, 2], "tgt": [1, 7, 2], "src_text": "a", "tgt_text": "x", "idx": 4},
        {"src": [5, 2], "tgt": [1, 7, 8, 9, 2], "src_text": "b", "tgt_text": "y", "idx": 9},
    ]
    b = collate_seq2seq(ex, pad_id=0)
    assert b["src"].dtype == torch.long and b["src"].shape == (2, 3)
    assert b["tgt"].shape == (2, 5) and b["tgt"][0].tolist() == [1, 7, 2, 0, 0]
    assert b["idx"].tolist() == [4, 9] and b["idx"].dtype == torch.long
    assert b["src_text"] == ["a", "b"] and b["tgt_text"] == ["x", "y"]


def test_collate_lm_masks_and_prompt_len():
    ex = [
        {
            "tgt": [1, 5, 4, 6, 2],
            "loss_mask": [False, False, False, True, True],
            "prompt_len": 3,
            "src_text": "a",
            "tgt_text": "b",
            "idx": 0,
        },
        {
            "tgt": [1, 5, 5, 4, 6, 6, 2],
            "loss_mask": [False] * 4 + [True] * 3,
            "prompt_len": 4,
            "src_text": "aa",
            "tgt_text": "bb",
            "idx": 1,
        },
    ]
    b = collate_lm(ex, pad_id=0)
    assert b["tgt"].shape == (2, 7) and b["loss_mask"].dtype == torch.bool
    assert b["loss_mask"][0].tolist() == [False, False, False, True, True, False, False]
    assert b["prompt_len"].tolist() == [3, 4] and b["idx"].dtype == torch.long
    plain = collate_lm([{"tgt": torch.arange(5), "idx": 3}])
    assert set(plain) == {"tgt", "idx"} and plain["tgt"].shape == (1, 5)


def test_training_shards_mark_their_padding_copies_weightless():
    """9 batches over 2 ranks. Evaluation repeats batch 0 for rank 1 (same idx, dropped
    later); training gives rank 1 a copy that :class:`WeightlessCopies` marks ``zero_weight``, and the
    training step gives it no loss and no tokens."""
    import torch

    from xformer.data.base import Seq2SeqDataset
    from xformer.data.batching import WeightlessCopies, collate_seq2seq, shard_batches

    batches = [[2 * i, 2 * i + 1] for i in range(9)]
    assert shard_batches(batches, 2, 1)[-1] == [0, 1]  # evaluation: a plain repeat
    n = 18
    r0, r1 = shard_batches(batches, 2, 0, copy_offset=n), shard_batches(batches, 2, 1, copy_offset=n)
    assert len(r0) == len(r1) == 5 and r1[-1] == [n + 0, n + 1]
    real = sorted(i for b in r0 + r1 for i in b if i < n)
    assert real == list(range(n))  # every example once
    ds = Seq2SeqDataset([[5, 6, 2]] * n, [[1, 7, 2]] * n, ["a"] * n, ["b"] * n)
    wrapped = WeightlessCopies(ds)
    batch = collate_seq2seq([wrapped[i] for i in r1[-1]])
    assert batch["zero_weight"].tolist() == [True, True] and batch["idx"].tolist() == [0, 1]
    batch_real = collate_seq2seq([wrapped[i] for i in r1[0]])
    assert batch_real["zero_weight"].tolist() == [False, False]
    assert wrapped.lengths() == ds.lengths()

    from xformer.model import EncoderDecoder
    from xformer.train.module import TransformerLitModule

    module = TransformerLitModule(
        EncoderDecoder(10, 10, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1),
        optimizer=None,
        lr_lambda=None,
        pad_id=0,
        eos_id=2,
    )
    loss = module.training_step(batch, 0)
    assert float(loss) == 0.0 and module.tokens_seen == 0  # the copy: nothing trained, nothing counted
    module.training_step(batch_real, 1)
    want = int((batch_real["src"] != 0).sum() + (batch_real["tgt"][:, 1:] != 0).sum())
    assert want > 0 and module.tokens_seen == want  # a real batch: its source and target tokens
    assert torch.isfinite(loss)


def test_train_limit_keeps_the_first_pairs_and_leaves_vocabulary_and_eval_splits(multi30k_dm):
    """data.train_limit (C12 dropout's over-fitting form): the first N train pairs, the same BPE (trained
    on the whole train split), the same val and test sets."""
    from xformer.data.multi30k import Multi30kDataModule

    limited = Multi30kDataModule(root=multi30k_dm.root, cache_dir=multi30k_dm.cache_dir, train_limit=5000)
    limited.setup()
    assert len(limited.train_set) == 5000 and len(multi30k_dm.train_set) == 29000
    assert limited.tokenizer.vocab_size == multi30k_dm.tokenizer.vocab_size
    for i in (0, 1234, 4999):
        assert limited.train_set[i] == multi30k_dm.train_set[i]
    assert len(limited.val_set) == len(multi30k_dm.val_set) and limited.val_set[7] == multi30k_dm.val_set[7]
    assert len(limited.test_sets["test"]) == len(multi30k_dm.test_sets["test"])
