"""The claim engine on hand-made sweeps: every test type supported / not supported / inconclusive,
against independent references (SciPy's Welch interval, NumPy slopes, hand arithmetic)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as st

from xformer.report.aggregate import aggregate
from xformer.report.rules.declare import DeclarationError, load_file
from xformer.report.rules.engine import combine, evaluate
from xformer.report.rules.results import CANNOT_SHOW, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, PartResult
from xformer.report.rules.stability import job_curve
from xformer.report.rules.tests import Context, steps_to_level

from .conftest import write_job


def job(root: Path, num: int, overrides: list[str], metrics: dict, curves: dict | None = None, **kw) -> Path:
    """A job whose ``csv/metrics.csv`` holds ``curves`` (``{metric: [(step, value), ...]}``)."""
    path = write_job(root, num, overrides, metrics, **kw)
    if curves:
        keys = sorted(curves)
        (path / "csv").mkdir(exist_ok=True)
        rows = ["epoch,step," + ",".join(keys)]
        for k in keys:
            for step, v in curves[k]:
                cells = ["" if kk != k else repr(v) for kk in keys]
                rows.append(f"0,{step - 1}," + ",".join(cells))
        (path / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
    return path


def flat(v: float, key: str = "val/loss") -> dict:
    """A validation curve flat at ``v`` over steps 10..100."""
    return {key: [(s, v) for s in range(10, 101, 10)]}


def sweep_of(root: Path, key: str, table: dict, metric: str = "test/loss", curve_key: str = "val/loss") -> Path:
    """One job per (value, seed), ``metric`` as given and a flat ``curve_key`` curve at the same value."""
    num = 0
    for value, vals in table.items():
        for seed, v in enumerate(vals, start=1):
            job(root, num, [f"{key}={value}", f"seed={seed}"], {metric: v, curve_key: v}, flat(v, curve_key))
            num += 1
    return root


def decide(root: Path, spec: dict, name: str = "H", at: str = "budget") -> PartResult:
    """The one part of ``spec`` decided on the sweep in ``root`` (as a researcher's file stating ``at``)."""
    f = root.parent / f"{root.name}_claims.yaml"
    f.write_text(yaml.safe_dump({name: {"statement": "s", "at": at, "parts": [spec]}}))
    (res,), _ = evaluate(aggregate([root]), load_file(f), strict=True)
    return res.parts[0]


def welch_ci(a, b, conf=0.95):
    ci = st.ttest_ind(a, b, equal_var=False).confidence_interval(conf)
    return ci.low, ci.high


A_GOOD, B = [1.00, 1.01, 0.99], [1.10, 1.12, 1.09]
NOISY = [1.05, 1.15, 0.98]


# -- superiority ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "a_vals, b_vals, verdict",
    [(A_GOOD, B, SUPPORTED), (B, A_GOOD, NOT_SUPPORTED), (NOISY, B, INCONCLUSIVE)],
)
def test_superiority_decides_on_welchs_interval(tmp_path, a_vals, b_vals, verdict):
    root = sweep_of(tmp_path / "s", "model.ffn_ratio", {4: a_vals, 2: b_vals})
    part = {"test": "superiority", "a": {"model.ffn_ratio": 4}, "b": {"model.ffn_ratio": 2}, "metric": "test/loss"}
    r = decide(root, part)
    lo, hi = welch_ci(b_vals, a_vals)  # a loss: a's improvement is b − a
    assert r.verdict == verdict, r.reason
    assert r.lo == pytest.approx(lo) and r.hi == pytest.approx(hi)
    assert r.detectable is not None and r.detectable > 0


def test_superiority_within_noise_is_underpowered_below_the_detectable_effect(tmp_path):
    root = sweep_of(tmp_path / "s", "model.ffn_ratio", {4: NOISY, 2: [1.06, 1.16, 0.99]})
    part = {
        "test": "superiority",
        "a": {"model.ffn_ratio": 4},
        "b": {"model.ffn_ratio": 2},
        "metric": "test/loss",
        "published_effect": 0.001,
    }
    r = decide(root, part)
    assert r.verdict == INCONCLUSIVE and r.reason.startswith("underpowered") and "underpowered" in r.problems


def test_an_interval_that_excludes_the_published_effect_is_not_supported(tmp_path):
    # BLEU: ε 0.1 against ε 0 within ±0.2, the published +0.5 ruled out (an informative null)
    vals0, vals1 = [25.0, 25.1, 24.9, 25.05], [25.05, 25.0, 25.1, 24.95]
    root = sweep_of(tmp_path / "s", "loss.label_smoothing", {0.1: vals1, 0: vals0}, "test/bleu", "val/bleu")
    part = {
        "test": "superiority",
        "a": {"loss.label_smoothing": 0.1},
        "b": {"loss.label_smoothing": 0},
        "metric": "test/bleu",
        "published_effect": 0.5,
    }
    r = decide(root, part)
    assert welch_ci(vals1, vals0)[1] < 0.5
    assert r.verdict == NOT_SUPPORTED and "excludes the published effect" in r.reason


