"""TinyShakespeare char-level LM: split, windows, sampling, download."""

from __future__ import annotations

import pytest
import torch

from xformer.data.errors import DataError
from xformer.data.tinyshakespeare import TinyShakespeareDataModule

from .helpers import shared


@pytest.fixture(scope="module")
def dm():
    d = TinyShakespeareDataModule(
        root=str(shared("tinyshakespeare")), block_size=32, batch_size=16, train_windows_per_epoch=16 * 10, seed=0
    )
    d.setup()
    return d


def test_split_vocab_and_contract(dm):
    assert len(dm.train_text) == 1_003_854 and len(dm.val_text) == 55_770 and len(dm.test_text) == 55_770
    assert dm.train_text.startswith("First Citizen:")
    assert dm.tgt_vocab_size == dm.src_vocab_size == 65 + 4
    assert dm.task == "lm" and dm.metrics == [] and dm.test_split_names == ["test"]
    assert dm.max_tgt_len == 33 and dm.max_src_len == 0


def test_train_batches_random_windows_seeded_per_epoch(dm):
    loader = dm.train_dataloader()
    assert len(loader) == 10
    e0 = [b["tgt"] for b in loader]
    assert len(e0) == 10 and all(t.shape == (16, 33) and t.dtype == torch.long for t in e0)
    for t, b in zip(e0[0], next(iter(loader))["idx"], strict=False):
        start = int(b)
        assert dm.tokenizer.decode(t) == dm.train_text[start : start + 33]
    again = [b["tgt"] for b in loader]
    assert all(torch.equal(x, y) for x, y in zip(e0, again, strict=False))
    loader.batch_sampler.set_epoch(1)
    e1 = [b["tgt"] for b in loader]
    assert not torch.equal(e0[0], e1[0])


def test_val_and_test_windows_are_contiguous(dm):
    val = dm.val_dataloader()
    n_windows = (len(dm.val_text) - 33) // 32 + 1
    assert len(val) == -(-n_windows // 16)
    rebuilt = []
    for batch in val:
        assert batch["tgt"].shape[1] == 33
        for t, i in zip(batch["tgt"], batch["idx"].tolist(), strict=False):
            text = dm.tokenizer.decode(t)
            assert text == dm.val_text[32 * i : 32 * i + 33]
            rebuilt.append(text[:32])
    assert "".join(rebuilt) == dm.val_text[: 32 * n_windows]
    assert dm.detokenize(next(iter(val))["tgt"][0]) == dm.val_text[:33]


def test_test_split_is_held_out(dm):
    """Train / val / test are consecutive, disjoint pieces of input.txt (90 / 5 / 5); test is not val."""
    text = (shared("tinyshakespeare") / "input.txt").read_text(encoding="utf-8")
    assert dm.train_text + dm.val_text + dm.test_text == text
    n = len(text)
    assert len(dm.train_text) == int(0.90 * n) and abs(len(dm.val_text) - len(dm.test_text)) <= 1
    test = dm.test_dataloader()
    assert len(test) == 1
    first = next(iter(test[0]))["tgt"]
    assert dm.tokenizer.decode(first[0]) == dm.test_text[:33]
    assert not torch.equal(first, next(iter(dm.val_dataloader()))["tgt"])
    rebuilt = "".join(dm.tokenizer.decode(t)[:32] for b in test[0] for t in b["tgt"])
    n_windows = (len(dm.test_text) - 33) // 32 + 1
    assert rebuilt == dm.test_text[: 32 * n_windows]


def test_tokens_per_batch_overrides_batch_size():
    d = TinyShakespeareDataModule(tokens_per_batch=4096, block_size=64, batch_size=3)
    assert d.batch_size == 64


def test_download_from_local_server(data_server, tmp_path):
    url = data_server.url + "tinyshakespeare/input.txt"
    d = TinyShakespeareDataModule(root=None, cache_dir=str(tmp_path), url=url)
    d.prepare_data()
    d.setup()
    assert (tmp_path / "tinyshakespeare" / "input.txt").is_file() and len(data_server.requests) == 1
    assert d.tgt_vocab_size == 69


def test_missing_root_file(tmp_path):
    with pytest.raises(DataError, match="input.txt"):
        TinyShakespeareDataModule(root=str(tmp_path)).setup()


def test_ddp_ranks_get_different_train_windows_and_full_val(dm):
    from types import SimpleNamespace

    train, val = [], []
    for rank in range(2):
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        try:
            train.append([b["idx"].tolist() for b in dm.train_dataloader()])
            val.append([i for b in dm.val_dataloader() for i in b["idx"].tolist()])
        finally:
            dm.trainer = None
    assert len(train[0]) == len(train[1]) == 5, "an epoch's windows are split across ranks"
    assert train[0] != train[1]
    assert set(val[0]) | set(val[1]) == set(range(len(dm.val_set)))
    assert len(dm.val_dataloader()) * 16 >= len(dm.val_set)


def test_val_estimate_batches_are_fixed_random_val_windows_and_test_stays_whole():
    d = TinyShakespeareDataModule(
        root=str(shared("tinyshakespeare")), block_size=32, batch_size=8, val_estimate_batches=2
    )
    d.setup("fit")
    first, again = list(d.val_dataloader()), list(d.val_dataloader())
    assert len(first) == 2 and all(b["tgt"].shape == (8, 33) for b in first)
    assert all(torch.equal(a["tgt"], b["tgt"]) for a, b in zip(first, again, strict=True))
    val = torch.as_tensor(d.val_ids)
    for b in first:  # each row is the val text at its start index
        for s, row in zip(b["idx"].tolist(), b["tgt"], strict=True):
            assert torch.equal(row, val[s : s + 33])
    full = TinyShakespeareDataModule(root=str(shared("tinyshakespeare")), block_size=32, batch_size=8)
    full.setup("fit")
    assert len(list(full.val_dataloader())) > 2  # without the option: the whole val split
