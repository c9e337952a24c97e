"""Multi30k: the shared copy, the download path, and error messages."""

from __future__ import annotations

import gzip
import logging
import shutil

import pytest
import torch

from xformer.data.errors import DataError
from xformer.data.multi30k import SHA256, Multi30kDataModule
from xformer.data.tokenizers import BOS, EOS, PAD, BPETokenizer

from .helpers import shared


def test_split_sizes_and_contract(multi30k_dm):
    dm = multi30k_dm
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_sets["test"])) == (29000, 1014, 1000)
    assert dm.task == "seq2seq" and dm.metrics == ["bleu"] and dm.test_split_names == ["test"]
    assert dm.src_vocab_size == dm.tgt_vocab_size == dm.tokenizer.vocab_size == 8000
    assert (dm.pad_id, dm.bos_id, dm.eos_id) == (PAD, BOS, EOS)
    assert dm.val_set.src_text[0] and dm.val_set.tgt_text[0]
    all_sets = [dm.train_set, dm.val_set, dm.test_sets["test"]]
    assert dm.max_src_len == max(len(s) for d in all_sets for s in d.src)
    assert dm.max_tgt_len == max(len(t) for d in all_sets for t in d.tgt)


def test_batches_follow_the_contract(multi30k_dm):
    dm = multi30k_dm
    loaders = dm.test_dataloader()
    assert isinstance(loaders, list) and len(loaders) == len(dm.test_split_names)
    seen = []
    for batch in dm.val_dataloader():
        src, tgt = batch["src"], batch["tgt"]
        assert src.dtype == tgt.dtype == torch.long and src.dim() == tgt.dim() == 2
        assert src.shape[0] == tgt.shape[0] == len(batch["src_text"]) == len(batch["idx"])
        assert src.numel() <= dm.tokens_per_batch or src.shape[0] == 1
        assert (tgt[:, 0] == BOS).all() and not (src == BOS).any()
        for i in range(src.shape[0]):
            s = src[i][src[i] != PAD].tolist()
            t = tgt[i][tgt[i] != PAD].tolist()
            assert s[-1] == EOS and t[-1] == EOS and EOS not in s[:-1]
            assert dm.detokenize(t) == batch["tgt_text"][i]
            assert batch["tgt_text"][i] == dm.val_set.tgt_text[int(batch["idx"][i])]
        seen += batch["idx"].tolist()
    assert sorted(seen) == list(range(1014))


def test_source_side_roundtrip(multi30k_dm):
    dm = multi30k_dm
    for i in range(50):
        assert dm.tokenizer.decode(dm.train_set.src[i]) == dm.train_set.src_text[i]


def test_setup_is_idempotent(multi30k_dm):
    train = multi30k_dm.train_set
    multi30k_dm.setup("fit")
    multi30k_dm.setup("test")
    assert multi30k_dm.train_set is train


def test_download_path_from_local_server(data_server, tmp_path, monkeypatch):
    """root=None: every file is fetched once from base_url into the cache, then read from there."""
    import xformer.data.multi30k as m30k

    real_read = m30k.read_parallel
    monkeypatch.setattr(m30k, "read_parallel", lambda a, b: tuple(x[:300] for x in real_read(a, b)))  # speed
    kw = dict(root=None, cache_dir=str(tmp_path), base_url=data_server.url + "multi30k", vocab_size=400)
    dm = Multi30kDataModule(**kw)
    dm.prepare_data()
    assert sorted(data_server.requests) == sorted(f"/multi30k/{f}" for f in SHA256)
    assert sorted(p.name for p in (tmp_path / "multi30k").iterdir()) == sorted(SHA256)
    dm.setup()
    assert len(dm.train_set) == len(dm.val_set) == 300 and dm.tgt_vocab_size == 400
    # a second DataModule finds both the files and the tokenizer in the cache
    monkeypatch.setattr(BPETokenizer, "train", classmethod(lambda *_a, **_k: pytest.fail("BPE retrained")))
    again = Multi30kDataModule(**kw)
    again.prepare_data()
    again.setup()
    assert len(data_server.requests) == 6
    assert again.train_set.tgt == dm.train_set.tgt