# -- non-inferiority and equivalence ----------------------------------------------------------------
@pytest.mark.parametrize(
    "a_vals, margin, verdict",
    [
        ([1.011, 1.012, 1.010], 0.05, SUPPORTED),  # worse by ~0.01, interval well inside −0.05
        ([1.20, 1.21, 1.19], 0.05, NOT_SUPPORTED),  # worse by 0.2
        ([1.00, 1.10, 0.98], 0.05, INCONCLUSIVE),  # the interval straddles −0.05
    ],
)
def test_non_inferiority_holds_the_interval_against_minus_the_margin(tmp_path, a_vals, margin, verdict):
    b_vals = [1.00, 1.001, 0.999]
    root = sweep_of(tmp_path / "s", "model/norm", {"pre": a_vals, "post": b_vals})
    part = {
        "test": "non_inferiority",
        "a": {"model/norm": "pre"},
        "b": {"model/norm": "post"},
        "metric": "test/loss",
        "margin": margin,
    }
    r = decide(root, part)
    lo, hi = welch_ci(b_vals, a_vals)
    assert r.verdict == verdict, r.reason
    assert (lo > -margin) == (verdict == SUPPORTED) and (hi < -margin) == (verdict == NOT_SUPPORTED)


def test_a_relative_margin_is_a_share_of_the_reference_mean(tmp_path):
    root = sweep_of(tmp_path / "s", "model/norm", {"pre": [2.02, 2.021, 2.019], "post": [2.0, 2.001, 1.999]})
    part = {"test": "non_inferiority", "a": {"model/norm": "pre"}, "b": {"model/norm": "post"}}
    r = decide(root, {**part, "metric": "test/loss", "margin": "2%"})
    assert r.margin == pytest.approx(0.02 * 2.0) and r.verdict == SUPPORTED


@pytest.mark.parametrize(
    "a_vals, verdict",
    [
        ([1.001, 1.0, 1.002], SUPPORTED),
        ([1.3, 1.31, 1.29], NOT_SUPPORTED),
        ([0.95, 1.06, 1.02], INCONCLUSIVE),
    ],
)
def test_equivalence_is_two_one_sided_tests(tmp_path, a_vals, verdict):
    b_vals = [1.0, 1.001, 0.999]
    root = sweep_of(tmp_path / "s", "model/pe", {"sinusoidal": a_vals, "learned": b_vals})
    part = {
        "test": "equivalence",
        "a": {"model/pe": "sinusoidal"},
        "b": {"model/pe": "learned"},
        "metric": "test/loss",
        "margin": 0.05,
    }
    r = decide(root, part)
    lo90, hi90 = welch_ci(b_vals, a_vals, 0.90)
    assert r.verdict == verdict, r.reason
    assert (-0.05 < lo90 and hi90 < 0.05) == (verdict == SUPPORTED)


# -- contrast, with a diverged seed --------------------------------------------------------------
def _grid(root: Path, cells: dict, diverged: set = frozenset()) -> Path:
    num = 0
    for (norm, warm), vals in cells.items():
        for seed, v in enumerate(vals, start=1):
            ov = [f"model/norm={norm}", f"optim.warmup_steps={warm}", f"seed={seed}"]
            if (norm, warm, seed) in diverged:
                job(root, num, ov, {}, status="diverged", summary_extra={"diverged": {"step": 40}})
            else:
                job(root, num, ov, {"test/loss": v, "val/loss": v}, flat(v))
            num += 1
    return root


CONTRAST = {
    "test": "contrast",
    "terms": [
        {"weight": 1, "arm": {"model/norm": "post", "optim.warmup_steps": 300}},
        {"weight": -1, "arm": {"model/norm": "post", "optim.warmup_steps": 0}},
        {"weight": -1, "arm": {"model/norm": "pre", "optim.warmup_steps": 300}},
        {"weight": 1, "arm": {"model/norm": "pre", "optim.warmup_steps": 0}},
    ],
    "metric": "test/loss",
}


def _hand_contrast(samples, weights):
    means = [np.mean(s) for s in samples]
    parts = [w * w * np.var(s, ddof=1) / len(s) for s, w in zip(samples, weights, strict=True)]
    se = math.sqrt(sum(parts))
    df = sum(parts) ** 2 / sum(p * p / (len(s) - 1) for p, s in zip(parts, samples, strict=True))
    t = st.t.ppf(0.975, df)
    d = -sum(w * m for w, m in zip(weights, means, strict=True))  # a loss: positive is better
    return d - t * se, d, d + t * se


