"""Claim verdicts on hand-made sweeps: supported, not supported and every way to be inconclusive
(axis not covered, too few seeds, saturated metric, under-trained runs, differences within noise)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from xformer.report.aggregate import Stat, aggregate
from xformer.report.claims import (
    BETTER,
    FEW,
    INCONCLUSIVE,
    NOISE,
    NOT_SUPPORTED,
    SUPPORTED,
    WORSE,
    Options,
    compare,
    evaluate,
    higher_is_better,
    saturation,
)
from xformer.report.stats import equivalent, welch

from .conftest import flat_curve, overfit_curve, write_job, write_sweep

PAPER_PARAMS = {1: 47e6, 2: 53e6, 4: 65e6, 8: 90e6}


def verdicts(root, cid, **opts):
    return [v for v in evaluate(aggregate([root]), Options(**opts)) if v.claim == cid]


def only(root, cid, **opts):
    (v,) = verdicts(root, cid, **opts)
    return v


# -- statistics ---------------------------------------------------------------------------------
def test_welch_interval_matches_hand_calculation():
    # means 1.1 and 1.6, variances 0.01 each, n = 3: se = sqrt(2 * 0.01 / 3) = 0.08165, df = 4,
    # t_0.975,4 = 2.776445 → half width 0.22669
    iv = welch([1.0, 1.1, 1.2], [1.5, 1.6, 1.7])
    assert iv.delta == pytest.approx(-0.5) and iv.df == pytest.approx(4.0)
    assert iv.lo == pytest.approx(-0.72669, abs=1e-5) and iv.hi == pytest.approx(-0.27331, abs=1e-5)
    assert 0.001 < iv.p < 0.01
    with pytest.raises(ValueError, match="at least 2"):
        welch([1.0], [1.0, 2.0])


def test_compare_direction_interval_and_seed_floor():
    a, b = Stat.of([1.0, 1.1, 1.2]), Stat.of([1.5, 1.6, 1.7])
    c = compare(a, b, higher=False, a_name="A", b_name="B")  # lower loss is better: A improves by 0.5
    assert c.outcome == BETTER and c.delta == pytest.approx(0.5)
    assert c.interval.lo == pytest.approx(0.27331, abs=1e-5) and "95% CI" in c.text() and "n=3/3" in c.text()
    assert compare(b, a, higher=False).outcome == WORSE
    assert compare(Stat.of([1.0, 1.4, 1.2]), Stat.of([1.1, 1.3, 1.25]), higher=False).outcome == NOISE
    two = compare(Stat.of([1.0, 1.01]), Stat.of([2.0, 2.01]), higher=False)
    assert two.outcome == FEW and two.interval is None  # a huge gap on 2 seeds still decides nothing
    assert not higher_is_better("val/loss") and not higher_is_better("test/loss@2x")
    assert higher_is_better("test/bleu") and higher_is_better("test/exact_match@4x")


def test_tost_equivalence():
    holds, iv = equivalent([1.00, 1.01, 1.02], [1.005, 1.015, 1.025], margin=0.05)
    assert holds and iv.confidence == pytest.approx(0.90)
    assert not equivalent([1.0, 1.01, 1.02], [1.1, 1.11, 1.12], margin=0.05)[0]


# -- C1 ----------------------------------------------------------------------------------------
def test_c1_supported_for_converged_loss_with_diminishing_gain(tmp_path):
    write_sweep(
        tmp_path,
        "model.ffn_ratio",
        {1: [2.00, 2.01, 2.02], 2: [1.80, 1.81, 1.82], 4: [1.60, 1.61, 1.62], 8: [1.55, 1.56, 1.57]},
    )
    v = only(tmp_path, "C1")
    assert v.status == SUPPORTED, v.block()
    assert "val/loss" in v.measured and any("95% CI" in e for e in v.evidence) and "ratio below" in v.rule


def test_c1_supported_for_paper_shaped_bleu_per_parameter(tmp_path):
    # Table 3 row C: 25.4 / 25.8 / 26.2 BLEU at 53 / 65 / 90 M: +0.033 vs +0.016 BLEU per added M
    write_sweep(
        tmp_path,
        "model.ffn_ratio",
        {2: [25.39, 25.40, 25.41], 4: [25.79, 25.80, 25.81], 8: [26.19, 26.20, 26.21]},
        metric="test/bleu",
        params=PAPER_PARAMS,
    )
    v = only(tmp_path, "C1")
    assert v.status == SUPPORTED, v.block()
    assert any("per M added params" in e for e in v.evidence) and "25.8" in v.published


def test_c1_not_supported_when_a_smaller_ratio_wins(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {2: [1.50, 1.51, 1.52], 4: [1.60, 1.61, 1.62], 8: [1.70, 1.71, 1.72]})
    v = only(tmp_path, "C1")
    assert v.status == NOT_SUPPORTED and "ratio 2 is better than 4" in v.reason, v.block()


def test_c1_not_supported_without_diminishing_gain(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {2: [2.00, 2.005, 2.01], 4: [1.80, 1.805, 1.81], 8: [1.40, 1.405, 1.41]})
    v = only(tmp_path, "C1")
    assert v.status == NOT_SUPPORTED and "diminishing" in v.reason, v.block()


def test_c1_inconclusive_within_noise(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {2: [1.6, 1.8, 1.7], 4: [1.65, 1.75, 1.72], 8: [1.6, 1.7, 1.8]})
    v = only(tmp_path, "C1")
    assert v.status == INCONCLUSIVE and "within the noise" in v.reason, v.block()


def test_issue_case_2_ratio_30_step_sweep_is_inconclusive(tmp_path):
    # `run.py model.ffn_ratio=2,4 seed=1,2 trainer.max_steps=30 -m`: test loss ~5.5, one validation
    # (the last step), 2 seeds, 2 ratios; the old rule called 4 vs 2 (Δ +0.101, noise 0.031) "better"
    table = {2: [5.62, 5.58], 4: [5.50, 5.48]}
    num = 0
    for ratio, vals in table.items():
        for seed, loss in enumerate(vals, start=1):
            write_job(
                tmp_path,
                num,
                [f"model.ffn_ratio={ratio}", f"seed={seed}", "trainer.max_steps=30"],
                {"test/loss": loss, "val/loss": loss - 0.01, "test/exact_match": 0.0},
                curve=[(29, loss + 0.2, loss - 0.01)],
            )
            num += 1
    v = only(tmp_path, "C1")
    assert v.status == INCONCLUSIVE, v.block()
    assert "below and above 4" in v.reason  # two ratios cannot show a sweet spot
    assert "too few seeds: ratio 2, ratio 4" in v.reason and "fewer than 4 validations in the second half" in v.reason
    assert v.budget.startswith("30 steps")
    assert (
        "check failed: ratio 2: 2 seed(s) (needs ≥ 3). Fix: run it with more seeds, e.g. add seed=1,2,3 to "
        "the sweep's command (-m)" in v.evidence
    )
    assert "test/loss" in v.evidence[0]  # decided on the continuous metric


def test_issue_case_committed_saturated_c1_sweep_is_inconclusive(tmp_path):
    # docs/results/c1_ffn_ratio before issue 12: numbers task, 2 seeds, exact match 0.993-0.998 everywhere,
    # val/loss 0.057 → 0.049 → 0.044 → 0.043; two validations (steps 400 and 800)
    rows = {
        1: ([0.992, 0.994], [0.0565, 0.0576], [0.0565, 0.0635]),
        2: ([0.994, 0.996], [0.0466, 0.0517], [0.0489, 0.0579]),
        4: ([0.994, 0.994], [0.0419, 0.0458], [0.0492, 0.0502]),
        8: ([0.996, 1.000], [0.0427, 0.0432], [0.0445, 0.0465]),
    }
    num = 0
    for ratio, (em, vl, tl) in rows.items():
        for s in range(2):
            write_job(
                tmp_path,
                num,
                [f"model.ffn_ratio={ratio}", f"seed={s + 1}", "experiment=claims/c1_ffn_ratio"],
                {"test/exact_match": em[s], "val/exact_match": em[s], "val/loss": vl[s], "test/loss": tl[s]},
                curve=[(399, 0.3, vl[s] * 2.5), (799, 0.05, vl[s])],
            )
            num += 1
    v = only(tmp_path, "C1")
    assert v.status == INCONCLUSIVE, v.block()
    assert v.evidence[0] == "decision metric: test/loss"
    assert any("test/exact_match is saturated at its ceiling" in e and "(not used)" in e for e in v.evidence)
    assert "too few seeds" in v.reason and "fewer than 4 validations in the second half" in v.reason
    forced = only(tmp_path, "C1", metric="test/exact_match")  # judged on exact match: saturation is the reason
    assert forced.status == INCONCLUSIVE and "saturated" in forced.reason


def test_saturation_blocks_an_otherwise_decisive_sweep(tmp_path):
    write_sweep(
        tmp_path,
        "model.ffn_ratio",
        {2: [0.991, 0.992, 0.993], 4: [0.995, 0.996, 0.997], 8: [0.997, 0.9975, 0.998]},
        metric="test/exact_match",
    )
    v = only(tmp_path, "C1", metric="test/exact_match")
    assert v.status == INCONCLUSIVE and "saturated" in v.reason and "the rule alone would say" in v.reason
    assert saturation("test/exact_match", []) is None and saturation("val/loss", []) is None


def test_still_improving_runs_are_a_caveat_not_a_blocker(tmp_path):
    """Every setting still falls at its last validation by far more than the seed noise (the old rule:
    "under-trained", inconclusive), but the gaps between settings stay put: supported, with a caveat."""
    table = {1: [2.00, 2.01, 2.02], 2: [1.80, 1.81, 1.82], 4: [1.60, 1.61, 1.62], 8: [1.55, 1.56, 1.57]}
    falling = {r: [[(s, v + 1, v + 30.0 / s) for s in range(10, 101, 10)] for v in vals] for r, vals in table.items()}
    write_sweep(tmp_path, "model.ffn_ratio", table, curves=falling)
    v = only(tmp_path, "C1")
    assert v.status == SUPPORTED, v.block()
    assert any(
        "stability: 4: val/loss still improving: it changed by 0.0333 over its last validation interval (steps 90–100"
        in e
        and "not a blocker" in e
        for e in v.evidence
    ), v.block()


def test_c1_waits_for_ratio_4(tmp_path):
    write_sweep(tmp_path, "model.ffn_ratio", {1: [2.0, 2.01, 2.02], 2: [1.8, 1.81, 1.82]})
    v = only(tmp_path, "C1")
    assert v.status == INCONCLUSIVE and "does not cover" in v.reason


def test_c1_not_recognised_without_ffn_ratio_sweep(tmp_path):
    write_sweep(tmp_path, "model.n_heads", {1: [2.0, 2.1, 2.05], 4: [1.5, 1.6, 1.55]})
    assert verdicts(tmp_path, "C1") == []
    assert [v.claim for v in evaluate(aggregate([tmp_path]))] == ["C2", "C3"]


# -- the other claims ---------------------------------------------------------------------------
def test_c3_supported_for_paper_heads_row_and_needs_two_multi_head_settings(tmp_path):
    # Table 3 row A: 24.9 / 25.5 / 25.8 / 25.8 / 25.4 BLEU at h = 1 / 4 / 8 / 16 / 32
    table = {
        1: [24.89, 24.9, 24.91],
        4: [25.49, 25.5, 25.51],
        8: [25.79, 25.8, 25.81],
        16: [25.79, 25.8, 25.81],
        32: [25.39, 25.4, 25.41],
    }
    write_sweep(tmp_path / "a", "model.n_heads", table, metric="test/bleu")
    assert only(tmp_path / "a", "C3").status == SUPPORTED
    write_sweep(tmp_path / "b", "model.n_heads", {1: table[1], 8: table[8]}, metric="test/bleu")
    v = only(tmp_path / "b", "C3")
    assert v.status == INCONCLUSIVE and "does not cover" in v.reason


def test_c4_post_ln_needs_warmup_pre_ln_does_not(tmp_path):
    # Xiong et al. 2020: Post-LN 8.45 BLEU without warm-up, ~34 with; Pre-LN ~34 without
    cells = {
        ("post", 0): [8.4, 8.5, 8.45],
        ("post", 4000): [34.0, 34.1, 34.05],
        ("pre", 0): [34.0, 34.2, 34.1],
        ("pre", 4000): [34.1, 34.1, 34.0],
    }
    num = 0
    for (norm, warm), vals in cells.items():
        for seed, b in enumerate(vals, start=1):
            write_job(
                tmp_path,
                num,
                [f"model/norm={norm}", f"optim.warmup_steps={warm}", f"seed={seed}"],
                {"test/bleu": b},
                curve=flat_curve(1.0),
            )
            num += 1
    v = only(tmp_path, "C4")
    assert v.status == SUPPORTED, v.block()


def test_c4_post_ln_runs_recorded_as_diverged_are_counted_not_dropped(tmp_path):
    """Post-LN without warm-up diverged in every seed (status "diverged", no final metrics): the setting
    is still on the claim's axis and its divergence is the evidence (was: "does not cover the axis")."""
    cells = {("post", 4000): [34.0, 34.1, 34.05], ("pre", 0): [34.0, 34.2, 34.1], ("pre", 4000): [34.1, 34.1, 34.0]}
    num = 0
    for (norm, warm), vals in cells.items():
        for seed, b in enumerate(vals, start=1):
            write_job(
                tmp_path,
                num,
                [f"model/norm={norm}", f"optim.warmup_steps={warm}", f"seed={seed}"],
                {"test/bleu": b},
                curve=flat_curve(1.0),
            )
            num += 1
    for seed in (1, 2, 3):
        write_job(
            tmp_path,
            num,
            ["model/norm=post", "optim.warmup_steps=0", f"seed={seed}"],
            {},
            status="diverged",
            summary_extra={"diverged": {"step": 10 * seed, "reason": "non-finite train/loss"}},
        )
        num += 1
    v = only(tmp_path, "C4")
    assert "does not cover" not in v.reason, v.block()
    assert v.status == SUPPORTED, v.block()
    assert any("post@0: 3" in e for e in v.evidence), v.block()


