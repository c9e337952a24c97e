"""The verdict rules of issue 18 on hand-made sweeps: verdicts at a budget judged on the second half of
training (late crossing, closing gap, independence from the validation interval), diverged runs as
outcomes (C4 counts, worst outcome elsewhere), crashed jobs named in the verdict, C6 equivalence with
its two intervals, and Holm–Bonferroni for best-of-k rules."""

from __future__ import annotations

import math
import random

import pytest

from xformer.report.aggregate import Group, Stat, aggregate
from xformer.report.claims import (
    BETTER,
    INCONCLUSIVE,
    NOISE,
    NOT_SUPPORTED,
    SUPPORTED,
    Options,
    best_of,
    compare,
    evaluate,
    spaced,
)
from xformer.report.stats import fisher_more, holm, log2_trend

from .conftest import flat_curve, overfit_curve, write_job


def only(root, cid, **opts):
    (v,) = [v for v in evaluate(aggregate([root]), Options(**opts)) if v.claim == cid]
    return v


def d_head_sweep(root, finals: dict, curves: dict, max_steps: int | None = None):
    """C11 sweep: ``finals[d_head]`` = test/loss per seed, ``curves[d_head][seed] = [(step, val/loss)]``."""
    num = 0
    for d, vals in finals.items():
        for seed, v in enumerate(vals, start=1):
            extra = [f"trainer.max_steps={max_steps}"] if max_steps else []
            rows = [(s, y + 0.1, y) for s, y in curves[d][seed - 1]]
            write_job(
                root, num, [f"model.d_head={d}", f"seed={seed}", *extra], {"test/loss": v, "val/loss": v}, curve=rows
            )
            num += 1
    return root


OFFSETS = (-0.002, 0.0, 0.002)


# -- item 1: the second half of training ------------------------------------------------------------
def test_late_crossing_makes_the_verdict_inconclusive(tmp_path):
    # d_head 32 ends better (1.60 against 1.70), but at steps 50-60 its validation loss was clearly worse
    steps = range(10, 101, 10)
    big = [[(s, (1.90 if s <= 60 else 1.60) + o) for s in steps] for o in OFFSETS]
    small = [[(s, 1.75 if s <= 60 else 1.70 + o) for s in steps] for o in OFFSETS]
    small = [[(s, y + o) for s, y in c] for c, o in zip(small, OFFSETS, strict=False)]
    d_head_sweep(tmp_path, {8: [1.70 + o for o in OFFSETS], 32: [1.60 + o for o in OFFSETS]}, {8: small, 32: big})
    v = only(tmp_path, "C11")
    assert v.status == INCONCLUSIVE, v.block()
    assert "late crossing" in v.reason and "(the rule alone would say: supported)" in v.reason
    assert any("late crossing: at step 50" in e and "other side of 0" in e for e in v.evidence), v.block()


def test_closing_gap_makes_the_verdict_inconclusive_and_prints_slope_and_zero_step(tmp_path):
    # Δ shrinks from 0.4 at step 50 to 0.1 at step 100: -0.3 per doubling, three times its final size
    steps = range(10, 101, 10)
    gap = {s: 0.4 - 0.3 * math.log2(s / 50) if s >= 50 else 0.4 for s in steps}
    big = [[(s, 1.6 - gap[s] + 0.1 + o) for s in steps] for o in OFFSETS]  # at step 100: 1.60
    small = [[(s, 1.7 + o) for s in steps] for o in OFFSETS]
    d_head_sweep(tmp_path, {8: [1.70 + o for o in OFFSETS], 32: [1.60 + o for o in OFFSETS]}, {8: small, 32: big})
    v = only(tmp_path, "C11")
    assert v.status == INCONCLUSIVE and "the gap is closing" in v.reason, v.block()
    (line,) = [e for e in v.evidence if "the gap is closing" in e]
    assert "by -0.3 per doubling" in line and "final size +0.1" in line
    zero = float(line.rsplit("~", 1)[1])
    assert zero == pytest.approx(100 * 2 ** (0.1 / 0.3), rel=0.02)  # the trend line reaches 0 there


def test_a_steady_gap_is_supported_with_the_budget_named(tmp_path):
    steps = range(250, 3001, 250)
    big = [[(s, 1.60 + 3 / math.sqrt(s) + o) for s in steps] for o in OFFSETS]
    small = [[(s, 1.70 + 3 / math.sqrt(s) + o) for s in steps] for o in OFFSETS]
    d_head_sweep(
        tmp_path, {8: [1.70 + o for o in OFFSETS], 32: [1.60 + o for o in OFFSETS]}, {8: small, 32: big}, max_steps=3000
    )
    v = only(tmp_path, "C11")
    assert v.status == SUPPORTED, v.block()
    assert v.budget.startswith("3 000 steps, 1 k tokens, warm-up 400")
    assert v.line().startswith("C11: supported at 3 000 steps")
    assert [p.step for p in v.stability.points] == [1500, 1750, 2000, 2500, 2750, 3000]