@pytest.mark.parametrize(
    "post0, verdict",
    [([2.5, 2.6, 2.55], SUPPORTED), ([1.6, 1.61, 1.59], NOT_SUPPORTED), ([2.2, 1.5, 1.9], INCONCLUSIVE)],
)
def test_contrast_is_a_welch_satterthwaite_interaction(tmp_path, post0, verdict):
    cells = {
        ("post", 300): [1.8, 1.81, 1.79],
        ("post", 0): post0,
        ("pre", 300): [1.8, 1.82, 1.79],
        ("pre", 0): [1.81, 1.8, 1.82],
    }
    r = decide(_grid(tmp_path / "s", cells), CONTRAST)
    lo, d, hi = _hand_contrast([cells["post", 300], post0, cells["pre", 300], cells["pre", 0]], [1, -1, -1, 1])
    assert r.verdict == verdict, r.reason
    assert (r.lo, r.estimate, r.hi) == pytest.approx((lo, d, hi))


def test_a_diverged_seed_inside_a_contrast_ranks_below_every_finished_seed(tmp_path):
    cells = {
        ("post", 300): [1.8, 1.81, 1.79],
        ("post", 0): [2.0, 2.05, 1.95],
        ("pre", 300): [1.8, 1.82, 1.79],
        ("pre", 0): [1.81, 1.8, 1.82],
    }
    r = decide(_grid(tmp_path / "s", cells, diverged={("post", 0, 3)}), CONTRAST)
    post0 = [x for x in r.arms if x.name.startswith("model/norm=post, optim.warmup_steps=0")][0]
    assert post0.n == 3 and post0.diverged == 1 and post0.values == [2.0, 2.05]
    # independent: mid-ranks of −loss over the 12 seeds (the diverged one at −inf), the weighted mean ranks
    order = [cells["post", 300], [2.0, 2.05, math.inf], cells["pre", 300], cells["pre", 0]]
    ranks = st.rankdata([-v for arm in order for v in arm])
    means = [np.mean(ranks[3 * i : 3 * i + 3]) for i in range(4)]
    assert r.scale == "ranks" and r.estimate == pytest.approx(means[0] - means[1] - means[2] + means[3])
    assert "too few seeds" not in r.problems


def test_a_diverged_seed_in_a_two_arm_comparison_is_an_exact_rank_test(tmp_path):
    # 4 seeds a side; one of arm b's diverged: every arrangement of the 8 ranks (C(8, 4) = 70) counted
    cells = {("post", 300): [1.8, 1.81, 1.79, 1.78], ("post", 0): [2.0, 2.05, 1.95, 9.0]}
    root = _grid(tmp_path / "s", cells, diverged={("post", 0, 4)})
    sup = {
        "test": "superiority",
        "metric": "test/loss",
        "a": {"model/norm": "post", "optim.warmup_steps": 300},
        "b": {"model/norm": "post", "optim.warmup_steps": 0},
    }
    r = decide(root, sup)
    # a's four seeds hold the four best ranks: only 1 of the 70 arrangements is as extreme
    assert r.verdict == SUPPORTED and f"exact p {1 / 70:.3g}" in r.reason and r.scale == "ranks"
    three = decide(_grid(tmp_path / "t", {k: v[:3] for k, v in cells.items()}, diverged={("post", 0, 3)}), sup)
    assert three.verdict == INCONCLUSIVE and three.seeds_needed == 4  # 1/C(6, 3) = 0.05 is the least p at 3


def test_a_setting_whose_every_seed_diverged_is_decided_by_the_count(tmp_path):
    # C4's case: Post-LN without warm-up diverged in 3 of 3 seeds, every other setting finished
    cells = {
        ("post", 300): [1.705, 1.701, 1.709],
        ("post", 0): [1.709, 1.709, 1.709],
        ("pre", 300): [1.70, 1.71, 1.705],
        ("pre", 0): [1.70, 1.705, 1.71],
    }
    root = _grid(tmp_path / "s", cells, diverged={("post", 0, 1), ("post", 0, 2), ("post", 0, 3)})
    r = decide(root, CONTRAST)
    # exact: placements of the 3 divergences among the 12 runs at least as favourable to the contrast
    # (all 3 in the two arms weighted −1 on the loss: C(6, 3) of C(12, 3)) — 0.091, not decisive at 0.025
    assert r.verdict == INCONCLUSIVE and r.scale == "divergence share"
    assert f"exact p {math.comb(6, 3) / math.comb(12, 3):.3g}" in r.reason
    assert r.seeds_needed == 5  # C(10, 5) / C(20, 5) = 0.016
    # two arms: all n diverged against 0 of n has p = 1 / C(2n, n): 0.05 at n = 3, 0.014 at n = 4
    sup = {
        "test": "superiority",
        "metric": "test/loss",
        "a": {"model/norm": "post", "optim.warmup_steps": 300},
        "b": {"model/norm": "post", "optim.warmup_steps": 0},
    }
    two = decide(root, sup)
    assert two.verdict == INCONCLUSIVE and f"exact p {1 / math.comb(6, 3):.3g}" in two.reason and two.seeds_needed == 4
    cells4 = {k: v + [v[0]] for k, v in cells.items()}
    root4 = _grid(tmp_path / "four", cells4, diverged={("post", 0, s) for s in (1, 2, 3, 4)})
    four = decide(root4, sup)
    assert four.verdict == SUPPORTED and f"exact p {1 / math.comb(8, 4):.3g}" in four.reason
    # the other way round the count refutes
    assert decide(root4, {**sup, "a": sup["b"], "b": sup["a"]}).verdict == NOT_SUPPORTED