def _pe_sweep(root, table):
    """``table = {pe: (loss@2x per seed, loss@4x per seed)}``; loss@1x is 0.1 everywhere."""
    num = 0
    for pe, (two, four) in table.items():
        for seed, (a, b) in enumerate(zip(two, four, strict=False), start=1):
            metrics = {
                "val/loss": 0.1,
                "test/loss@1x": 0.1,
                "test/loss@2x": a,
                "test/loss@4x": b,
                "test/exact_match@2x": 0.0,
            }
            write_job(root, num, [f"model/pe={pe}", f"seed={seed}"], metrics, curve=flat_curve(0.1))
            num += 1


def test_c5_decides_on_degradation_against_a_control(tmp_path):
    # every scheme at 0.1 in distribution; alibi degrades least, learned most
    _pe_sweep(
        tmp_path / "a",
        {
            "sinusoidal": ([0.2, 0.25, 0.3], [0.4, 0.45, 0.5]),
            "learned": ([3.0, 3.1, 3.05], [5.0, 5.1, 5.05]),
            "alibi": ([0.2, 0.3, 0.25], [0.4, 0.5, 0.45]),
        },
    )
    v = only(tmp_path / "a", "C5")
    assert v.status == SUPPORTED, v.block()
    assert any(e.startswith("positive control: alibi degradation@2x vs learned") for e in v.evidence)
    _pe_sweep(
        tmp_path / "b",
        {
            "sinusoidal": ([3.0, 3.1, 3.05], [5.0, 5.1, 5.05]),
            "learned": ([3.1, 3.2, 3.0], [5.0, 5.2, 5.1]),
            "alibi": ([0.2, 0.3, 0.25], [0.4, 0.5, 0.45]),
        },
    )
    assert only(tmp_path / "b", "C5").status == NOT_SUPPORTED
    _pe_sweep(
        tmp_path / "c",
        {"sinusoidal": ([1.0, 2.0, 1.5], [2.0, 3.0, 2.5]), "alibi": ([1.2, 1.8, 1.6], [2.1, 2.9, 2.4])},
    )
    assert only(tmp_path / "c", "C5").status == INCONCLUSIVE


