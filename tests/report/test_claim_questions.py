"""The rules that decide a claim on its authors' question, after checking that the experiment can show
it (#28): hand-made sweeps for C12 dropout (over-fitting precondition), C4 (the warm-up interaction), C5
(degradation against a control), C9 (the d_k interaction), C11 (d_qk) and the power check."""

from __future__ import annotations

import math

from xformer.report.aggregate import aggregate
from xformer.report.claims import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Options, evaluate
from xformer.report.rules.results import Check
from xformer.report.stats import contrast, detectable_difference, seeds_needed, welch

from .conftest import flat_curve, overfit_curve, write_job, write_sweep


def only(root, cid):
    (v,) = [v for v in evaluate(aggregate([root]), Options()) if v.claim == cid]
    return v


# -- the statistics the rules use, against independent references -----------------------------------
def test_contrast_of_two_settings_is_welch_and_an_interaction_adds_variances():
    a, b, c, d = [1.0, 1.2, 0.9], [2.0, 2.1, 1.8], [0.5, 0.7, 0.6], [0.4, 0.45, 0.5]
    two = contrast([a, b], [1, -1])
    ref = welch(a, b)
    assert math.isclose(two.lo, ref.lo) and math.isclose(two.hi, ref.hi) and math.isclose(two.p, ref.p)
    inter = contrast([a, b, c, d], [1, -1, -1, 1])
    var = sum(sum((x - sum(s) / 3) ** 2 for x in s) / 2 / 3 for s in (a, b, c, d))
    assert math.isclose(inter.se, math.sqrt(var))
    assert math.isclose(inter.delta, (sum(a) - sum(b) - sum(c) + sum(d)) / 3)


def test_detectable_difference_has_the_stated_power():
    """At the detectable difference the exact power (noncentral t, computed here by simulation) is 80 %."""
    import random

    from scipy import stats as st

    sd, n = 0.4, 5
    mde = detectable_difference(sd, n, n)
    rng = random.Random(0)
    hits, trials = 0, 4000
    for _ in range(trials):
        x = [rng.gauss(mde, sd) for _ in range(n)]
        y = [rng.gauss(0.0, sd) for _ in range(n)]
        t, p = st.ttest_ind(x, y)
        hits += p < 0.05
    assert abs(hits / trials - 0.80) < 0.03
    assert seeds_needed(sd, mde) == n and seeds_needed(sd, mde * 1.01) <= n
    assert detectable_difference(sd, 1, 3) is None


# -- C12 dropout: the dropout-0 arm must over-fit ----------------------------------------------------
def _dropout_sweep(root, curve0):
    num = 0
    for p, vals in ((0, [1.70, 1.71, 1.72]), (0.1, [1.60, 1.61, 1.62]), (0.3, [1.65, 1.66, 1.67])):
        for seed, v in enumerate(vals, start=1):
            curve = curve0(v) if p == 0 else flat_curve(v)
            write_job(root, num, [f"model.dropout={p}", f"seed={seed}"], {"test/loss": v, "val/loss": v}, curve=curve)
            num += 1


def test_dropout_helps_where_the_model_without_it_over_fits(tmp_path):
    _dropout_sweep(tmp_path, overfit_curve)
    v = only(tmp_path, "C12")
    assert v.status == SUPPORTED, v.block()
    assert any("precondition (dropout 0 over-fits): val/loss rises 0.2 nats" in e for e in v.evidence), v.block()


def test_dropout_that_costs_where_nothing_over_fits_cannot_show_the_claim(tmp_path):
    """The published LM form: dropout 0 is best, but its validation loss never turns up."""
    num = 0
    for p, vals in ((0, [1.60, 1.61, 1.62]), (0.1, [1.70, 1.71, 1.72])):
        for seed, v in enumerate(vals, start=1):
            write_job(
                tmp_path,
                num,
                [f"model.dropout={p}", f"seed={seed}"],
                {"test/loss": v, "val/loss": v, "train/nll": v - 0.05},
                curve=flat_curve(v),
            )
            num += 1
    v = only(tmp_path, "C12")
    assert v.status == INCONCLUSIVE and Check.PRECONDITION in v.problems, v.block()
    assert v.reason.startswith("dropout: this setting cannot show it, because dropout 0 does not over-fit"), v.reason
    assert "the rule alone would say: not supported" in v.reason
    assert "ends 0.05 nats above train/nll" in v.reason


def test_a_large_train_val_nll_gap_is_over_fitting_too(tmp_path):
    num = 0
    for p, vals in ((0, [1.70, 1.71, 1.72]), (0.1, [1.60, 1.61, 1.62])):
        for seed, v in enumerate(vals, start=1):
            metrics = {"test/loss": v, "val/loss": v, "train/nll": v - 0.6}
            write_job(tmp_path, num, [f"model.dropout={p}", f"seed={seed}"], metrics, curve=flat_curve(v))
            num += 1
    assert only(tmp_path, "C12").status == SUPPORTED


