"""NumbersDataModule: num2words pairs, disjoint seeded splits, contract batches."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from xformer.data.numbers import NumbersDataModule, number_pair, sample_by_digits
from xformer.data.tokenizers import BOS, EOS, PAD

SMALL = dict(n_train=600, n_val=100, n_test=100, n_long=50)


@pytest.fixture(scope="module")
def dm(tmp_path_factory):
    d = NumbersDataModule(seed=0, cache_dir=str(tmp_path_factory.mktemp("numbers")), **SMALL)
    d.setup()
    return d


@pytest.mark.parametrize(
    "n, en, de",
    [
        (0, "zero", "null"),
        (7, "seven", "sieben"),
        (21, "twenty-one", "einundzwanzig"),
        (321, "three hundred and twenty-one", "dreihunderteinundzwanzig"),
        (1001, "one thousand and one", "eintausendeins"),
        (2_000_000, "two million", "zwei Millionen"),
    ],
)
def test_known_pairs(n, en, de):
    assert number_pair(n) == (en, de)


def test_splits_disjoint_sized_and_in_range(dm):
    nums = dm.numbers
    assert {k: len(v) for k, v in nums.items()} == {"train": 600, "val": 100, "test": 100, "long": 50}
    sets = {k: set(v.tolist()) for k, v in nums.items()}
    assert all(len(sets[k]) == len(nums[k]) for k in nums), "no duplicates within a split"
    assert not (sets["train"] & sets["val"]) and not (sets["train"] & sets["test"]) and not (sets["val"] & sets["test"])
    assert max(max(sets[k]) for k in ("train", "val", "test")) < 10**6
    assert min(sets["long"]) >= 10**6 and max(sets["long"]) < 10**9
    digits = [len(str(n)) for n in nums["train"]]
    assert min(digits) <= 2 and set(range(3, 7)) <= set(digits), "small and large numbers both appear"
    assert {len(str(n)) for n in nums["long"]} == {7, 8, 9}
    assert dm.train_set.src_text[0] == number_pair(nums["train"][0])[0]
    assert dm.test_split_names == ["test", "long"] and len(dm.test_sets["long"]) == 50


def test_sample_by_digits_water_filling():
    out = sample_by_digits(np.random.default_rng(0), 400, 1, 3)
    counts = np.bincount([len(str(n)) for n in out])
    assert counts[1] == 10 and counts[2] == 90 and counts[3] == 300 and len(set(out.tolist())) == 400
    with pytest.raises(ValueError):
        sample_by_digits(np.random.default_rng(0), 101, 1, 2)


def test_deterministic_per_seed_and_different_across_seeds(dm, tmp_path):
    same = NumbersDataModule(seed=0, cache_dir=str(tmp_path), **SMALL).sample_numbers()
    other = NumbersDataModule(seed=1, cache_dir=str(tmp_path), **SMALL).sample_numbers()
    assert all(np.array_equal(same[k], dm.numbers[k]) for k in same)
    assert not np.array_equal(other["train"], dm.numbers["train"])


def test_contract_attributes(dm):
    assert dm.task == "seq2seq" and dm.metrics == ["exact_match"]
    assert dm.src_vocab_size == dm.tgt_vocab_size == dm.tokenizer.vocab_size <= 600
    assert (dm.pad_id, dm.bos_id, dm.eos_id) == (0, 1, 2)
    sets = [dm.train_set, dm.val_set, *dm.test_sets.values()]
    assert dm.max_src_len == max(len(s) for d in sets for s in d.src)
    assert dm.max_tgt_len == max(len(t) for d in sets for t in d.tgt)
    assert dm.max_tgt_len == dm.test_sets["long"].max_tgt_len(), "long split holds the longest targets"


def test_batches_shapes_specials_and_detokenize(dm):
    loaders = [dm.train_dataloader(), dm.val_dataloader(), *dm.test_dataloader()]
    assert len(loaders) == 4
    for loader in loaders:
        for batch in loader:
            src, tgt, idx = batch["src"], batch["tgt"], batch["idx"]
            B = src.shape[0]
            assert src.dtype == tgt.dtype == idx.dtype == torch.long
            assert tgt.shape[0] == B and idx.shape == (B,) and len(batch["tgt_text"]) == len(batch["src_text"]) == B
            assert max(src.shape[1], tgt.shape[1]) * B <= dm.tokens_per_batch or B == 1
            assert (tgt[:, 0] == BOS).all() and not (src == BOS).any()
            src_len = (src != PAD).sum(1)
            tgt_len = (tgt != PAD).sum(1)
            assert (src[torch.arange(B), src_len - 1] == EOS).all()
            assert (tgt[torch.arange(B), tgt_len - 1] == EOS).all()
            assert ((src == EOS).sum(1) == 1).all() and ((tgt == EOS).sum(1) == 1).all()
            for i in range(B):
                assert dm.detokenize(tgt[i]) == batch["tgt_text"][i]
                assert dm.detokenize(tgt[i].tolist() + [7, 8]) == batch["tgt_text"][i], "stops at EOS"


def test_train_epochs_shuffle_deterministically(dm):
    loader = dm.train_dataloader()
    order = lambda: [b["idx"].tolist() for b in loader]  # noqa: E731
    e0 = order()
    loader.batch_sampler.set_epoch(1)
    e1 = order()
    assert e0 != e1 and sorted(sum(e0, [])) == sorted(sum(e1, [])) == list(range(600))
    loader.batch_sampler.set_epoch(0)
    assert order() == e0
    assert len(loader) == len(e0)


def test_char_tokenizer_variant(tmp_path):
    d = NumbersDataModule(seed=3, tokenizer="char", cache_dir=str(tmp_path), **SMALL)
    d.setup()
    assert "M" in d.tokenizer.chars, "the task alphabet includes the M of 'Million' (long split)"
    long = d.test_sets["long"]
    assert all(d.detokenize(t) == s for t, s in zip(long.tgt, long.tgt_text, strict=False))
    assert d.max_src_len == max(len(s) for s in long.src)


def test_ddp_eval_split_has_no_lost_examples(dm):
    from types import SimpleNamespace

    idx_per_rank = []
    for rank in range(3):
        dm.trainer = SimpleNamespace(world_size=3, global_rank=rank)
        try:
            loader = dm.val_dataloader()
        finally:
            dm.trainer = None
        idx_per_rank.append([b["idx"].tolist() for b in loader])
    assert len({len(b) for b in idx_per_rank}) == 1
    all_idx = [i for r in idx_per_rank for b in r for i in b]
    assert set(all_idx) == set(range(100))


def test_picklable_and_workers(dm):
    pickle.dumps(dm.val_set)
    pickle.dumps(dm.val_dataloader().collate_fn)
    d = NumbersDataModule(seed=0, cache_dir=str(dm.cache_dir), num_workers=2, **SMALL)
    d.setup()
    with_workers = [b["tgt"].tolist() for b in d.val_dataloader()]
    assert with_workers == [b["tgt"].tolist() for b in dm.val_dataloader()]


def test_bad_tokenizer_name():
    with pytest.raises(ValueError, match="tokenizer"):
        NumbersDataModule(tokenizer="word")