@pytest.mark.parametrize("loss_gap", [0.05, 0.0])
def test_same_curves_validated_every_50_and_250_steps_get_the_same_verdict(tmp_path, loss_gap):
    """val(s) = L + 3/√s per seed. Over one 250-step interval the loss still falls by 0.0024 (more than
    the 0.0016 noise floor of the old rule: "under-trained"); over one 50-step interval by 0.0005 (the
    old rule: supported). The verdict may not depend on how often the run was validated."""
    got = []
    for every in (50, 250):
        root = tmp_path / str(every)
        steps = range(every, 3001, every)
        curve = {
            d: [[(s, base + 3 / math.sqrt(s) + o) for s in steps] for o in OFFSETS]
            for d, base in ((8, 1.70), (32, 1.70 - loss_gap))
        }
        d_head_sweep(
            root, {8: [1.70 + o for o in OFFSETS], 32: [1.70 - loss_gap + o for o in OFFSETS]}, curve, max_steps=3000
        )
        got.append(only(root, "C11"))
    a, b = got
    assert (a.status, a.reason) == (b.status, b.reason), a.block() + "\n" + b.block()
    assert a.status == (SUPPORTED if loss_gap else INCONCLUSIVE)
    assert len(a.stability.points) == len(b.stability.points) == 6


def test_fewer_than_4_second_half_validations_is_inconclusive_with_the_fix(tmp_path):
    steps = (500, 1000, 2000, 3000)  # second half (>= 1500): 2000, 3000
    big = [[(s, 1.60 + o) for s in steps] for o in OFFSETS]
    small = [[(s, 1.70 + o) for s in steps] for o in OFFSETS]
    d_head_sweep(tmp_path, {8: [1.70 + o for o in OFFSETS], 32: [1.60 + o for o in OFFSETS]}, {8: small, 32: big})
    v = only(tmp_path, "C11")
    assert v.status == INCONCLUSIVE and "fewer than 4 validations in the second half" in v.reason
    assert any("Fix: set trainer.val_check_interval to at most 375" in e for e in v.evidence), v.block()


def test_spaced_points_and_trend_helpers():
    assert spaced([1500 + 250 * i for i in range(7)]) == [1500, 1750, 2000, 2500, 2750, 3000]
    assert spaced(list(range(1500, 3001, 50))) == [1500, 1800, 2100, 2400, 2700, 3000]
    assert spaced([1, 2, 3]) == [1, 2, 3]
    a, b = log2_trend([1, 2, 4, 8], [5.0, 4.0, 3.0, 2.0])
    assert (a, b) == (pytest.approx(5.0), pytest.approx(-1.0))


# -- item 2: diverged runs and crashed jobs ------------------------------------------------------------
def c4_sweep(root, post_diverged: int):
    """C4 on test/bleu (Xiong et al. 2020 shape); ``post_diverged`` of post@0's 3 seeds diverged."""
    cells = {
        ("post", 0): [8.4, 8.5, 8.45],
        ("post", 4000): [34.0, 34.1, 34.05],
        ("pre", 0): [34.0, 34.2, 34.1],
        ("pre", 4000): [34.1, 34.15, 34.0],
    }
    num = 0
    for (norm, warm), vals in cells.items():
        for seed, b in enumerate(vals, start=1):
            over = [f"model/norm={norm}", f"optim.warmup_steps={warm}", f"seed={seed}"]
            if (norm, warm) == ("post", 0) and seed <= post_diverged:
                write_job(
                    root,
                    num,
                    over,
                    {},
                    status="diverged",
                    summary_extra={"diverged": {"step": 7 * seed, "reason": "non-finite train/loss"}},
                )
            else:
                write_job(root, num, over, {"test/bleu": b}, curve=flat_curve(1.0))
            num += 1
    return root


@pytest.mark.parametrize("n_div", [2, 3])
def test_c4_counts_divergence_of_post_ln_without_warmup(tmp_path, n_div):
    v = only(c4_sweep(tmp_path, n_div), "C4")
    assert v.status == SUPPORTED, v.block()
    assert any(f"post@0: {n_div} of 3" in e for e in v.evidence), v.block()
    assert any("post@4000 vs post@0" in e and f"post@0 diverged in {n_div} of 3 seeds" in e for e in v.evidence)
    assert any("diverged (each counted as its setting's worst outcome): post@0" in e for e in v.evidence)
    assert any("Fisher exact p" in e for e in v.evidence)