# -- C4: the interaction Xiong et al. state ---------------------------------------------------------
def _norm_sweep(root, table):
    num = 0
    for (norm, warm), vals in table.items():
        for seed, v in enumerate(vals, start=1):
            overrides = [f"model/norm={norm}", f"optim.warmup_steps={warm}", f"seed={seed}"]
            write_job(root, num, overrides, {"test/loss": v, "val/loss": v}, curve=flat_curve(v))
            num += 1


def test_c4_pre_ln_gains_a_little_from_warm_up_but_the_interaction_is_large(tmp_path):
    _norm_sweep(
        tmp_path,
        {
            ("post", 0): [3.38, 3.39, 3.37],
            ("post", 300): [1.74, 1.75, 1.73],
            ("pre", 0): [1.76, 1.78, 1.74],
            ("pre", 300): [1.66, 1.67, 1.65],
        },
    )
    v = only(tmp_path, "C4")
    assert v.status == SUPPORTED, v.block()
    assert v.key.a.startswith("warm-up benefit post − pre") and v.key.interval.lo > 1.0
    assert any(e.startswith("caveat: Pre-LN gains from warm-up too") for e in v.evidence)


def test_c4_not_supported_when_pre_ln_without_warm_up_falls_short(tmp_path):
    _norm_sweep(
        tmp_path,
        {
            ("post", 0): [3.38, 3.39, 3.37],
            ("post", 300): [1.74, 1.75, 1.73],
            ("pre", 0): [2.10, 2.11, 2.09],
            ("pre", 300): [1.66, 1.67, 1.65],
        },
    )
    v = only(tmp_path, "C4")
    assert v.status == NOT_SUPPORTED and "Pre-LN without warm-up is worse than Post-LN with it" in v.reason


def test_c4_not_supported_when_post_ln_gains_less_from_warm_up(tmp_path):
    _norm_sweep(
        tmp_path,
        {
            ("post", 0): [1.80, 1.81, 1.79],
            ("post", 300): [1.74, 1.75, 1.73],
            ("pre", 0): [2.10, 2.11, 2.09],
            ("pre", 300): [1.66, 1.67, 1.65],
        },
    )
    v = only(tmp_path, "C4")
    assert v.status == NOT_SUPPORTED and "Post-LN gains less from warm-up than Pre-LN" in v.reason


# -- C5: degradation with ALiBi as the control ------------------------------------------------------
def _pe_sweep(root, table):
    """``table = {pe: (loss@1x, loss@2x, loss@4x) per seed}``."""
    num = 0
    for pe, rows in table.items():
        for seed, (one, two, four) in enumerate(rows, start=1):
            metrics = {"val/loss": one, "test/loss@1x": one, "test/loss@2x": two, "test/loss@4x": four}
            write_job(root, num, [f"model/pe={pe}", f"seed={seed}"], metrics, curve=flat_curve(one))
            num += 1


def test_c5_sinusoidal_degrades_and_alibi_does_not(tmp_path):
    """The published CPU figures' shape: every scheme fits 1×; sinusoidal and learned fall apart at 2×."""
    _pe_sweep(
        tmp_path,
        {
            "sinusoidal": [(0.10, 2.73, 3.24), (0.10, 3.16, 3.44), (0.105, 3.12, 3.51)],
            "learned": [(0.125, 2.72, 3.15), (0.146, 2.57, 3.18), (0.101, 2.22, 3.11)],
            "alibi": [(0.111, 0.152, 0.286), (0.112, 0.159, 0.301), (0.115, 0.163, 0.341)],
        },
    )
    v = only(tmp_path, "C5")
    assert v.status == NOT_SUPPORTED, v.block()
    assert "sinusoidal degrades more than alibi from 1× to 2×" in v.reason
    assert any(e.startswith("positive control: alibi degradation@2x vs learned degradation@2x") for e in v.evidence)


def test_c5_cannot_show_it_when_no_scheme_extrapolates(tmp_path):
    _pe_sweep(
        tmp_path,
        {
            "sinusoidal": [(0.1, 2.7, 3.2), (0.1, 3.1, 3.4), (0.1, 3.0, 3.5)],
            "learned": [(0.1, 2.7, 3.1), (0.1, 2.6, 3.2), (0.1, 2.2, 3.1)],
            "alibi": [(0.1, 2.8, 3.3), (0.1, 2.9, 3.2), (0.1, 2.5, 3.0)],
        },
    )
    v = only(tmp_path, "C5")
    assert v.status == INCONCLUSIVE and Check.PRECONDITION in v.problems, v.block()
    assert "does not degrade less than learned positions" in v.reason