def test_c6_equivalence_supported_not_supported_inconclusive(tmp_path):
    write_sweep(tmp_path / "a", "model/pe", {"sinusoidal": [1.500, 1.502, 1.504], "learned": [1.501, 1.503, 1.505]})
    v = only(tmp_path / "a", "C6")
    assert v.status == SUPPORTED and any("TOST" in e for e in v.evidence), v.block()
    write_sweep(tmp_path / "b", "model/pe", {"sinusoidal": [1.50, 1.51, 1.52], "learned": [1.70, 1.71, 1.72]})
    assert only(tmp_path / "b", "C6").status == NOT_SUPPORTED
    write_sweep(tmp_path / "c", "model/pe", {"sinusoidal": [1.4, 1.6, 1.5], "learned": [1.45, 1.65, 1.5]})
    assert only(tmp_path / "c", "C6").status == INCONCLUSIVE


def test_c9_c10_c11_c12_dropout(tmp_path):
    num = 0
    for scale, dk, vals in (
        (True, 64, [1.50, 1.51, 1.52]),
        (False, 64, [1.70, 1.71, 1.72]),
        (True, 16, [1.60, 1.61, 1.62]),
        (False, 16, [1.61, 1.62, 1.63]),
    ):
        for seed, v in enumerate(vals, start=1):
            write_job(
                tmp_path / "c9",
                num,
                [f"model.attn_scale={str(scale).lower()}", f"model.d_head={dk}", f"seed={seed}"],
                {"val/loss": v},
                curve=flat_curve(v),
            )
            num += 1
    v = only(tmp_path / "c9", "C9")
    assert v.status == SUPPORTED and v.key.a == "scaling benefit@d_k=64 − @d_k=16", v.block()
    write_sweep(tmp_path / "c10", "model/attention", {"full": [1.5, 1.51, 1.52], "causal": [1.4, 1.41, 1.42]})
    assert only(tmp_path / "c10", "C10").status == NOT_SUPPORTED
    write_sweep(tmp_path / "c11", "model.d_head", {8: [1.7, 1.71, 1.72], 16: [1.6, 1.61, 1.62], 32: [1.5, 1.51, 1.52]})
    assert only(tmp_path / "c11", "C11").status == SUPPORTED
    table = {0: [1.5, 1.51, 1.52], 0.1: [1.55, 1.56, 1.57]}
    curves = {0: [overfit_curve(x) for x in table[0]], 0.1: [flat_curve(x) for x in table[0.1]]}
    write_sweep(tmp_path / "c12", "model.dropout", table, curves=curves)
    v = only(tmp_path / "c12", "C12")
    assert v.status == NOT_SUPPORTED and v.reason.startswith("dropout: "), v.block()