# -- trend -----------------------------------------------------------------------------------------
TREND = {"test": "trend", "axis": "model.ffn_ratio", "metric": "test/loss", "values": "all"}


@pytest.mark.parametrize(
    "table, verdict",
    [
        ({1: [2.0, 2.01, 1.99], 2: [1.9, 1.91, 1.89], 4: [1.8, 1.81, 1.79]}, SUPPORTED),
        ({1: [2.0, 2.01, 1.99], 2: [1.9, 1.91, 1.89], 4: [1.95, 1.96, 1.94]}, NOT_SUPPORTED),
        ({1: [2.0, 2.01, 1.99], 2: [1.9, 1.91, 1.89], 4: [1.88, 1.95, 1.85]}, INCONCLUSIVE),
    ],
)
def test_a_monotone_trend_needs_every_step_better(tmp_path, table, verdict):
    r = decide(sweep_of(tmp_path / "s", "model.ffn_ratio", table), {**TREND, "shape": "monotone"})
    assert r.verdict == verdict, r.reason


@pytest.mark.parametrize(
    "table, verdict",
    [
        ({1: [2.0, 2.001, 1.999], 2: [1.8, 1.801, 1.799], 4: [1.7, 1.701, 1.699]}, SUPPORTED),  # gains 0.2 then 0.1
        ({1: [2.0, 2.001, 1.999], 2: [1.95, 1.951, 1.949], 4: [1.7, 1.701, 1.699]}, NOT_SUPPORTED),  # 0.05 then 0.25
        ({1: [2.0, 2.05, 1.95], 2: [1.8, 1.85, 1.75], 4: [1.62, 1.67, 1.57]}, INCONCLUSIVE),  # 0.2 then 0.18, noisy
    ],
)
def test_diminishing_gains_are_a_contrast_of_neighbouring_gains(tmp_path, table, verdict):
    r = decide(sweep_of(tmp_path / "s", "model.ffn_ratio", table), {**TREND, "shape": "diminishing"})
    (m1, m2, m4) = (np.mean(table[k]) for k in (1, 2, 4))
    assert r.estimate == pytest.approx((m1 - m2) - (m2 - m4))  # per step: gain(1→2) − gain(2→4)
    assert r.verdict == verdict, r.reason


# -- threshold -------------------------------------------------------------------------------------
def test_one_slow_seed_is_counted_not_averaged_against_a_per_seed_threshold(tmp_path):
    # mean 0.893 < 0.9 because one seed stalls at 0.68; two of three reach 0.9
    root = sweep_of(tmp_path / "s", "data.distance", {512: [1.0, 1.0, 0.68]}, "val/exact_match", "val/exact_match")
    part = {"test": "threshold", "a": {"data.distance": 512}, "metric": "val/exact_match", "level": 0.9}
    assert decide(root, {**part, "need": "majority"}).verdict == SUPPORTED
    r = decide(root, {**part, "need": "all"})
    assert r.verdict == NOT_SUPPORTED and "2 of 3" in r.reason


def _steps_sweep(root: Path, table: dict, stop: int = 400, every: int = 10) -> Path:
    """Exact-match curves validated every ``every`` steps that reach 0.9 at the given step (``None``:
    never, stopping at ``stop``)."""
    num = 0
    for (mixer, k), steps in table.items():
        for seed, s in enumerate(steps, start=1):
            last = s if s is not None else stop
            curve = [(x, 0.95 if s is not None and x >= s else 0.3) for x in range(every, last + 1, every)]
            job(
                root,
                num,
                [f"model/mixer={mixer}", f"data.distance={k}", f"seed={seed}"],
                {"val/exact_match": curve[-1][1]},
                {"val/exact_match": curve},
            )
            num += 1
    return root


STEPS = {
    "test": "threshold",
    "mode": "steps",
    "axis": "data.distance",
    "metric": "val/exact_match",
    "level": 0.9,
    "factor": 2,
    "from_value": 8,
    "to_value": 64,
}


@pytest.mark.parametrize(
    "hi_steps, expect, verdict",
    [
        ([800, 1000, 900], "grows", SUPPORTED),
        ([100, 150, 100], "grows", NOT_SUPPORTED),
        ([100, 150, 100], "flat", SUPPORTED),
        ([800, 1000, 900], "flat", NOT_SUPPORTED),
        ([150, 350, 250], "grows", INCONCLUSIVE),
    ],
)
def test_steps_to_level_grow_or_stay_flat_on_log2_steps(tmp_path, hi_steps, expect, verdict):
    root = _steps_sweep(tmp_path / "s", {("lstm", 8): [100, 100, 150], ("lstm", 64): hi_steps})
    r = decide(root, {**STEPS, "at": {"model/mixer": "lstm"}, "expect": expect})
    lo, hi = welch_ci(np.log2(hi_steps), np.log2([100, 100, 150]))
    assert (r.lo, r.hi) == pytest.approx((lo, hi))
    assert r.verdict == verdict, r.reason


