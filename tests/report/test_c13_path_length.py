"""Issue 32 item 4: the C13 rule (path length) on hand-made sweeps over ``model/mixer`` × ``data.distance``:
supported when attention holds and the recurrent layer falls, not supported when the recurrent layer
keeps up (or attention falls as far), inconclusive when the positive control fails (a layer type does
not learn even the shortest distance) or attention falls too."""

from __future__ import annotations

import pytest

from xformer.report.aggregate import aggregate
from xformer.report.claims import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Options, evaluate

from .conftest import write_job

DISTANCES = (8, 32, 128, 512)
SPREAD = (-0.01, 0.0, 0.01)


def recall_sweep(root, acc: dict[str, dict[int, float]]):
    """``acc[mixer][distance]`` = mean accuracy; three seeds around it, each with a flat
    ``val/exact_match`` curve (validations every 10 steps to 100) at its final value."""
    num = 0
    for mixer, by_k in acc.items():
        for k, mean in by_k.items():
            for seed, off in enumerate(SPREAD, start=1):
                v = min(1.0, max(0.0, mean + off))
                job = write_job(
                    root,
                    num,
                    [f"model/mixer={mixer}", f"data.distance={k}", f"seed={seed}"],
                    {"test/exact_match": v, "val/exact_match": v, "val/loss": 1.0 - v},
                )
                (job / "csv").mkdir()
                rows = ["epoch,step,val/exact_match,val/loss"] + [
                    f"0,{s - 1},{v},{1.0 - v}" for s in range(10, 101, 10)
                ]
                (job / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
                num += 1
    return root


def c13(root):
    (v,) = [v for v in evaluate(aggregate([root]), Options()) if v.claim == "C13"]
    return v


def test_attention_holds_and_the_lstm_falls_is_supported(tmp_path):
    v = c13(
        recall_sweep(
            tmp_path,
            {
                "mha": dict.fromkeys(DISTANCES, 0.97),
                "lstm": {8: 0.97, 32: 0.3, 128: 0.1, 512: 0.1},
                "conv": {8: 0.97, 32: 0.1, 128: 0.1, 512: 0.1},
            },
        )
    )
    assert v.status == SUPPORTED, v.block()
    text = v.block()
    assert "lstm: learnt (mean ≥ 0.9) up to distance 8, below it from 32" in text
    assert "conv: learnt (mean ≥ 0.9) up to distance 8, below it from 32" in text
    assert "mha: learnt (mean ≥ 0.9) up to distance 512, at every distance swept" in text
    assert "test/exact_match by distance" in v.measured


def test_an_lstm_that_keeps_up_is_not_supported(tmp_path):
    v = c13(recall_sweep(tmp_path, {"mha": dict.fromkeys(DISTANCES, 0.97), "lstm": dict.fromkeys(DISTANCES, 0.96)}))
    assert v.status == NOT_SUPPORTED, v.block()
    assert "the recurrent layer still learns the dependency at distance 512" in v.reason


def test_attention_falling_as_far_as_the_lstm_is_not_supported(tmp_path):
    v = c13(
        recall_sweep(
            tmp_path,
            {"mha": {8: 0.97, 32: 0.5, 128: 0.2, 512: 0.1}, "lstm": {8: 0.97, 32: 0.4, 128: 0.2, 512: 0.12}},
        )
    )
    assert v.status == NOT_SUPPORTED, v.block()
    assert "attention loses as much accuracy as the recurrent layer" in v.reason


def test_attention_falling_less_than_the_lstm_is_inconclusive(tmp_path):
    v = c13(recall_sweep(tmp_path, {"mha": {8: 0.97, 32: 0.95, 128: 0.9, 512: 0.7}, "lstm": {8: 0.97, 512: 0.1}}))
    assert v.status == INCONCLUSIVE, v.block()
    assert "attention also loses accuracy" in v.block()


@pytest.mark.parametrize("weak", ["mha", "lstm"])
def test_a_layer_that_cannot_learn_the_shortest_distance_cannot_show_it(tmp_path, weak):
    acc = {"mha": dict.fromkeys(DISTANCES, 0.97), "lstm": {8: 0.97, 32: 0.3, 128: 0.1, 512: 0.1}}
    acc[weak] = {**acc[weak], 8: 0.4}
    v = c13(recall_sweep(tmp_path, acc))
    assert v.status == INCONCLUSIVE, v.block()
    assert "this setting cannot show it" in v.reason and weak in v.reason


def test_a_sweep_without_the_recurrent_layer_is_not_judged(tmp_path):
    root = recall_sweep(tmp_path, {"mha": dict.fromkeys(DISTANCES, 0.97), "conv": dict.fromkeys(DISTANCES, 0.5)})
    (v,) = [v for v in evaluate(aggregate([root]), Options()) if v.claim == "C13"]
    assert v.status == INCONCLUSIVE and "does not cover" in v.reason