def test_c12_label_smoothing_costs_perplexity_but_helps_bleu(tmp_path):
    num = 0
    for eps, ppl, bleu in ((0, [4.6, 4.7, 4.65], [25.2, 25.3, 25.25]), (0.1, [4.9, 4.95, 4.92], [25.8, 25.9, 25.85])):
        for seed in range(3):
            write_job(
                tmp_path,
                num,
                [f"loss.label_smoothing={eps}", f"seed={seed + 1}"],
                {"val/ppl": ppl[seed], "test/bleu": bleu[seed]},
                curve=flat_curve(1.5),
            )
            num += 1
    v = only(tmp_path, "C12")
    assert v.status == SUPPORTED and v.reason.startswith("label smoothing"), v.block()


def test_c2_ffn_share_of_base_block_is_two_thirds(tmp_path):
    write_sweep(tmp_path, "model.n_heads", {4: [1.0], 8: [1.1]})
    v = only(tmp_path, "C2")
    assert v.status == SUPPORTED and "0.666" in v.measured


def test_c7_c8_from_bench_json():
    from xformer.report.aggregate import Sweep

    empty = Sweep([], [], [], {}, [], [], [])
    bench = {
        "attention_cost": {"xformer": {"time_exponent": 1.93, "memory_exponent": 2.01}},
        "attention_vs_lstm": {"crossover_n": 600, "d": 512},
    }
    got = {v.claim: v.status for v in evaluate(empty, Options(bench=bench))}
    assert got == {"C7": SUPPORTED, "C8": SUPPORTED}
    rows = {
        "attention_cost": {"rows": [{"n": n, "time_ms": 0.001 * n} for n in (256, 512, 1024, 2048)]},
        "attention_vs_lstm": {"crossover_n": 64, "d": 512},
    }
    got = {v.claim: v.status for v in evaluate(empty, Options(bench=rows))}
    assert got == {"C7": NOT_SUPPORTED, "C8": NOT_SUPPORTED}