def test_censored_runs_are_lower_bounds_that_cannot_show_flatness(tmp_path):
    root = _steps_sweep(tmp_path / "s", {("mha", 8): [100, 100, 150], ("mha", 64): [100, 150, None]})
    r = decide(root, {**STEPS, "at": {"model/mixer": "mha"}, "expect": "flat", "factor": 8})
    assert r.hi < 3 and r.verdict == INCONCLUSIVE and "leave the deciding bound unknown" in r.reason
    (sweep_job,) = [j for j in aggregate([root]).jobs if j.value("data.distance") == 64 and j.seed == 3]
    assert steps_to_level(sweep_job, "val/exact_match", 0.9, True) == (400.0, "censored")


def test_the_growth_of_steps_is_compared_between_mixers_and_censoring_keeps_lower_bounds(tmp_path):
    table = {
        ("lstm", 8): [200, 250, 250],
        ("lstm", 64): [1400, None, 1500],  # one run never reaches 0.9 (stopped at step 1600): ≥ 1600
        ("mha", 8): [50, 50, 50],
        ("mha", 64): [100, 100, 100],
    }
    part = {**STEPS, "at": {"model/mixer": "lstm"}, "versus": {"model/mixer": "mha"}, "expect": "grows"}
    r = decide(_steps_sweep(tmp_path / "s", table, stop=1600), part)
    logs = [np.log2([1400, 1600, 1500]), np.log2([200, 250, 250]), np.log2([100, 100, 100]), np.log2([50, 50, 50])]
    lo, d, hi = _hand_contrast(logs, [-1, 1, 1, -1])  # _hand_contrast negates: a loss-like orientation
    assert (r.lo, r.estimate, r.hi) == pytest.approx((lo, d, hi))
    assert lo > 1 and r.verdict == SUPPORTED, r.reason  # the censored run understates a term counted +
    # censored where it is subtracted (attention at k = 64), the lower bound is no longer a bound
    table[("mha", 64)] = [100, None, 100]
    r = decide(_steps_sweep(tmp_path / "t", table, stop=1600), part)
    assert r.verdict == INCONCLUSIVE and "censored" in r.problems


def test_a_level_reached_at_the_first_validation_is_an_upper_bound(tmp_path):
    # C13's case: attention reaches 0.9 at its first validation (step 50), so its steps are only ≤ 50;
    # counted + in the contrast (attention at k = 8), they may overstate the lower bound
    table = {
        ("lstm", 8): [200, 250, 250],
        ("lstm", 64): [1400, 1500, 1500],
        ("mha", 8): [50, 50, 50],
        ("mha", 64): [100, 100, 100],
    }
    part = {**STEPS, "at": {"model/mixer": "lstm"}, "versus": {"model/mixer": "mha"}, "expect": "grows"}
    coarse = decide(_steps_sweep(tmp_path / "c", table, every=50), part)
    assert coarse.lo > 1 and coarse.verdict == INCONCLUSIVE and "3 reaching it at the first validation" in coarse.reason
    assert "attention" not in coarse.reason and "≤50" in "".join(coarse.evidence)
    # validated densely (every 10 steps), the same steps are measured and decide
    assert decide(_steps_sweep(tmp_path / "d", table, every=10), part).verdict == SUPPORTED


def test_a_run_stopped_before_its_budget_is_censored_not_a_miss(tmp_path):
    # C13 (v)'s case: LSTM runs stopped by the plateau stop at ~2 050 of 4 000 steps, never reaching 0.9
    root = tmp_path / "s"
    for seed, (step, em) in enumerate([(2050, 0.3), (2100, 0.31), (4000, 0.3)], start=1):
        path = job(
            root, seed - 1, ["data.distance=256", f"seed={seed}"], {"val/exact_match": em}, flat(em, "val/exact_match")
        )
        summary = json.loads((path / "metrics.json").read_text())
        summary["global_step"], summary["config"]["trainer"]["max_steps"] = step, 4000
        (path / "metrics.json").write_text(json.dumps(summary))
    part = {
        "test": "threshold",
        "a": {"data.distance": 256},
        "metric": "val/exact_match",
        "level": 0.9,
        "expect": "miss",
    }
    r = decide(root, part)
    assert r.verdict == INCONCLUSIVE and "censored" in r.problems, r.reason
    assert "1 ran the budget without, 2 stopped early without (censored)" in r.evidence[0]


