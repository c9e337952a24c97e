"""TextDataModule: the user's own parallel (lines/tsv) and LM text files, and error messages."""

from __future__ import annotations

import gzip

import pytest
import torch

from xformer.data.errors import DataError
from xformer.data.text import TextDataModule
from xformer.data.tokenizers import BOS, EOS

SRC = ["ein Hund", "eine Katze", "zwei Hunde", "ein Vogel singt", "die Maus"] * 6
TGT = ["a dog", "a cat", "two dogs", "a bird sings", "the mouse"] * 6


def _write(path, lines, encoding="utf-8"):
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    return str(path)


@pytest.fixture
def parallel(tmp_path):
    files = {}
    for split, n in (("train", 30), ("val", 10), ("test", 5)):
        files[f"{split}_src"] = _write(tmp_path / f"{split}.de", SRC[:n])
        files[f"{split}_tgt"] = _write(tmp_path / f"{split}.en", TGT[:n])
    return files


@pytest.mark.parametrize("tokenizer", ["bpe", "char"])
def test_parallel_lines(parallel, tmp_path, tokenizer):
    dm = TextDataModule(form="parallel", tokenizer=tokenizer, vocab_size=300, cache_dir=str(tmp_path), **parallel)
    dm.setup()
    assert dm.task == "seq2seq" and dm.metrics == ["bleu"] and dm.test_split_names == ["test"]
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_sets["test"])) == (30, 10, 5)
    batch = next(iter(dm.train_dataloader()))
    assert batch["src"].dtype == torch.long and (batch["tgt"][:, 0] == BOS).all()
    for t, text in zip(batch["tgt"], batch["tgt_text"], strict=False):
        assert dm.detokenize(t) == text
    assert dm.max_tgt_len == max(len(t) for t in dm.train_set.tgt)


def test_parallel_tsv_and_no_test_split(tmp_path):
    _write(tmp_path / "train.tsv", [f"{s}\t{t}" for s, t in zip(SRC, TGT, strict=False)] + ["", "  \t  "])
    _write(tmp_path / "val.tsv", [f"{s}\t{t}" for s, t in zip(SRC[:4], TGT[:4], strict=False)])
    dm = TextDataModule(
        format="tsv", train="train.tsv", val="val.tsv", root=str(tmp_path), tokenizer="char", metrics=["exact_match"]
    )
    dm.setup()
    assert dm.train_set.src_text == SRC and dm.train_set.tgt_text == TGT
    assert dm.metrics == ["exact_match"]
    assert dm.test_split_names == [] and dm.test_dataloader() == []


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_lm_form(tmp_path, tokenizer):
    text = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 20
    train = _write(tmp_path / "train.txt", [text])
    val = _write(tmp_path / "val.txt", [text[:400]])
    dm = TextDataModule(
        form="lm",
        train=train,
        val=val,
        tokenizer=tokenizer,
        vocab_size=300,
        tokens_per_batch=64,
        block_size=16,
        cache_dir=str(tmp_path),
    )
    dm.setup()
    assert dm.task == "lm" and dm.metrics == [] and dm.batch_size == 4
    assert dm.max_tgt_len == 17 and dm.test_split_names == []
    batch = next(iter(dm.train_dataloader()))
    assert batch["tgt"].shape == (4, 17) and set(batch) == {"tgt", "idx"}
    assert dm.tokenizer.decode(dm.train_ids.tolist()) == text + "\n"
    assert all(b["tgt"].shape[1] == 17 for b in dm.val_dataloader())


def test_missing_file_names_argument_and_path(parallel, tmp_path):
    parallel["val_tgt"] = str(tmp_path / "nope.en")
    with pytest.raises(DataError, match=r"val_tgt file not found: .*nope\.en"):
        TextDataModule(**parallel).setup()


def test_unset_required_path():
    with pytest.raises(DataError, match="train_src is not set"):
        TextDataModule().setup()


def test_mismatched_line_counts_name_both_files(parallel, tmp_path):
    parallel["train_tgt"] = _write(tmp_path / "short.en", TGT[:29])
    with pytest.raises(DataError) as err:
        TextDataModule(tokenizer="char", **parallel).setup()
    msg = str(err.value)
    assert "train.de has 30 lines" in msg and "short.en has 29 lines" in msg


def test_non_utf8_line_is_named(parallel, tmp_path):
    bad = tmp_path / "bad.de.gz"
    bad.write_bytes(gzip.compress("ok\nok\nMänner\n".encode("latin-1")))
    parallel["val_src"] = str(bad)
    with pytest.raises(DataError, match=r"bad\.de\.gz: line 3 is not valid UTF-8"):
        TextDataModule(tokenizer="char", **parallel).setup()


def test_tsv_line_without_tab(tmp_path):
    _write(tmp_path / "t.tsv", ["a\tb", "no tab here"])
    with pytest.raises(DataError, match=r"t\.tsv: line 2 has 0 TAB"):
        TextDataModule(format="tsv", train=str(tmp_path / "t.tsv"), val=str(tmp_path / "t.tsv")).setup()


def test_lm_split_too_short(tmp_path):
    train = _write(tmp_path / "a.txt", ["x" * 100])
    val = _write(tmp_path / "b.txt", ["short"])
    with pytest.raises(DataError, match="val split has 6 tokens"):
        TextDataModule(form="lm", train=train, val=val, tokenizer="char", block_size=16).setup()


def test_eos_appended_in_parallel_batches(parallel):
    dm = TextDataModule(tokenizer="char", **parallel)
    dm.setup()
    assert all(
        s[-1] == EOS and t[-1] == EOS and t[0] == BOS for s, t in zip(dm.val_set.src, dm.val_set.tgt, strict=False)
    )
