"""Claim verdicts on fixture numbers: supported, not supported, inconclusive."""

from __future__ import annotations

import pytest

from xformer.report.aggregate import Stat, aggregate
from xformer.report.claims import (INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Options, compare, evaluate,
                                   higher_is_better)

from .conftest import write_job, write_sweep

PAPER_PARAMS = {2: 53e6, 4: 65e6, 8: 90e6}


def verdicts(root, cid, **opts):
    return [v for v in evaluate(aggregate([root]), Options(**opts)) if v.claim == cid]


def test_noise_rule_uses_pooled_std():
    a, b = Stat.of([1.0, 1.2]), Stat.of([1.5, 1.7])     # stds 0.1414, pooled 0.1414, Δ (lower better) 0.5
    c = compare(a, b, higher=False)
    assert c.outcome == "better" and c.delta == pytest.approx(0.5) and c.noise == pytest.approx(0.1414213562)
    assert compare(Stat.of([1.0, 1.4]), Stat.of([1.1, 1.3]), higher=False).outcome == "tie"
    assert compare(Stat.of([1.0]), Stat.of([2.0, 2.1]), higher=False).outcome == "too few seeds"
    assert not higher_is_better("val/loss") and not higher_is_better("test/loss@2x")
    assert higher_is_better("test/bleu") and higher_is_better("test/exact_match@4x")


def test_c1_supported_for_paper_shaped_bleu(tmp_path):
    # Vaswani et al. Table 3 row C: 25.4 / 25.8 / 26.2 BLEU at 53 / 65 / 90 M parameters
    write_sweep(tmp_path, "model.ffn_ratio", {2: [25.35, 25.45], 4: [25.75, 25.85], 8: [26.15, 26.25]},
                metric="test/bleu", params=PAPER_PARAMS)
    (v,) = verdicts(tmp_path, "C1")
    assert v.status == SUPPORTED, v.line()
    assert "test/bleu" in v.measured and "25.8" in v.measured and "25.8" in v.published


def test_c1_supported_for_val_loss_with_diminishing_gain(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {1: [2.0, 2.02], 2: [1.8, 1.82], 4: [1.6, 1.62], 8: [1.55, 1.57]})
    (v,) = verdicts(tmp_path, "C1")
    assert v.status == SUPPORTED, v.line()
    assert "val/loss" in v.measured


def test_c1_not_supported_for_reversed_numbers(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {2: [26.15, 26.25], 4: [25.75, 25.85], 8: [25.35, 25.45]},
                metric="test/bleu", params=PAPER_PARAMS)
    (v,) = verdicts(tmp_path, "C1")
    assert v.status == NOT_SUPPORTED, v.line()


def test_c1_not_supported_without_diminishing_gain(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {2: [2.0, 2.01], 4: [1.8, 1.81], 8: [1.4, 1.41]})
    (v,) = verdicts(tmp_path, "C1")
    assert v.status == NOT_SUPPORTED and "diminishing" in v.reason


def test_c1_inconclusive_when_seeds_overlap_or_single_seed(tmp_path):
    write_sweep(tmp_path / "a", "model.ffn_ratio", {2: [1.6, 1.8], 4: [1.65, 1.75]})
    (v,) = verdicts(tmp_path / "a", "C1")
    assert v.status == INCONCLUSIVE and "tie" in v.reason
    write_sweep(tmp_path / "b", "model.ffn_ratio", {2: [2.0], 4: [1.0]})
    (v,) = verdicts(tmp_path / "b", "C1")
    assert v.status == INCONCLUSIVE and "too few seeds" in v.reason


def test_c1_not_recognised_without_ffn_ratio_sweep(tmp_path):
    write_sweep(tmp_path, "model.n_heads", {1: [2.0, 2.1], 4: [1.5, 1.6]})
    assert verdicts(tmp_path, "C1") == []
    assert [v.claim for v in evaluate(aggregate([tmp_path]))] == ["C2", "C3"]


def _pe_sweep(root, table):
    """``table = {pe: (em@2x per seed, em@4x per seed)}``; em@1x is 1.0 everywhere."""
    num = 0
    for pe, (two, four) in table.items():
        for seed, (a, b) in enumerate(zip(two, four), start=1):
            metrics = {"val/loss": 0.1, "test/exact_match@1x": 1.0, "test/exact_match@2x": a, "test/exact_match@4x": b}
            write_job(root, num, [f"model/pe={pe}", f"seed={seed}"], metrics)
            num += 1


def test_c5_supported_when_sinusoidal_extrapolates(tmp_path):
    _pe_sweep(tmp_path, {"sinusoidal": ([0.6, 0.64], [0.3, 0.34]), "learned": ([0.1, 0.12], [0.0, 0.02]),
                         "alibi": ([0.9, 0.92], [0.8, 0.82])})
    (v,) = verdicts(tmp_path, "C5")
    assert v.status == SUPPORTED, v.line()
    assert "test/exact_match" in v.measured and "alibi" in v.measured and "4x" in v.measured