def test_a_part_can_expect_most_seeds_to_miss_a_level(tmp_path):
    root = sweep_of(tmp_path / "s", "data.distance", {256: [0.2, 0.3, 0.95]}, "val/exact_match", "val/exact_match")
    part = {"test": "threshold", "a": {"data.distance": 256}, "metric": "val/exact_match", "level": 0.9}
    assert decide(root, {**part, "expect": "miss"}).verdict == SUPPORTED
    assert decide(root, {**part, "expect": "miss", "need": "all"}).verdict == NOT_SUPPORTED


# -- quantity ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, verdict", [(2.1, SUPPORTED), (2.4, INCONCLUSIVE), (2.7, NOT_SUPPORTED)])
def test_quantity_within_tolerance_or_beyond_refutation(value, verdict):
    from xformer.report.rules.part import Part
    from xformer.report.rules.tests import quantity

    part = Part(
        "C",
        0,
        {
            "test": "quantity",
            "measure": "bench",
            "args": {"paths": ["x.e"]},
            "target": 2,
            "tolerance": 0.3,
            "refute_beyond": 0.5,
        },
    )
    r = quantity(part, Context(sweep=None, bench={"x": {"e": value}}))
    assert r.verdict == verdict and r.estimate == value


# -- saturation, preconditions, combination -------------------------------------------------------
def test_saturation_never_turns_a_refutation_into_inconclusive(tmp_path):
    root = sweep_of(
        tmp_path / "s",
        "model/mixer",
        {"mha": [0.991, 0.992, 0.991], "lstm": [0.999, 0.9995, 0.999]},
        "test/exact_match",
        "val/exact_match",
    )
    base = {"test": "superiority", "metric": "test/exact_match"}
    worse = decide(root, {**base, "a": {"model/mixer": "mha"}, "b": {"model/mixer": "lstm"}})
    better = decide(root, {**base, "a": {"model/mixer": "lstm"}, "b": {"model/mixer": "mha"}})
    assert worse.verdict == NOT_SUPPORTED
    assert better.verdict == INCONCLUSIVE and "saturated" in better.problems


def _p(verdict, role="claim", label="(i)"):
    return PartResult(label, "superiority", role, "", verdict, "r")


def test_a_verdict_is_its_parts():
    assert combine([_p(SUPPORTED), _p(SUPPORTED, label="(ii)")])[0] == SUPPORTED
    assert combine([_p(SUPPORTED), _p(NOT_SUPPORTED, label="(ii)")])[0] == NOT_SUPPORTED
    verdict, reason = combine([_p(SUPPORTED), _p(INCONCLUSIVE, label="(ii)")])
    assert verdict == INCONCLUSIVE and reason == "partly supported: (i) supported; (ii) inconclusive"
    assert combine([_p(NOT_SUPPORTED, "precondition"), _p(SUPPORTED, label="(ii)")])[0] == CANNOT_SHOW
    assert combine([_p(INCONCLUSIVE, "precondition"), _p(SUPPORTED, label="(ii)")])[0] == INCONCLUSIVE
    assert combine([_p(SUPPORTED), _p(NOT_SUPPORTED, "descriptive", "(ii)")])[0] == SUPPORTED


def test_an_unestablished_precondition_gates_a_refutation():
    # C12's case: the no-dropout arm's over-fitting is not established, (ii) is refuted
    verdict, reason = combine([_p(INCONCLUSIVE, "precondition"), _p(NOT_SUPPORTED, label="(ii)")])
    assert verdict == CANNOT_SHOW and reason.startswith("cannot show it: precondition (i) not established")
    # a precondition of another sweep does not gate it
    pre, part = _p(INCONCLUSIVE, "precondition"), _p(NOT_SUPPORTED, label="(ii)")
    pre.sweep, part.sweep = "a", "b"
    assert combine([pre, part])[0] == NOT_SUPPORTED
    # an established precondition lets it stand
    assert combine([_p(SUPPORTED, "precondition"), _p(NOT_SUPPORTED, label="(ii)")])[0] == NOT_SUPPORTED


# -- the second-half check ------------------------------------------------------------------------------
def test_the_stability_curve_of_a_test_metric_is_the_running_best(tmp_path):
    vals = [(s, v) for s, v in zip(range(10, 101, 10), [3, 2.5, 2.2, 2.4, 2.1, 2.3, 2.6, 2.0, 2.2, 2.5], strict=True)]
    path = job(tmp_path, 0, ["seed=1"], {"test/loss": 2.0, "val/loss": 2.5}, {"val/loss": vals})
    summary = json.loads((path / "metrics.json").read_text())
    summary["config"]["callbacks"] = {"model_checkpoint": {"monitor": "val/loss", "mode": "min"}}
    (path / "metrics.json").write_text(json.dumps(summary))
    (j,) = aggregate([tmp_path]).jobs
    best = list(itertools.accumulate([v for _, v in vals], min))
    assert list(job_curve(j, "val/loss", running_best=True).values()) == best
    assert list(job_curve(j, "val/loss", running_best=False).values()) == [v for _, v in vals]


