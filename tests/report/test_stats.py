"""The statistics the claim engine decides on, against independent references (hand arithmetic,
simulation), and the small helpers it reads curves and budgets with."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as st

from xformer.report.rules.engine import _schedule
from xformer.report.rules.stability import spaced
from xformer.report.stats import contrast, detectable_difference, seeds_needed, welch


def test_welch_interval_matches_hand_calculation():
    # means 1.1 and 1.6, variances 0.01 each, n = 3: se = sqrt(2 * 0.01 / 3) = 0.08165, df = 4,
    # t_0.975,4 = 2.776445 → half width 0.22669
    iv = welch([1.0, 1.1, 1.2], [1.5, 1.6, 1.7])
    assert iv.delta == pytest.approx(-0.5) and iv.df == pytest.approx(4.0)
    assert iv.lo == pytest.approx(-0.72669, abs=1e-5) and iv.hi == pytest.approx(-0.27331, abs=1e-5)
    assert 0.001 < iv.p < 0.01
    with pytest.raises(ValueError, match="at least 2"):
        welch([1.0], [1.0, 2.0])


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
    """At the detectable difference the power of the t-test (by simulation) is 80 %."""
    sd, n = 0.4, 5
    mde = detectable_difference(sd, n, n)
    rng = random.Random(0)
    hits, trials = 0, 4000
    for _ in range(trials):
        x = [rng.gauss(mde, sd) for _ in range(n)]
        y = [rng.gauss(0.0, sd) for _ in range(n)]
        hits += st.ttest_ind(x, y).pvalue < 0.05
    assert abs(hits / trials - 0.80) < 0.03
    assert seeds_needed(sd, mde) == n and seeds_needed(sd, mde * 1.01) <= n
    assert detectable_difference(sd, 1, 3) is None


def test_spaced_points_read_the_same_part_of_training_however_often_runs_validate():
    assert spaced([1500 + 250 * i for i in range(7)]) == [1500, 1750, 2000, 2500, 2750, 3000]
    assert spaced(list(range(1500, 3001, 50))) == [1500, 1800, 2100, 2400, 2700, 3000]
    assert spaced([1, 2, 3]) == [1, 2, 3]


def test_the_same_schedule_reads_the_same_under_either_name():
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
