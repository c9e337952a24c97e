"""Synthetic length-generalisation tasks: targets, split lengths, LM form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xformer.data.synthetic import SyntheticDataModule, make_example, split_length_range
from xformer.data.tokenizers import BOS, EOS, PAD

SMALL = dict(n_train=400, n_val=50, n_test=60, train_max_len=8)


def _make(task, form="seq2seq", **kw):
    dm = SyntheticDataModule(task, form, seed=0, **{**SMALL, **kw})
    dm.setup()
    return dm


def _length(task, src):
    return max(len(x) for x in src.split("+")) if task == "addition" else len(src)


@pytest.mark.parametrize("task", ["copy", "reverse", "sort", "addition"])
def test_split_lengths_and_targets(task):
    dm = _make(task)
    assert dm.test_split_names == ["1x", "2x", "4x"] and dm.metrics == ["exact_match"]
    expected = {"train": (1, 8), "val": (1, 8), "1x": (5, 8), "2x": (9, 16), "4x": (17, 32)}
    splits = {"train": dm.train_set, "val": dm.val_set, **dm.test_sets}
    for name, ds in splits.items():
        lo, hi = expected[name]
        assert split_length_range(name, 1, 8) == (lo, hi)
        lens = [_length(task, s) for s in ds.src_text]
        assert min(lens) >= lo and max(lens) <= hi, name
        assert max(lens) == hi and min(lens) == lo, f"{name}: the whole range is sampled"
        for s, t in zip(ds.src_text, ds.tgt_text, strict=False):
            if task == "copy":
                assert t == s
            elif task == "reverse":
                assert t == s[::-1]
            elif task == "sort":
                assert t == "".join(sorted(s)) and sorted(t) == sorted(s)
            else:
                a, b = s.split("+")
                assert int(t) == int(a) + int(b) and (len(a) == 1 or a[0] != "0")
    assert not set(dm.test_sets["1x"].src_text) & set(dm.train_set.src_text)


def test_addition_example_format():
    src, tgt = make_example("addition", 3, np.random.default_rng(0))
    a, b = src.split("+")
    assert max(len(a), len(b)) == 3 and tgt == str(int(a) + int(b))


@pytest.mark.parametrize("task", ["reverse", "addition"])
def test_seq2seq_batches(task):
    dm = _make(task)
    assert dm.task == "seq2seq"
    for loader in [dm.train_dataloader(), *dm.test_dataloader()]:
        batch = next(iter(loader))
        src, tgt = batch["src"], batch["tgt"]
        assert src.dtype == torch.long and (tgt[:, 0] == BOS).all()
        for i in range(src.shape[0]):
            assert dm.detokenize(tgt[i]) == batch["tgt_text"][i]
            assert dm.tokenizer.decode(src[i]) == batch["src_text"][i]
    assert dm.max_src_len == max(len(s) for s in dm.test_sets["4x"].src)


@pytest.mark.parametrize("task", ["sort", "addition"])
def test_lm_form_layout(task):
    dm = _make(task, "lm")
    assert dm.task == "lm" and dm.max_src_len == 0
    assert dm.max_tgt_len == max(len(t) for t in dm.test_sets["4x"].seqs)
    sep = dm.sep_id
    batch = next(iter(dm.test_dataloader()[1]))
    tgt, mask, plen = batch["tgt"], batch["loss_mask"], batch["prompt_len"]
    assert mask.dtype == torch.bool and mask.shape == tgt.shape and plen.dtype == torch.long
    for i in range(tgt.shape[0]):
        row = tgt[i][tgt[i] != PAD].tolist()
        src, ans = batch["src_text"][i], batch["tgt_text"][i]
        assert row == [BOS, *dm.tokenizer.encode(src), sep, *dm.tokenizer.encode(ans), EOS]
        p = int(plen[i])
        assert row[p - 1] == sep and p == len(src) + 2
        assert mask[i].tolist() == [False] * p + [True] * (len(row) - p) + [False] * (tgt.shape[1] - len(row))
        assert dm.detokenize(tgt[i]) == ans
        assert dm.detokenize(tgt[i][p:]) == ans, "a generated continuation decodes too"


def test_deterministic_and_seed_dependent():
    a, b = _make("copy"), _make("copy")
    c = SyntheticDataModule("copy", seed=1, **SMALL)
    c.setup()
    assert a.pairs == b.pairs and a.pairs["train"] != c.pairs["train"]
    # split streams are independent: more training data leaves the test splits unchanged
    d = _make("copy", n_train=500)
    assert d.pairs["2x"] == a.pairs["2x"]


def test_invalid_arguments():
    with pytest.raises(ValueError):
        SyntheticDataModule("multiply")
    with pytest.raises(ValueError):
        SyntheticDataModule("copy", form="encoder")
    with pytest.raises(ValueError):
        SyntheticDataModule("copy", train_min_len=9, train_max_len=8)