def test_c4_one_diverged_seed_of_three_decides_nothing(tmp_path):
    v = only(c4_sweep(tmp_path, 1), "C4")
    assert v.status == INCONCLUSIVE, v.block()


def test_fisher_more_matches_the_hypergeometric_tail():
    # 3/3 against 0/3: one table of the C(6,3) = 20 with the same margins is as extreme
    assert fisher_more(3, 3, 0, 3) == pytest.approx(1 / 20)
    assert fisher_more(2, 3, 0, 3) == pytest.approx(4 / 20)  # (3·1 + 1) / 20
    assert fisher_more(0, 3, 0, 3) == pytest.approx(1.0)


def test_a_diverged_seed_is_the_worst_outcome_in_other_claims(tmp_path):
    """d_head 32's finished seeds are better, but one of its four seeds diverged: never called better."""
    steps = range(10, 101, 10)
    d_head_sweep(
        tmp_path,
        {8: [1.70 + o for o in OFFSETS], 32: [1.60 + o for o in OFFSETS]},
        {8: [[(s, 1.70 + o) for s in steps] for o in OFFSETS], 32: [[(s, 1.60 + o) for s in steps] for o in OFFSETS]},
    )
    write_job(
        tmp_path,
        99,
        ["model.d_head=32", "seed=4"],
        {},
        status="diverged",
        summary_extra={"diverged": {"step": 40, "reason": "non-finite train/loss"}},
    )
    v = only(tmp_path, "C11")
    assert v.status == INCONCLUSIVE, v.block()
    assert any("not better: d_head=32 diverged in 1 of 4 seeds, its worst outcome" in e for e in v.evidence)
    assert any(
        "diverged (each counted as its setting's worst outcome): d_head=32: 1 of 4 seeds" in e and "at step 40" in e
        for e in v.evidence
    ), v.block()


def test_compare_divergence_share_rule():
    fin = Stat.of([1.0, 1.01, 1.02])
    assert compare(Stat.of([math.nan] * 3), fin, higher=False).outcome == "worse"
    assert compare(fin, Stat.of([1.5, math.nan, math.nan]), higher=False).outcome == BETTER
    mixed = compare(Stat.of([0.5, 0.51, 0.52, math.nan]), fin, higher=False)  # better seeds, 1 of 4 diverged
    assert mixed.outcome == NOISE and "worst outcome" in mixed.note
    assert compare(Stat.of([math.nan, math.nan]), fin, higher=False).outcome == "too few seeds"


def test_a_crashed_job_is_named_inside_the_verdict_block(tmp_path):
    steps = range(10, 101, 10)
    d_head_sweep(
        tmp_path,
        {8: [1.70 + o for o in OFFSETS], 32: [1.60 + o for o in OFFSETS]},
        {8: [[(s, 1.70 + o) for s in steps] for o in OFFSETS], 32: [[(s, 1.60 + o) for s in steps] for o in OFFSETS]},
    )
    write_job(
        tmp_path,
        42,
        ["model.d_head=32", "seed=4"],
        {},
        status="failed",
        summary_extra={"error": "RuntimeError: CUDA error: an illegal memory access"},
    )
    v = only(tmp_path, "C11")
    assert v.status == SUPPORTED, v.block()  # three seeds a side still count
    block = v.block()
    assert "crashed or unfinished, not counted: d_head=32: seed 4 (42), status failed: RuntimeError: CUDA" in block
    assert "elsewhere in the sweep" not in block  # named once, with its setting


def test_a_setting_whose_every_seed_crashed_is_named_in_the_verdict(tmp_path):
    steps = range(10, 101, 10)
    d_head_sweep(
        tmp_path,
        {8: [1.70 + o for o in OFFSETS], 32: [1.60 + o for o in OFFSETS]},
        {8: [[(s, 1.70 + o) for s in steps] for o in OFFSETS], 32: [[(s, 1.60 + o) for s in steps] for o in OFFSETS]},
    )
    for seed in (1, 2, 3):
        write_job(tmp_path, 50 + seed, ["model.d_head=64", f"seed={seed}"], status=None)  # died before metrics.json
    v = only(tmp_path, "C11")
    assert (
        "crashed or unfinished elsewhere in the sweep, not counted: model.d_head=64 seed=1 (51), status missing"
        in v.block()
    ), v.block()