def _closing_sweep(root: Path, slopes_a: list[float]) -> Path:
    """ratio 4 better than ratio 2 at the end (test/loss), the gap over steps 50..100 shrinking at a
    per-seed rate ``slopes_a`` (per doubling); ratio 2's curves flat at 2.0."""
    num = 0
    for seed, slope in enumerate(slopes_a, start=1):
        curve = [(s, 1.9 + slope * math.log2(s / 100)) for s in range(10, 101, 10)]
        job(
            root,
            num,
            ["model.ffn_ratio=4", f"seed={seed}"],
            {"test/loss": 1.9 + 0.001 * seed, "val/loss": 1.9},
            {"val/loss": curve},
        )
        num += 1
    for seed in (1, 2, 3):
        job(
            root,
            num,
            ["model.ffn_ratio=2", f"seed={seed}"],
            {"test/loss": 2.0 + 0.001 * seed, "val/loss": 2.0},
            flat(2.0),
        )
        num += 1
    return root


def test_a_decisive_final_interval_with_an_undetermined_trend_is_supported(tmp_path):
    # the gap is 0.1 at the end; the limit is a quarter of it per doubling (−0.025). Per-seed slopes of
    # ratio 4's loss: 0.01, 0.04, 0.07 per doubling (the gap shrinks by −0.04 on average, its 95 %
    # interval straddles −0.025): the trend is undetermined, the final interval decides.
    slopes = [0.01, 0.04, 0.07]
    root = _closing_sweep(tmp_path / "s", slopes)
    part = {"test": "superiority", "a": {"model.ffn_ratio": 4}, "b": {"model.ffn_ratio": 2}, "metric": "val/loss"}
    steps = [50, 60, 70, 80, 90, 100]
    fitted = [np.polyfit(np.log2(steps), [1.9 + s * math.log2(x / 100) for x in steps], 1)[0] for s in slopes]
    lo, hi = st.ttest_1samp(-np.array(fitted), 0).confidence_interval(0.95)  # ratio 2 is flat: slopes 0
    for at in ("stable ranking", "budget"):
        r = decide(root, part, at=at)
        stab = r.stability
        assert stab.outcome == "trend undetermined" and r.verdict == SUPPORTED and r.caveats == ["trend undetermined"]
        assert (stab.slope_lo, stab.slope_hi) == pytest.approx((lo, hi))
        assert stab.limit == pytest.approx(-0.25 * 0.1) and lo < stab.limit < hi
    assert decide(_closing_sweep(tmp_path / "f", [0.0, 0.001, -0.001]), part).caveats == []


def test_a_gap_shown_closing_blocks_a_stable_ranking_and_is_a_caveat_at_a_budget(tmp_path):
    root = _closing_sweep(tmp_path / "c", [0.06, 0.065, 0.07])
    part = {"test": "superiority", "a": {"model.ffn_ratio": 4}, "b": {"model.ffn_ratio": 2}, "metric": "val/loss"}
    ranked = decide(root, part, at="stable ranking")
    assert ranked.stability.outcome == "closing" and ranked.stability.slope_hi < ranked.stability.limit
    assert (
        ranked.verdict == INCONCLUSIVE
        and "closing" in ranked.problems
        and "final interval alone reads supported" in " ".join(ranked.evidence)
    )
    budget = decide(root, part, at="budget")
    assert budget.verdict == SUPPORTED and budget.caveats[0].startswith("closing")


# -- choosing the claims a sweep asks about -------------------------------------------------------
def test_only_the_claims_a_sweep_asks_about_are_decided(tmp_path):
    root = tmp_path / "s"
    for num, (r, seed) in enumerate(itertools.product((1, 2, 4, 8), (1, 2, 3))):
        job(
            root,
            num,
            [f"model.ffn_ratio={r}", f"seed={seed}", "experiment=claims/c1_ffn_ratio"],
            {"test/loss": 2 - 0.1 * r**0.5, "val/loss": 2.0},
            flat(2.0),
        )
    results, note = evaluate(aggregate([root]))
    assert [r.claim for r in results] == ["C1", "C2"] and note == ""
    # a sweep of ratios 2 and 4 lacks the levels C1's trend declares (1, 2, 4, 8): nothing is guessed
    results, note = evaluate(aggregate([sweep_of(tmp_path / "n", "model.ffn_ratio", {2: A_GOOD, 4: B})]))
    assert results == []
    table = {1: [2.1, 2.11, 2.09], 2: [2.0, 2.01, 1.99], 4: A_GOOD, 8: [0.9, 0.91, 0.89]}
    results, note = evaluate(aggregate([sweep_of(tmp_path / "g", "model.ffn_ratio", table)]))
    assert [r.claim for r in results] == ["C1"] and "guessed" in note


