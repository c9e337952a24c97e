"""Evaluation metrics: BLEU is sacrebleu's corpus BLEU on the same strings; exact match; perplexity."""

import math

import sacrebleu
import torch

from xformer.train.module import TransformerLitModule


def module(metrics):
    return TransformerLitModule(torch.nn.Linear(1, 1), optimizer=None, lr_lambda=None, metrics=metrics)


HYPS = ["a man rides a horse .", "two dogs play in the snow", "the cat sits", "a woman is cooking ."]
REFS = ["a man is riding a horse .", "two dogs are playing in the snow .", "a cat sits on a mat .",
        "a woman is cooking ."]


def test_bleu_equals_sacrebleu_corpus_bleu_and_records_the_signature():
    m = module(["bleu"])
    m._eval["val"] = {"idx": [0, 1, 2, 3], "nll": [1.0, 2.0, 3.0, 1.0], "n": [1, 1, 1, 1], "correct": [1, 1, 0, 1],
                      "text": dict(enumerate(zip(HYPS, REFS)))}
    out = m._eval_end("val")
    assert out["val/bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert 0 < out["val/bleu"] < 100
    assert m.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert math.isclose(out["val/loss"], 7.0 / 4) and math.isclose(out["val/ppl"], math.exp(7.0 / 4))
    assert out["val/acc"] == 0.75


def test_exact_match_counts_identical_strings():
    m = module(["exact_match"])
    m._eval["test"] = {"idx": [5, 6, 7], "nll": [0.1, 0.2, 0.3], "n": [2, 2, 2], "correct": [2, 2, 1],
                       "text": {5: ("zwei", "zwei"), 6: ("drei ", "drei"), 7: ("vier", "fünf")}}
    assert m._eval_end("test", "@long")["test/exact_match@long"] == 2 / 3