def test_download_checksum_mismatch(data_server, tmp_path, monkeypatch):
    monkeypatch.setitem(SHA256, "train.de.gz", "f" * 64)
    dm = Multi30kDataModule(root=None, cache_dir=str(tmp_path), base_url=data_server.url + "multi30k")
    with pytest.raises(DataError, match="train.de.gz.*expected sha256 f{64}"):
        dm.setup()
    assert not (tmp_path / "multi30k" / "train.de.gz").exists()


def _write_root(root, lines="Satz eins\nSatz zwei\n", **override):
    """A fake Multi30k root: every file holds ``lines`` gzipped, or ``override[fname]`` (bytes) gzipped."""
    root.mkdir(exist_ok=True)
    for fname in SHA256:
        (root / fname).write_bytes(gzip.compress(override.get(fname, lines.encode())))
    return root


def test_missing_file_message(tmp_path):
    root = _write_root(tmp_path / "m")
    (root / "val.en.gz").unlink()
    dm = Multi30kDataModule(root=str(root), cache_dir=str(tmp_path))
    with pytest.raises(DataError) as err:
        dm.setup()
    msg = str(err.value)
    assert "val.en.gz" in msg and str(root) in msg and "data.root" in msg and "\n" not in msg


def test_mismatched_line_counts(tmp_path):
    root = _write_root(tmp_path / "m", **{"train.en.gz": b"one\ntwo\nthree\n"})
    with pytest.raises(DataError) as err:
        Multi30kDataModule(root=str(root), cache_dir=str(tmp_path)).setup()
    msg = str(err.value)
    assert "train.de.gz" in msg and "train.en.gz" in msg and "2 lines" in msg and "3 lines" in msg


def test_corrupt_gzip_and_bad_utf8(tmp_path):
    root = _write_root(tmp_path / "m")
    (root / "test_2016_flickr.de.gz").write_bytes(gzip.compress(b"ok\nok\n")[:-6])  # truncated
    with pytest.raises(DataError, match=r"test_2016_flickr\.de\.gz is not a valid gzip"):
        Multi30kDataModule(root=str(root), cache_dir=str(tmp_path)).setup()
    root = _write_root(tmp_path / "u", **{"val.de.gz": b"gut\nM\xe4nner\n"})  # latin-1
    with pytest.raises(DataError, match=r"val\.de\.gz: line 2 is not valid UTF-8"):
        Multi30kDataModule(root=str(root), cache_dir=str(tmp_path)).setup()


def test_empty_lines_skipped_with_warning(tmp_path, caplog):
    root = _write_root(tmp_path / "m", lines="Hund\n\nKatze\nMaus\n")
    (root / "train.en.gz").write_bytes(gzip.compress(b"dog\ncat\n\nmouse\n"))
    dm = Multi30kDataModule(root=str(root), cache_dir=str(tmp_path), vocab_size=300)
    with caplog.at_level(logging.WARNING):
        dm.setup()
    assert dm.train_set.src_text == ["Hund", "Maus"] and dm.train_set.tgt_text == ["dog", "mouse"]
    assert any("skipped 2 pair(s)" in r.getMessage() for r in caplog.records)


def test_uncompressed_files_accepted(tmp_path):
    src = shared("multi30k")
    root = tmp_path / "plain"
    root.mkdir()
    for fname in SHA256:
        stem = fname[:-3]
        lines = gzip.decompress((src / fname).read_bytes()).splitlines(keepends=True)[:20]
        (root / stem).write_bytes(b"".join(lines))
    dm = Multi30kDataModule(root=str(root), cache_dir=str(tmp_path), vocab_size=300)
    dm.setup()
    assert len(dm.train_set) == 20 and dm.file_path("val", "de").name == "val.de"
    shutil.rmtree(root)