# -- C9: the benefit of scaling grows with d_k --------------------------------------------------------
def _scale_sweep(root, table):
    num = 0
    for (scale, dk), vals in table.items():
        for seed, v in enumerate(vals, start=1):
            overrides = [f"model.attn_scale={str(scale).lower()}", f"model.d_head={dk}", f"seed={seed}"]
            write_job(root, num, overrides, {"test/loss": v, "val/loss": v}, curve=flat_curve(v))
            num += 1


def test_c9_supported_on_the_interaction(tmp_path):
    _scale_sweep(
        tmp_path,
        {
            (True, 64): [1.74, 1.735, 1.745],
            (False, 64): [1.85, 1.83, 1.87],
            (True, 16): [1.79, 1.795, 1.80],
            (False, 16): [1.83, 1.82, 1.85],
        },
    )
    v = only(tmp_path, "C9")
    assert v.status == SUPPORTED and v.key.a == "scaling benefit@d_k=64 − @d_k=16", v.block()


def test_c9_a_benefit_that_does_not_grow_with_d_k_is_not_supported(tmp_path):
    _scale_sweep(
        tmp_path,
        {
            (True, 64): [1.74, 1.735, 1.745],
            (False, 64): [1.76, 1.755, 1.765],
            (True, 16): [1.70, 1.705, 1.71],
            (False, 16): [1.80, 1.805, 1.81],
        },
    )
    v = only(tmp_path, "C9")
    assert v.status == NOT_SUPPORTED and "the scaling benefit shrinks from d_k=16 to d_k=64" in v.reason


# -- C11: the key size alone ---------------------------------------------------------------------------
def test_c11_reads_the_query_key_width(tmp_path):
    write_sweep(tmp_path, "model.d_qk", {6: [1.80, 1.81, 1.82], 12: [1.78, 1.79, 1.80], 24: [1.74, 1.75, 1.76]})
    v = only(tmp_path, "C11")
    assert v.status == SUPPORTED and v.key.a == "d_qk=24" and v.key.b == "d_qk=6", v.block()


# -- power: an effect smaller than the sweep can detect is "underpowered" ---------------------------
def test_label_smoothing_with_a_spread_wider_than_the_published_effect_is_underpowered(tmp_path):
    num = 0
    table = {0: ([9.1, 9.2, 9.15], [25.98, 25.74, 25.6]), 0.1: ([9.6, 9.7, 9.65], [25.99, 25.81, 25.26])}
    for eps, (ppl, bleu) in table.items():
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
    assert v.status == INCONCLUSIVE and Check.UNDERPOWERED in v.problems, v.block()
    assert v.reason.startswith("label smoothing: underpowered"), v.reason
    text = next(e for e in v.evidence if "larger than the published effect 0.5" in e)
    n = int(text.split("~")[1].split()[0])
    assert 4 <= n <= 40  # from the seeds' own spread (~0.3 BLEU)


# -- a schedule describes itself for the budget line ------------------------------------------------
def test_the_same_schedule_reads_the_same_under_either_name():
    """C4/C5's jobs name the linear schedule by its former alias, the others by ``linear``: one text."""
    from xformer.report.rules.core import _schedule

    node = {"warmup_steps": 100, "total_steps": 3000, "floor": 0.0}
    texts = {
        _schedule({"optim": {"lr": 0.003, "warmup_steps": 100, "scheduler": {"_target_": t, **node}}})
        for t in ("xformer.train.schedules.linear", "xformer.train.schedules.warmup_linear")
    }
    assert texts == {"warm-up 100 + linear decay to 0× peak, peak lr 0.003"}
    cos = {"_target_": "xformer.train.schedules.cosine", "warmup_steps": 100, "total_steps": 2000, "floor": 0.1}
    assert _schedule({"optim": {"lr": 1e-3, "warmup_steps": 100, "scheduler": cos}}).endswith(
        "cosine decay to 0.1× peak, peak lr 0.001"
    )


def test_a_well_powered_null_says_the_interval_excludes_the_published_effect(tmp_path):
    num = 0
    bleu = {0: [26.6, 26.7, 26.65, 26.62, 26.68, 26.64], 0.1: [26.58, 26.66, 26.6, 26.63, 26.61, 26.67]}
    for eps, vals in bleu.items():
        for seed, b in enumerate(vals, start=1):
            ppl = 9.1 if eps == 0 else 9.6
            metrics = {"val/ppl": ppl + 0.01 * seed, "test/bleu": b}
            write_job(tmp_path, num, [f"loss.label_smoothing={eps}", f"seed={seed}"], metrics, curve=flat_curve(1.5))
            num += 1
    v = only(tmp_path, "C12")
    assert v.status == INCONCLUSIVE and Check.UNDERPOWERED not in v.problems, v.block()
    assert any("excludes an effect that large at this budget" in e for e in v.evidence), v.block()