def test_jobs_of_one_setting_without_an_experiment_decide_no_claim(tmp_path):
    """Three seeds of the default run (no swept key, no ``experiment=claims/...``): nothing is compared, so no
    claim is guessed, though the default task logs a metric some claims' thresholds read (C13's exact match)."""
    root = tmp_path / "one"
    for seed in (1, 2, 3):
        job(
            root, seed - 1, [f"seed={seed}"], {"test/loss": 2.0, "val/exact_match": 0.95}, flat(0.95, "val/exact_match")
        )
    sweep = aggregate([root])
    assert sweep.swept_keys == [] and "val/exact_match" in sweep.metric_keys
    results, note = evaluate(sweep)
    assert results == [] and "vary no setting" in note


def test_a_throwaway_claim_is_one_yaml_and_decides_with_no_other_file(tmp_path):
    from xformer.report.catalog import claims_markdown
    from xformer.report.claims_table import render
    from xformer.report.rules.declare import load_dir
    from xformer.report.rules.engine import CLAIMS_DIR

    claims = tmp_path / "claims"
    claims.mkdir()
    for f in CLAIMS_DIR.glob("*.yaml"):
        (claims / f.name).write_text(f.read_text())
    (claims / "C14.yaml").write_text(
        "C14:\n  statement: GELU beats ReLU\n  sweeps: [c14_gelu]\n  parts:\n"
        "    - {test: superiority, a: {model/ffn: gelu}, b: {model/ffn: relu}, metric: test/loss}\n"
    )
    root = tmp_path / "s"
    for num, (ffn, seed, v) in enumerate(
        [("gelu", 1, 1.0), ("gelu", 2, 1.01), ("gelu", 3, 0.99), ("relu", 1, 1.1), ("relu", 2, 1.12), ("relu", 3, 1.09)]
    ):
        job(
            root,
            num,
            [f"model/ffn={ffn}", f"seed={seed}", "experiment=claims/c14_gelu"],
            {"test/loss": v, "val/loss": v},
            flat(v),
        )
    declared = load_dir(claims)
    (res,), _ = evaluate(aggregate([root]), declared)
    assert res.claim == "C14" and res.verdict == SUPPORTED
    assert "## C14: GELU beats ReLU" in claims_markdown(declared)
    assert "| C14 | not run |  | `c14_gelu` |  | not run |" in render(tmp_path / "results", declared)


def test_verdicts_json_lists_each_claims_parts(tmp_path):
    from xformer.report.cli import main

    root = sweep_of(tmp_path / "s", "model.ffn_ratio", {4: A_GOOD, 2: B})
    f = tmp_path / "h.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "H": {
                    "statement": "4 beats 2",
                    "parts": [
                        {
                            "test": "superiority",
                            "a": {"model.ffn_ratio": 4},
                            "b": {"model.ffn_ratio": 2},
                            "metric": "test/loss",
                        }
                    ],
                }
            }
        )
    )
    assert main([str(root), "--claims", str(f), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "verdicts.json").read_text())
    (claim,) = data["claims"]
    (part,) = claim["parts"]
    assert claim["claim"] == "H" and claim["verdict"] == "supported"
    assert part["test"] == "superiority" and part["verdict"] == "supported" and len(part["interval"]) == 2


def test_a_declaration_error_names_file_claim_part_and_key(tmp_path):
    f = tmp_path / "h.yaml"
    f.write_text("H:\n  statement: s\n  parts:\n    - {test: superiority, a: {x: 1}, b: 3, metric: m}\n")
    with pytest.raises(DeclarationError, match=r"h.yaml: claim H, part \(i\), key 'b': expected an override selector"):
        load_file(f)


@pytest.mark.parametrize("seeds", [2, 3])
def test_an_undecided_part_asks_for_more_seeds_than_it_has_and_never_fewer_than_a_verdict_needs(tmp_path, seeds):
    """Equivalence whose 90 % interval straddles the margin: with 2 seeds a side (too few for any verdict)
    the seeds a side it asks for are at least 3; with 3 it never asks for the 3 (or fewer) it already has."""
    rng = np.random.default_rng(seeds)
    a = list(0.500 + 0.001 * rng.standard_normal(seeds))  # a spread small beside the margin: 2-3 seeds have the
    b = list(0.5205 + 0.001 * rng.standard_normal(seeds))  # power at the margin, yet the interval straddles it
    root = sweep_of(tmp_path / "s", "model/pe", {"learned": a, "sinusoidal": b})
    spec = {"test": "equivalence", "a": {"model/pe": "learned"}, "b": {"model/pe": "sinusoidal"}, "margin": 0.02}
    spec["metric"] = "test/loss"
    res = decide(root, spec)
    assert res.verdict == INCONCLUSIVE, res.reason
    assert res.seeds_needed is None or res.seeds_needed > max(seeds, 2), (res.seeds_needed, res.evidence)
    said = [e for e in res.evidence if "seeds a side would decide it" in e]
    assert all(int(e.split()[0].lstrip("~")) > max(seeds, 2) for e in said if e.startswith("~")), said