# -- item 3: C6 equivalence ---------------------------------------------------------------------------
def pe_sweep(root, sin: list[float], learned: list[float]):
    num = 0
    for pe, vals in (("sinusoidal", sin), ("learned", learned)):
        for seed, v in enumerate(vals, start=1):
            write_job(
                root, num, [f"model/pe={pe}", f"seed={seed}"], {"test/loss": v, "val/loss": v}, curve=flat_curve(v)
            )
            num += 1
    return root


def test_c6_interval_straddling_the_margin_is_inconclusive(tmp_path):
    # Δ 0.020 [95 % 0.011, 0.029] against a margin of 0.0172: the case (was "not supported")
    v = only(pe_sweep(tmp_path, [1.696, 1.700, 1.704], [1.716, 1.720, 1.724]), "C6")
    assert v.status == INCONCLUSIVE, v.block()
    assert v.key.interval.lo == pytest.approx(0.0109, abs=2e-4) and v.key.interval.hi == pytest.approx(0.0291, abs=2e-4)
    assert any("straddle the margin" in e for e in v.evidence)


def test_c6_entirely_outside_is_not_supported_and_inside_is_supported(tmp_path):
    far = only(pe_sweep(tmp_path / "far", [1.696, 1.700, 1.704], [1.746, 1.750, 1.754]), "C6")
    assert far.status == NOT_SUPPORTED and "entirely outside the margin" in far.reason, far.block()
    near = only(pe_sweep(tmp_path / "near", [1.696, 1.700, 1.704], [1.697, 1.701, 1.705]), "C6")
    assert near.status == SUPPORTED, near.block()


def test_c6_trend_leaving_the_margin_blocks_equivalence(tmp_path):
    # final values equivalent, but over the second half the validation gap runs from 0 to 0.05
    root = tmp_path
    steps = range(10, 101, 10)
    num = 0
    for pe, vals in (("sinusoidal", [1.696, 1.700, 1.704]), ("learned", [1.697, 1.701, 1.705])):
        for seed, v in enumerate(vals, start=1):
            drift = (lambda s: 0.05 * max(0.0, math.log2(s / 50))) if pe == "learned" else (lambda _s: 0.0)
            write_job(
                root,
                num,
                [f"model/pe={pe}", f"seed={seed}"],
                {"test/loss": v, "val/loss": v},
                curve=[(s, v + 0.1, v + drift(s)) for s in steps],
            )
            num += 1
    v = only(root, "C6")
    assert v.status == INCONCLUSIVE and "the gap trend leaves the margin" in v.reason, v.block()


# -- item 4: best of k -----------------------------------------------------------------------------------
def test_holm_matches_the_step_down_procedure():
    # sorted p 0.01, 0.02, 0.04 (k = 3): 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.3, 0.02]) == pytest.approx([0.3, 0.04])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_best_of_k_keeps_the_false_positive_rate_at_the_nominal_level():
    """Null sweeps (k = 4 settings and a baseline drawn from one distribution, 3 seeds each): picking the
    best and testing it uncorrected calls it better about twice as often as α/2 = 2.5 % (here 5.1 %, the
    issue's figure); Holm–Bonferroni keeps it below."""
    rng = random.Random(1)
    trials, raw, corrected = 3000, 0, 0
    for _ in range(trials):
        groups = [
            Group(values={"k": i}, stats={"test/loss": Stat.of([rng.gauss(0, 1) for _ in range(3)])}) for i in range(5)
        ]
        best, family = best_of([(str(i), g) for i, g in enumerate(groups[1:])], ("base", groups[0]), "test/loss")
        corrected += best.outcome == BETTER
        raw += best.interval is not None and best.interval.lo > 0
    assert raw / trials > 0.04
    assert corrected / trials <= 0.025


def test_c12_dropout_states_the_correction(tmp_path):
    num = 0
    for p, vals in ((0, [1.70, 1.71, 1.72]), (0.1, [1.60, 1.61, 1.62]), (0.2, [1.65, 1.66, 1.67])):
        for seed, v in enumerate(vals, start=1):
            write_job(
                tmp_path,
                num,
                [f"model.dropout={p}", f"seed={seed}"],
                {"test/loss": v, "val/loss": v},
                curve=overfit_curve(v) if p == 0 else flat_curve(v),
            )
            num += 1
    v = only(tmp_path, "C12")
    assert v.status == SUPPORTED, v.block()
    assert "Holm–Bonferroni over 2 comparisons: adjusted p=" in v.block()
    assert any("corrected over the 2 rates > 0 (Holm–Bonferroni)" in e for e in v.evidence)
