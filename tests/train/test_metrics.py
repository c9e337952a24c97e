"""Evaluation metrics: BLEU is sacrebleu's corpus BLEU on the same strings; exact match; perplexity."""

import math

import sacrebleu

from xformer.train.module import corpus_metrics

HYPS = ["a man rides a horse .", "two dogs play in the snow", "the cat sits", "a woman is cooking ."]
REFS = [
    "a man is riding a horse .",
    "two dogs are playing in the snow .",
    "a cat sits on a mat .",
    "a woman is cooking .",
]


def test_bleu_equals_sacrebleu_corpus_bleu_and_records_the_signature():
    rows = [(1.0, 1, 1), (2.0, 1, 1), (3.0, 1, 0), (1.0, 1, 1)]
    out, signature = corpus_metrics(rows, dict(enumerate(zip(HYPS, REFS, strict=False))), ["bleu"], "val")
    assert out["val/bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert 0 < out["val/bleu"] < 100
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert math.isclose(out["val/loss"], 7.0 / 4) and math.isclose(out["val/ppl"], math.exp(7.0 / 4))
    assert out["val/acc"] == 0.75


def test_exact_match_counts_identical_strings():
    rows = [(0.1, 2, 2), (0.2, 2, 2), (0.3, 2, 1)]
    texts = {5: ("zwei", "zwei"), 6: ("drei ", "drei"), 7: ("vier", "fünf")}
    out, signature = corpus_metrics(rows, texts, ["exact_match"], "test", "@long")
    assert out["test/exact_match@long"] == 2 / 3 and signature is None