def test_c5_not_supported_when_learned_extrapolates_better(tmp_path):
    _pe_sweep(tmp_path, {"sinusoidal": ([0.1, 0.12], [0.0, 0.02]), "learned": ([0.6, 0.64], [0.3, 0.34])})
    (v,) = verdicts(tmp_path, "C5")
    assert v.status == NOT_SUPPORTED


def test_c5_inconclusive_when_within_noise(tmp_path):
    _pe_sweep(tmp_path, {"sinusoidal": ([0.2, 0.6], [0.1, 0.3]), "learned": ([0.3, 0.5], [0.15, 0.25])})
    (v,) = verdicts(tmp_path, "C5")
    assert v.status == INCONCLUSIVE


def test_c6_equivalence_within_margin(tmp_path):
    write_sweep(tmp_path / "a", "model/pe", {"sinusoidal": [25.75, 25.85], "learned": [25.65, 25.75]},
                metric="test/bleu")
    (v,) = verdicts(tmp_path / "a", "C6")
    assert v.status == SUPPORTED, v.line()
    write_sweep(tmp_path / "b", "model/pe", {"sinusoidal": [25.75, 25.85], "learned": [20.0, 20.1]},
                metric="test/bleu")
    (v,) = verdicts(tmp_path / "b", "C6")
    assert v.status == NOT_SUPPORTED


def test_c4_post_ln_needs_warmup_pre_ln_does_not(tmp_path):
    num = 0
    # Xiong et al. 2020: Post-LN 8.45 BLEU without warm-up, ~34 with; Pre-LN ~34 without
    cells = {("post", 0): [8.4, 8.5], ("post", 4000): [34.0, 34.1],
             ("pre", 0): [34.0, 34.2], ("pre", 4000): [34.1, 34.1]}
    for (norm, warm), vals in cells.items():
        for seed, b in enumerate(vals, start=1):
            write_job(tmp_path, num, [f"model/norm={norm}", f"optim.warmup_steps={warm}", f"seed={seed}"],
                      {"test/bleu": b, "val/loss": 1.0})
            num += 1
    (v,) = verdicts(tmp_path, "C4")
    assert v.status == SUPPORTED, v.line()


def test_c2_ffn_share_of_base_block_is_two_thirds(tmp_path):
    write_sweep(tmp_path, "model.n_heads", {4: [1.0], 8: [1.1]})
    (v,) = verdicts(tmp_path, "C2")
    assert v.status == SUPPORTED and "0.666" in v.measured


def test_c7_c8_from_bench_json():
    from xformer.report.aggregate import Sweep

    empty = Sweep([], [], [], {}, [], [], [])
    bench = {"attention_cost": {"xformer": {"time_exponent": 1.93, "memory_exponent": 2.01}},
             "attention_vs_lstm": {"crossover_n": 600, "d": 512}}
    got = {v.claim: v.status for v in evaluate(empty, Options(bench=bench))}
    assert got == {"C7": SUPPORTED, "C8": SUPPORTED}
    rows = {"attention_cost": {"rows": [{"n": n, "time_ms": 0.001 * n} for n in (256, 512, 1024, 2048)]},
            "attention_vs_lstm": {"crossover_n": 64, "d": 512}}
    got = {v.claim: v.status for v in evaluate(empty, Options(bench=rows))}
    assert got == {"C7": NOT_SUPPORTED, "C8": NOT_SUPPORTED}


def test_c3_supported_for_paper_heads_row(tmp_path):
    # Table 3 row A: 24.9 / 25.5 / 25.8 / 25.8 / 25.4 BLEU at h = 1 / 4 / 8 / 16 / 32
    table = {1: [24.85, 24.95], 4: [25.45, 25.55], 8: [25.75, 25.85], 16: [25.75, 25.85], 32: [25.35, 25.45]}
    write_sweep(tmp_path, "model.n_heads", table, metric="test/bleu")
    (v,) = verdicts(tmp_path, "C3")
    assert v.status == SUPPORTED, v.line()


def test_c12_label_smoothing_costs_perplexity_but_helps_bleu(tmp_path):
    num = 0
    for eps, ppl, bleu in ((0, [4.6, 4.7], [25.2, 25.3]), (0.1, [4.9, 4.95], [25.8, 25.9])):
        for seed in (0, 1):
            write_job(tmp_path, num, [f"loss.label_smoothing={eps}", f"seed={seed + 1}"],
                      {"val/ppl": ppl[seed], "test/bleu": bleu[seed]})
            num += 1
    (v,) = verdicts(tmp_path, "C12")
    assert v.status == SUPPORTED and "label smoothing" in v.reason
