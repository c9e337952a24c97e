"""Tokenizers: special ids, round trips, save/load, cached joint BPE."""

from __future__ import annotations

import pytest

from xformer.data.tokenizers import (
    BOS,
    EOS,
    PAD,
    UNK,
    BPETokenizer,
    CharTokenizer,
    load_tokenizer,
    train_or_load_bpe,
)

DE = [
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "Zwei junge weiße Männer sind im Freien.",
    "Ein Mann spielt Gitarre auf der Straße.",
    "Die Mädchen spielen im Garten.",
] * 20
EN = [
    "A little girl climbing into a wooden playhouse.",
    "Two young white males are outside.",
    "A man is playing guitar on the street.",
    "The girls are playing in the garden.",
] * 20


def test_special_ids_are_fixed():
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    tok = CharTokenizer("ab")
    assert tok.encode("ab") == [4, 5] and tok.vocab_size == 6
    bpe = BPETokenizer.train(EN, vocab_size=300)
    assert [bpe._tok.token_to_id(s) for s in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]


def test_char_tokenizer_roundtrip_unknown_and_save(tmp_path):
    tok = CharTokenizer.from_texts(["hello world"], extra_specials=["<sep>"])
    assert tok.token_to_id("<sep>") == 4
    ids = tok.encode("hello")
    assert min(ids) >= 5 and tok.decode(ids) == "hello"
    assert tok.encode("hz") == [tok.encode("h")[0], UNK]
    assert tok.decode([BOS, *ids, 4, EOS, PAD]) == "hello"  # specials dropped
    tok.save(tmp_path / "c.json")
    again = load_tokenizer(tmp_path / "c.json")
    assert isinstance(again, CharTokenizer) and again == tok


@pytest.mark.parametrize(
    "text",
    [
        "Zwei junge weiße Männer sind im Freien.",
        "  leading and  double  spaces ",
        "tab\tand\nnewline",
        "unseen: 東京 😀 Ærø",
        "",
    ],
)
def test_bpe_roundtrip(text, tmp_path):
    bpe = BPETokenizer.train(DE + EN, vocab_size=400)
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text
    assert UNK not in ids and BOS not in ids and EOS not in ids
    assert bpe.decode([BOS, *ids, EOS, PAD]) == text
    bpe.save(tmp_path / "b.json")
    assert load_tokenizer(tmp_path / "b.json").encode(text) == ids


def test_bpe_joint_vocab_covers_both_languages():
    bpe = BPETokenizer.train(DE + EN, vocab_size=500)
    # frequent words of each language became single tokens of the one shared vocabulary
    for word in (" Mädchen", " Männer", " playing", " girl"):
        assert len(bpe.encode(word)) == 1, word
    assert len(bpe.encode_batch(["Mädchen", "girl"])) == 2


def test_bpe_trained_once_then_loaded_from_cache(tmp_path, monkeypatch):
    calls = []
    real_train = BPETokenizer.train.__func__

    def counting_train(cls, texts, vocab_size, min_frequency=2):
        calls.append(vocab_size)
        return real_train(cls, texts, vocab_size, min_frequency)

    monkeypatch.setattr(BPETokenizer, "train", classmethod(counting_train))
    a = train_or_load_bpe(DE + EN, 350, tmp_path, "t")
    files = list((tmp_path / "tokenizers").glob("bpe-t-v350-*.json"))
    assert len(files) == 1 and calls == [350]
    b = train_or_load_bpe(DE + EN, 350, tmp_path, "t")
    assert calls == [350], "second construction must load the cached file, not retrain"
    assert a.encode(DE[0]) == b.encode(DE[0])
    train_or_load_bpe(DE + EN[:-1], 350, tmp_path, "t")  # different data -> different cache file
    train_or_load_bpe(DE + EN, 360, tmp_path, "t")  # different size -> different cache file
    assert calls == [350, 350, 360]
    assert len(list((tmp_path / "tokenizers").glob("*.json"))) == 3


def test_bpe_rejects_too_small_vocab():
    with pytest.raises(ValueError, match="260"):
        BPETokenizer.train(EN, vocab_size=100)


@pytest.mark.parametrize("specials", [True, False])
def test_char_encode_array_equals_the_per_character_encode(specials):
    """The table lookup over code points (start-up of a character LM) gives :meth:`encode`'s ids, UNK
    for an unseen character with specials, and KeyError for one without (as ``encode``)."""
    import numpy as np

    text = "Wörter, ñ and 日本 — \n\tend" * 3
    tok = CharTokenizer.from_texts([text], specials=specials)
    got = tok.encode_array(text)
    assert got.dtype == np.int64 and got.tolist() == tok.encode(text)
    assert tok.encode_array("").tolist() == []
    if specials:
        assert tok.encode_array("W€").tolist() == tok.encode("W€") == [tok.encode("W")[0], UNK]
    else:
        with pytest.raises(KeyError):
            tok.encode_array("W€")
        with pytest.raises(KeyError):
            tok.encode("W€")