def test_c7_c8_from_what_xformer_bench_writes():
    """The C7/C8 rules read the file ``xformer bench`` writes (rows under ``sections.attention`` and
    ``sections.recurrence``): before, they looked only for top-level keys it never wrote, and
    ``xformer report --bench bench.json`` gave no C7 or C8 verdict at all."""
    import json

    from xformer.bench import DEFAULT_SECTIONS
    from xformer.report.aggregate import Sweep

    assert {"attention", "recurrence"} <= set(DEFAULT_SECTIONS)
    bench = json.loads((REPO / "docs" / "results" / "bench-cpu.json").read_text())  # a real `xformer bench` output
    empty = Sweep([], [], [], {}, [], [], [])
    got = {v.claim: v for v in evaluate(empty, Options(bench=bench))}
    assert set(got) == {"C7", "C8"}
    attention = bench["sections"]["attention"]
    assert f"explicit.time_exponent (time) exponent {attention['explicit']['time_exponent']:.2f}" in got["C7"].measured
    assert "sdpa:" in got["C7"].measured and "not the claim's algorithm" in got["C7"].measured
    recurrence = bench["sections"]["recurrence"]
    assert f"crossover_n={recurrence['crossover_n']:g}" in got["C8"].measured
    assert got["C8"].status == (
        SUPPORTED if recurrence["crossover_n"] >= recurrence["config"]["d"] / 2 else NOT_SUPPORTED
    )
    # the claim's path alone decides: a fused kernel's O(n) memory does not refute O(n^2) scores
    square = {
        "sections": {
            "attention": {
                "explicit": {"time_exponent": 2.05, "memory_exponent": 1.97},
                "sdpa": {"time_exponent": 1.9, "memory_exponent": 1.0},
                "linear": {"time_exponent": 1.0, "memory_exponent": 1.0},
            }
        }
    }
    assert [v.status for v in evaluate(empty, Options(bench=square))] == [SUPPORTED]
