"""The test types a claim's parts are decided by: one module-level function each, named as in the
declarations (``test: superiority``), or any function ``(part, ctx) -> PartResult`` with a ``check``
attribute named by its dotted path. Tabulated in docs/report.md § Test types; :func:`finish` applies the
checks every comparison gets (docs/report.md § Checks every part gets).
"""

from __future__ import annotations

import bisect
import functools
import inspect
import itertools
import math
import random
import statistics
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from scipy.stats import rankdata

from xformer.config_types import import_target

from ..aggregate import Sweep, fmt_value, read_curves, value_sort_key
from ..stats import CONFIDENCE, Interval, c4, contrast, detectable_for, detectable_planned, welch
from . import measures
from .evidence import Arm, SelectionError, arm, bounds, higher_is_better, job_value, same, select, selector_text
from .part import Part
from .reasons import reason
from .results import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, PartResult, Status
from .stability import check as stability_check

STABLE_RANKING = "stable ranking"
"""What a claim states (its ``at``) when a gap shown to close over the second half undoes a decision."""

MIN_SEEDS = 3
"""Seeds per arm below which no comparison decides anything."""
SATURATION = 0.02
"""A bounded metric is saturated when every arm's mean lies within this share of its range from one bound."""


@dataclass
class Context:
    """What a test reads besides its part: the sweep and the parsed ``bench.json`` (or ``None``)."""

    sweep: Sweep
    bench: dict | None = None


class NotCovered(Exception):
    """The sweep lacks what a part needs (an arm, a metric, a bench file); the part is inconclusive.
    ``key``: the part's key that asks for it."""

    def __init__(self, message: str, key: str = "test"):
        super().__init__(message)
        self.key = key


def _needs(keys: str, **hint: str) -> Callable[[Part], tuple[str, str] | None]:
    """A declaration check: each of the space-separated ``keys`` present (``hint``: the fix per key)."""

    def check(part: Part) -> tuple[str, str] | None:
        for k in keys.split():
            if part.get(k) is None:
                fix = hint.get(k) or f"add '{k}: ...'"
                return k, f"{part.test} needs '{k}'; fix: {fix}"
        return None

    return check


MARGIN_TESTS = ("superiority", "non_inferiority", "equivalence", "contrast")
"""The test types that read ``margin`` (the others decide against their own keys: level, factor, target)."""


# -- shared pieces ------------------------------------------------------------------------------------
def _arm(ctx: Context, part: Part, key: str, selector: dict | None = None, name: str | None = None) -> Arm:
    sel = part.get(key) if selector is None else selector
    try:
        return arm(ctx.sweep, {**(part.get("at") or {}), **sel}, str(part.metric), name, key)
    except SelectionError as e:
        raise NotCovered(str(e), e.key) from e


def _oriented(iv: Interval, hb: bool) -> tuple[float, float, float]:
    """``(lo, Δ, hi)`` of ``iv`` oriented so that positive is better (``hb``: higher is better)."""
    return (iv.lo, iv.delta, iv.hi) if hb else (-iv.hi, -iv.delta, -iv.lo)


def _hb(part: Part) -> bool:
    better = part.get("better")
    return better == "higher" if better in ("higher", "lower") else higher_is_better(str(part.metric))


def result(part: Part, verdict: Status, reason: str, **kw: Any) -> PartResult:
    """A result of ``part`` (its label, test, role, metric and margin source copied), with ``kw``."""
    return PartResult(
        label=part.label,
        test=part.test,
        role=part.role,
        says=part.says,
        verdict=verdict,
        reason=reason,
        metric=part.metric,
        margin_source=part.margin_source,
        published_effect=part.published_effect,
        **kw,
    )


def saturated(metric: str, arms: list[Arm]) -> str | None:
    """A sentence when every arm's mean of a bounded ``metric`` lies within :data:`SATURATION` of its
    range from the same bound, else ``None``."""
    b = bounds(metric)
    if b is None or not all(math.isfinite(x) for x in b) or not arms:
        return None
    lo, hi = b
    tol = SATURATION * (hi - lo)
    means = [a.mean for a in arms if a.n]
    side = "ceiling" if all(m >= hi - tol for m in means) else "floor" if all(m <= lo + tol for m in means) else None
    return f"{metric} is saturated at its {side} ({min(means):.4g}–{max(means):.4g})" if side else None


def _decide(lo: float, hi: float, boundary: float) -> Status:
    """Supported when the interval lies above ``boundary``, not supported when below, else inconclusive."""
    return SUPPORTED if lo > boundary else NOT_SUPPORTED if hi < boundary else INCONCLUSIVE


def _every(verdicts: list[Status]) -> Status:
    """Steps that must all hold: supported when every one is, not supported when any is, else inconclusive."""
    if all(v == SUPPORTED for v in verdicts):
        return SUPPORTED
    return NOT_SUPPORTED if NOT_SUPPORTED in verdicts else INCONCLUSIVE


def finish(
    part: Part,
    res: PartResult,
    arms: list[Arm],
    boundary: float | None,
    se_df: tuple[float, float] | None,
    weights: list[float] | None = None,
    detect: dict | None = None,
) -> PartResult:
    """The checks every comparison gets: seeds, saturation, power, the second-half trend (read when
    ``boundary``, what Δ was decided against, is given) and the seeds a side that would decide an undecided
    part. ``se_df``: Δ's standard error and degrees of freedom; ``weights``: the arms' (default ``+1, −1``);
    ``detect``: options of :func:`~xformer.report.stats.detectable_planned`, e.g. two one-sided tests."""
    res.arms = arms
    res.evidence = [a.text() for a in arms] + res.evidence
    if se_df is not None and se_df[0] > 0:
        res.detectable = detectable_planned(*se_df, **(detect or {}))
    elif se_df is not None:
        res.detectable = 0.0
    if res.detectable is not None:
        res.evidence.append(f"detectable effect at 80 % power: |Δ| ≥ {res.detectable:.3g} ({res.metric})")
    weights = weights or [1.0, -1.0][: len(arms)]
    few = [f"{a.name}: {a.n} seed(s)" for a in arms if a.n < MIN_SEEDS]
    if few:
        if res.verdict != INCONCLUSIVE:
            res.evidence.append(f"with at least {MIN_SEEDS} seeds a side, this interval would read {res.verdict}")
        res.problems.append("too few seeds")
        res.reason = reason("too few seeds", arms="; ".join(few), need=MIN_SEEDS)
        res.verdict = INCONCLUSIVE
        return _seeds_to_decide(part, res, arms, weights, boundary)
    sat = saturated(str(part.metric), arms)
    if sat and res.verdict != NOT_SUPPORTED:
        if res.verdict != INCONCLUSIVE:
            res.evidence.append(f"unsaturated, this interval would read {res.verdict}")
        res.problems.append("saturated")
        res.reason = reason("saturated", what=sat)
        res.verdict = INCONCLUSIVE
        return res
    if sat:
        res.evidence.append(f"{sat}; a refutation stands")
    effect = part.published_effect
    if (
        res.verdict == INCONCLUSIVE
        and effect is not None
        and res.detectable is not None
        and res.detectable > abs(effect)
        and not res.problems
    ):
        res.problems.append("underpowered")
        res.reason = reason("underpowered", detectable=f"{res.detectable:.3g}", effect=f"{abs(effect):.3g}")
    if boundary is not None and res.estimate is not None and res.scale == "metric":
        side = 1.0 if res.estimate > boundary else -1.0
        terms = [(w, a.jobs) for w, a in zip(weights, arms, strict=True)]
        st = stability_check(terms, str(part.metric), boundary, side, part.label)
        res.stability = st
        if st is not None:
            res.evidence.append(f"trend: {st.text}")
            decided = res.verdict in (SUPPORTED, NOT_SUPPORTED)
            if decided and st.shown_closing and part.at == STABLE_RANKING:
                res.evidence.append(f"the final interval alone reads {res.verdict}")
                res.problems.append("closing")
                res.reason = reason("closing", outcome=st.outcome)
                res.verdict = INCONCLUSIVE
            elif decided and st.shown_closing:
                res.caveats.append(f"{st.outcome}: the gap is shown to close over the second half")
            elif decided and st.outcome not in ("not closing",):
                res.caveats.append("trend undetermined")
    return _seeds_to_decide(part, res, arms, weights, boundary)


def seeds_for(sd: float, weights: list[float], effect: float, most: int = 1000) -> int:
    """Seeds a side for which a contrast ``Σ wᵢ·mean`` (equal seeds per arm, per-seed spread ``sd``) has
    80 % power at ``|effect|`` (``most + 1`` when even ``most`` do not); at least :data:`MIN_SEEDS`, the fewest
    a verdict is given on."""
    if sd == 0:
        return MIN_SEEDS
    w2 = sum(w * w for w in weights)

    def enough(n: int) -> bool:
        d = detectable_for(sd * math.sqrt(w2 / n), len(weights) * (n - 1))
        return d is not None and d <= abs(effect)

    return max(_first(enough, 1, most), MIN_SEEDS) if enough(most) else most + 1


def _first(enough: Callable[[int], bool], lo: int, hi: int) -> int:
    """The first n in (``lo``, ``hi``] that is ``enough`` (which ``hi`` is, and every n after the first),
    by bisection: the detectable effect shrinks with n."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def _seeds_to_decide(
    part: Part, res: PartResult, arms: list[Arm], weights: list[float], boundary: float | None
) -> PartResult:
    """An undecided part says how many seeds a side would decide it: 80 % power at its margin, else at
    its published effect, else at the effect observed (all from the measured seed spread)."""
    if res.verdict != INCONCLUSIVE or "saturated" in res.problems:
        return res
    sd = _pooled_sd(arms)
    if sd is None or not math.isfinite(sd):
        return res
    m = res.margin or 0.0
    effect, what = None, ""
    if m:
        effect, what = m, f"its margin {m:.3g}"
    elif part.published_effect:
        effect, what = part.published_effect, f"the published effect {abs(part.published_effect):.3g}"
    elif res.estimate is not None and res.scale == "metric" and abs(res.estimate - (boundary or 0.0)) > 0:
        effect = abs(res.estimate - (boundary or 0.0))
        what = f"the effect observed ({effect:.3g})"
    elif res.scale == "ranks" and len(arms) == 2 and all(a.values for a in arms):
        a, b = arms if weights[0] > 0 else arms[::-1]
        sign = 1.0 if _hb(part) else -1.0
        shift = sorted(sign * (x - y) for x in a.values for y in b.values)  # Hodges–Lehmann: their median
        effect = abs(statistics.median(shift) - (boundary or 0.0))
        what = f"the shift observed in the finished seeds ({effect:.3g})"
    if not effect:
        return res
    if res.scale == "ranks":
        if len(arms) != 2:
            return res
        rn = _rank_seeds_for(arms, sd, effect)
        if rn is not None:
            res.seeds_needed = rn
        words = f"~{rn}" if rn is not None else "more than 50"
        res.evidence.append(
            f"{words} seeds a side with the same shares diverged would decide it (the rank test's 80 % power at "
            f"{what}, seed spread {sd:.3g})"
        )
        return res
    n = seeds_for(sd, weights, effect)
    if n <= min(a.n for a in arms):  # it has those seeds already: what holds it back is not their number
        return res
    res.seeds_needed = n
    words = f"~{n}" if n <= 1000 else "more than 1000"
    res.evidence.append(f"{words} seeds a side would decide it (80 % power at {what}, seed spread {sd:.3g})")
    return res


def _pooled_sd(arms: list[Arm]) -> float | None:
    """The pooled seed spread of the arms' finished seeds (a diverged seed adds no degree of freedom);
    ``None`` with no arm of 2 finished seeds."""
    num, den = 0.0, 0
    for a in arms:
        if len(a.values) > 1:
            m = a.mean
            num += sum((v - m) ** 2 for v in a.values)
            den += len(a.values) - 1
    return math.sqrt(num / den) if den else None


def _two(part: Part, ctx: Context) -> tuple[Arm, Arm, float, Interval | None]:
    """Arms a and b, the margin and Welch's a − b (``None``: a diverged seed, or < 2 finished a side)."""
    a, b = _arm(ctx, part, "a"), _arm(ctx, part, "b")
    m = part.margin.resolve(b.mean) if part.margin is not None else 0.0
    if len(a.values) < 2 or len(b.values) < 2 or a.diverged or b.diverged:
        return a, b, m, None
    return a, b, m, welch(a.values, b.values)


def _ranked(arms: list[Arm]) -> bool:
    """Whether arms without an interval are decided by ranks: a diverged seed, and 2 seeds an arm."""
    return any(x.diverged for x in arms) and all(x.n >= 2 for x in arms)


def _few_result(part: Part, arms: list[Arm], margin: float | None) -> PartResult:
    return finish(part, result(part, INCONCLUSIVE, "", margin=margin), arms, None, None)


def _count_p(arms: list[Arm], weights: list[float]) -> tuple[float, float, float]:
    """``(T, p_up, p_down)``: T = −Σ wᵢ·(diverged share of armᵢ) (positive: the divergences favour the
    contrast), and its exact one-sided p-values when the diverged runs fall on the arms at random
    (every way of placing them among the runs equally likely: the multivariate hypergeometric law)."""
    ns = [a.n for a in arms]
    d_tot = sum(a.diverged for a in arms)
    t_obs = -sum(w * a.diverged / a.n for w, a in zip(weights, arms, strict=True))
    total = math.comb(sum(ns), d_tot)
    up = down = 0.0

    def walk(i: int, left: int, prob: float, t: float) -> None:
        nonlocal up, down
        if i == len(ns):
            if left == 0:
                up += prob if t >= t_obs - 1e-12 else 0.0
                down += prob if t <= t_obs + 1e-12 else 0.0
            return
        for k in range(0, min(left, ns[i]) + 1):
            walk(i + 1, left - k, prob * math.comb(ns[i], k), t - weights[i] * k / ns[i])

    walk(0, d_tot, 1.0, 0.0)
    return t_obs, up / total, down / total


def _ranks(arms: list[Arm], shifts: list[float], hb: bool) -> list[list[float]]:
    """Each arm's seeds as mid-ranks over every seed of ``arms`` (oriented: a higher rank is better;
    finished values shifted by ``shifts``; a diverged seed ranks below every finished one)."""
    sign = 1.0 if hb else -1.0
    pooled = [(sign * v + sh, i) for i, (a, sh) in enumerate(zip(arms, shifts, strict=True)) for v in a.values]
    pooled += [(-math.inf, i) for i, a in enumerate(arms) for _ in range(a.diverged)]
    ranks = rankdata([v for v, _ in pooled])
    return [sorted(float(r) for r, (_, j) in zip(ranks, pooled, strict=True) if j == i) for i in range(len(arms))]


def diverged_decision(part: Part, arms: list[Arm], weights: list[float], boundary: float) -> PartResult:
    """A comparison with diverged seeds: a diverged seed is an outcome worse than every finished one.

    Where an arm has no finished seed, the divergence count decides: the share of diverged seeds per
    arm, weighted as the contrast, against its exact distribution when divergence does not depend on the
    arm. Otherwise each seed is ranked over all arms (diverged ones below every finished one, the first
    positively weighted arm's values shifted by the oriented ``boundary``) and the contrast of mean ranks
    gets its exact permutation test (the rank transform, Conover & Iman 1981), decided against 0. Either
    decides at one-sided p ≤ (1 − :data:`CONFIDENCE`)/2, as the interval would."""
    alpha = (1 - CONFIDENCE) / 2
    counts = ", ".join(f"{a.name}: {a.diverged} of {a.n} diverged" for a in arms)
    if any(not a.values for a in arms):
        t, p_up, p_down = _count_p(arms, weights)
        p = min(p_up, p_down)
        if p_up <= alpha and t > 0:
            verdict, why = SUPPORTED, reason("divergence count", counts=counts, p=f"{p_up:.3g}")
        elif p_down <= alpha and t < 0:
            verdict, why = NOT_SUPPORTED, reason("divergence count", counts=counts, p=f"{p_down:.3g}")
        else:
            verdict, why = INCONCLUSIVE, reason("divergence count open", counts=counts, p=f"{p:.3g}")
        res = result(part, verdict, why, estimate=t)
        res.scale = "divergence share"
        res.evidence.append(
            f"a setting without a finished seed: decided by the count (−Σ w·share diverged = {t:+.3g}; "
            f"exact one-sided p {p_up:.3g} for, {p_down:.3g} against)"
        )
        if verdict == INCONCLUSIVE and t != 0:
            for n in range(max(a.n for a in arms) + 1, 51):
                scaled = [
                    Arm(a.name, [0.0] * (n - round(n * a.diverged / a.n)), round(n * a.diverged / a.n)) for a in arms
                ]
                _, up, down = _count_p(scaled, weights)
                if min(up, down) <= alpha:
                    res.seeds_needed = n
                    res.evidence.append(f"~{n} seeds a side with the same shares diverged would decide it by the count")
                    break
        return res
    first = next(i for i, w in enumerate(weights) if w > 0)
    if boundary and len(arms) > 2:
        return result(part, INCONCLUSIVE, reason("ranks margin"))
    shifts = [0.0] * len(arms)
    shifts[first] = -boundary / weights[first]
    ranks = _ranks(arms, shifts, _hb(part))
    stat, p_up, p_down = rank_permutation(ranks, weights)
    verdict = SUPPORTED if p_up <= alpha else NOT_SUPPORTED if p_down <= alpha else INCONCLUSIVE
    b = f"{boundary:.3g}" if boundary else "0"
    p = min(p_up, p_down)
    why = (
        reason("ranks open", boundary=b, p=f"{p:.3g}")
        if verdict == INCONCLUSIVE
        else reason("ranks", side="above" if verdict == SUPPORTED else "below", boundary=b, p=f"{p:.3g}")
    )
    res = result(part, verdict, why, estimate=stat)
    res.scale = "ranks"
    res.evidence.append(
        f"{counts}; mean ranks " + ", ".join(f"{sum(r) / len(r):.3g}" for r in ranks) + f"; exact permutation "
        f"p {p_up:.3g} for, {p_down:.3g} against"
    )
    if verdict == INCONCLUSIVE:
        # the smallest one-sided p of an exact test of two arms of n seeds: 1/C(2n, n)
        n = next((n for n in range(max(a.n for a in arms), 51) if 1.0 / math.comb(2 * n, n) <= alpha), None)
        if n is not None and n > min(a.n for a in arms):
            res.seeds_needed = n
            res.evidence.append(
                f"a rank decision needs ≥ {n} seeds a side (the smallest exact p with fewer is above {alpha:g})"
            )
    return res


def rank_permutation(ranks: list[list[float]], weights: list[float], most: int = 20000) -> tuple[float, float, float]:
    """``(T, p_up, p_down)``: T = Σ wᵢ·mean(ranksᵢ) and its one-sided p-values under every arrangement
    of the pooled ranks among the arms being equally likely (exact when there are at most ``most``
    arrangements, else ``most`` random ones drawn with a fixed seed, so a report is reproducible)."""
    t_obs = sum(w * sum(r) / len(r) for w, r in zip(weights, ranks, strict=True))
    ts = _permutation_stats(tuple(x for r in ranks for x in r), tuple(len(r) for r in ranks), tuple(weights), most)
    eps = 1e-9
    return t_obs, sum(t >= t_obs - eps for t in ts) / len(ts), sum(t <= t_obs + eps for t in ts) / len(ts)


@functools.lru_cache(maxsize=256)
def _permutation_stats(
    pooled: tuple[float, ...], sizes: tuple[int, ...], weights: tuple[float, ...], most: int
) -> tuple[float, ...]:
    """T = Σ wᵢ·mean(ranksᵢ) over every arrangement of ``pooled`` into arms of ``sizes`` (the first
    ``sizes[0]`` to arm 0, ...), or over ``most`` random arrangements (seed 0) when there are more."""

    def stat(order: list[float]) -> float:
        out, i = 0.0, 0
        for w, n in zip(weights, sizes, strict=True):
            out += w * sum(order[i : i + n]) / n
            i += n
        return out

    total = math.factorial(len(pooled))
    for n in sizes:
        total //= math.factorial(n)
    ts: list[float] = []
    if total <= most:

        def place(i: int, left: list[int]) -> None:
            if i == len(sizes) - 1:
                ts.append(stat([pooled[j] for grp in [*groups, left] for j in grp]))
                return
            for combo in itertools.combinations(left, sizes[i]):
                groups.append(list(combo))
                place(i + 1, [j for j in left if j not in combo])
                groups.pop()

        groups: list[list[int]] = []
        place(0, list(range(len(pooled))))
    else:
        rng = random.Random(0)
        for _ in range(most):
            order = list(pooled)
            rng.shuffle(order)
            ts.append(stat(order))
    return tuple(ts)


RANK_POWER_DRAWS = 100_000
"""Normal samples (seed 0) the rank test's detectable shift is read from: its power is 80 % ± 0.15 points."""
RANK_POWER_PAIRS = 10_000_000
"""The most differences bⱼ − aᵢ drawn for one shift (fewer draws where the seeds are many)."""


@functools.lru_cache(maxsize=1024)
def rank_shift_needed(fa: int, da: int, fb: int, db: int, alpha: float, power: float = 0.8) -> float:
    """The location shift, in seed spreads, at which the exact rank test of :func:`diverged_decision`
    (arm ``a`` with ``fa`` finished and ``da`` diverged seeds against ``b`` with ``fb``, ``db``;
    one-sided at ``alpha``) decides ``a`` better with probability ``power``; ``inf`` when no shift does:
    the ``power`` quantile of the u*-th smallest difference bⱼ − aᵢ of normal seeds, u* the smallest
    U = #{(i, j): aᵢ > bⱼ} that decides (docs/report.md § Checks every part gets)."""
    na, nb, d = fa + da, fb + db, da + db
    if fa < 1 or fb < 1:
        return math.inf
    pooled = tuple([(d + 1) / 2] * d + [float(r) for r in range(d + 1, na + nb + 1)])
    ts = sorted(_permutation_stats(pooled, (na, nb), (1.0, -1.0), 20000))
    total = sum(pooled)
    base = da * (d + 1) / 2 + fa * d + fa * (fa + 1) / 2  # a's rank sum when its finished seeds are lowest
    u_star = None
    for u in range(fa * fb + 1):
        s_a = base + u
        t = s_a / na - (total - s_a) / nb
        if (len(ts) - bisect.bisect_left(ts, t - 1e-9)) / len(ts) <= alpha:
            u_star = u
            break
    if u_star is None:
        return math.inf
    if u_star == 0:
        return 0.0
    rng = np.random.default_rng(0)
    draws = min(RANK_POWER_DRAWS, max(1000, RANK_POWER_PAIRS // (fa * fb)))
    chunk = max(1, min(draws, 2_000_000 // (fa * fb)))  # at most 2·10⁶ differences in memory at once
    need = []
    for start in range(0, draws, chunk):
        k = min(chunk, draws - start)
        xa, xb = rng.standard_normal((k, fa)), rng.standard_normal((k, fb))
        diff = (xb[:, None, :] - xa[:, :, None]).reshape(k, fa * fb)
        need.append(np.partition(diff, u_star - 1, axis=1)[:, u_star - 1])
    return float(np.quantile(np.concatenate(need), power))


def _rank_seeds_for(arms: list[Arm], sd: float, effect: float, power: float = 0.8, most: int = 50) -> int | None:
    """Seeds a side (the arms' shares of diverged seeds kept) at which the rank test's detectable effect
    is at most ``|effect|``; ``None`` when even ``most`` are not enough."""

    def enough(n: int) -> bool:
        da, db = (round(n * x.diverged / x.n) for x in arms)
        z = rank_shift_needed(n - da, da, n - db, db, (1 - CONFIDENCE) / 2, power)
        return z * sd <= abs(effect)

    return _first(enough, max(x.n for x in arms), most) if enough(most) else None


def _diverged_result(
    part: Part, arms: list[Arm], weights: list[float], boundary: float, margin: float | None, tests: int = 1
) -> PartResult:
    """A comparison decided by :func:`diverged_decision`; ranked two arms (weights ±1) get the rank test's
    own detectable effect (at 80 % power, each of ``tests`` steps at 80 % ** (1 / ``tests``)): the shift of
    :func:`rank_shift_needed` times the pooled spread of the finished seeds, ÷ c4 as Welch's is."""
    res = diverged_decision(part, arms, weights, boundary)
    res.margin = margin
    sd = _pooled_sd(arms)
    two = len(arms) == 2 and sorted(weights) == [-1.0, 1.0]
    if res.scale == "ranks" and two and sd is not None and math.isfinite(sd):
        a, b = arms if weights[0] > 0 else arms[::-1]
        alpha, power = (1 - CONFIDENCE) / 2, 0.8 ** (1.0 / tests)
        z = rank_shift_needed(len(a.values), a.diverged, len(b.values), b.diverged, alpha, power)
        df = len(a.values) + len(b.values) - 2
        if math.isfinite(z):
            res.detectable = z * sd / c4(df) if df >= 1 else z
        else:
            res.evidence.append(
                "no effect decides it at 80 % power with these divergences: the better arm's diverged seeds rank "
                "below every finished one"
            )
    return finish(part, res, arms, None, None, weights)


# -- the test types ---------------------------------------------------------------------------------
def superiority(part: Part, ctx: Context) -> PartResult:
    """Arm ``a`` better than ``b`` by more than ``margin`` (default 0) on ``metric``; within the noise, not
    supported where the interval excludes a ``published_effect`` the seeds detect (an informative null)."""
    a, b, m, iv = _two(part, ctx)
    if iv is None:
        if _ranked([a, b]):
            return _diverged_result(part, [a, b], [1.0, -1.0], m, m or None)
        return _few_result(part, [a, b], m)
    lo, d, hi = _oriented(iv, _hb(part))
    verdict = _decide(lo, hi, m)
    by = f" by more than {m:.3g}" if m else ""
    words = {
        SUPPORTED: reason("better", a=a.name, b=b.name, by=by),
        NOT_SUPPORTED: reason("not better", a=a.name, b=b.name, by=f" by {m:.3g}" if m else ""),
        INCONCLUSIVE: reason("within noise", boundary=f"{m:.3g}" if m else "0"),
    }
    res = result(part, verdict, words[verdict], estimate=d, lo=lo, hi=hi, confidence=iv.confidence, margin=m or None)
    effect = part.published_effect
    boundary = m
    detectable = detectable_planned(iv.se, iv.df) if iv.se > 0 else 0.0
    if verdict == INCONCLUSIVE and effect is not None and effect > m and hi < effect:
        if detectable is not None and detectable <= abs(effect):
            res.verdict, boundary = NOT_SUPPORTED, effect
            res.problems.append("not reproduced at this budget")
            res.reason = reason(
                "not reproduced",
                lo=f"{lo:+.3g}",
                hi=f"{hi:+.3g}",
                effect=f"{effect:+.3g}",
                detectable=f"{detectable:.3g}",
            )
        else:
            res.evidence.append(
                f"the interval excludes the published effect {effect:+.3g}, but the seeds detect only "
                f"|Δ| ≥ {detectable:.3g}: not read as a refutation"
            )
    return finish(part, res, [a, b], boundary, (iv.se, iv.df))


superiority.check = _needs("a b metric")


def non_inferiority(part: Part, ctx: Context) -> PartResult:
    """Arm ``a`` not worse than ``b`` by more than ``margin`` (required): the interval's lower bound
    against −margin."""
    a, b, m, iv = _two(part, ctx)
    if iv is None:
        if _ranked([a, b]):
            return _diverged_result(part, [a, b], [1.0, -1.0], -m, m)
        return _few_result(part, [a, b], m)
    lo, d, hi = _oriented(iv, _hb(part))
    verdict = _decide(lo, hi, -m)
    words = {
        SUPPORTED: reason("non-inferior", a=a.name, b=b.name, worst=f"{-lo:.3g}", m=f"{m:.3g}"),
        NOT_SUPPORTED: reason("inferior", a=a.name, b=b.name, m=f"{m:.3g}"),
        INCONCLUSIVE: reason("straddles margin", m=f"{m:.3g}"),
    }
    res = result(part, verdict, words[verdict], estimate=d, lo=lo, hi=hi, confidence=iv.confidence, margin=m)
    return finish(part, res, [a, b], -m, (iv.se, iv.df))


non_inferiority.check = _needs(
    "a b metric margin",
    margin="add 'margin: <the largest acceptable deficit, in the metric's units, or a percentage such as 1%>' and "
    "'margin_source: <where it comes from>', decided before looking at the data",
)


def equivalence(part: Part, ctx: Context) -> PartResult:
    """|a − b| < ``margin`` (required): two one-sided tests (the 90 % interval inside ±margin);
    not supported only when the 95 % interval lies entirely outside ±margin."""
    a, b, m, iv = _two(part, ctx)
    if iv is None:
        if _ranked([a, b]):
            # a diverged seed is worse than every finished one: its arm can be shown different, never equal
            res = diverged_decision(part, [a, b], [1.0, -1.0] if a.diverged else [-1.0, 1.0], m)
            if res.verdict == SUPPORTED:  # the arm without divergence is shown better by more than the margin
                res.verdict = NOT_SUPPORTED
            elif res.verdict == NOT_SUPPORTED:
                res.verdict = INCONCLUSIVE
            res.margin = m
            return finish(part, res, [a, b], None, None)
        return _few_result(part, [a, b], m)
    lo95, d, hi95 = _oriented(iv, _hb(part))
    iv90 = welch(a.values, b.values, 1 - 2 * (1 - CONFIDENCE))
    lo, _, hi = _oriented(iv90, _hb(part))
    if -m < lo and hi < m:
        verdict, why = SUPPORTED, reason("equivalent", lo=f"{lo:+.3g}", hi=f"{hi:+.3g}", m=f"{m:.3g}")
        boundary = m if d >= 0 else -m
    elif lo95 > m or hi95 < -m:
        verdict = NOT_SUPPORTED
        why = reason("different", lo=f"{lo95:+.3g}", hi=f"{hi95:+.3g}", m=f"{m:.3g}")
        boundary = m if d > 0 else -m
    else:
        verdict, boundary = INCONCLUSIVE, m if d >= 0 else -m
        why = reason("straddles both", m=f"{m:.3g}")
    res = result(part, verdict, why, estimate=d, lo=lo, hi=hi, confidence=iv90.confidence, margin=m)
    res.evidence.append(f"95 % interval [{lo95:+.3g}, {hi95:+.3g}]")
    # two one-sided tests at 5 % each, both passing at a true difference of 0: the margin they need
    tost = {"alpha": 2 * (1 - CONFIDENCE), "power": 1 - (1 - 0.8) / 2}
    return finish(part, res, [a, b], boundary, (iv.se, iv.df), detect=tost)


equivalence.check = _needs(
    "a b metric margin",
    margin="add 'margin: <the largest difference that counts as the same>' and 'margin_source: ...'",
)


def contrast_test(part: Part, ctx: Context) -> PartResult:
    """Σ wᵢ·mean(armᵢ) above ``margin`` (default 0): ``terms: [{weight: w, arm: {...}}, ...]``."""
    raw = part.get("terms") or []
    arms = [_arm(ctx, part, "terms", dict(t.get("arm") or {}), t.get("name")) for t in raw]
    weights = [float(t.get("weight", 1.0)) for t in raw]
    m = part.margin.value if part.margin is not None else 0.0
    if _ranked(arms):
        return _diverged_result(part, arms, weights, m, m or None)
    if any(len(x.values) < 2 for x in arms):
        return _few_result(part, arms, m)
    iv = contrast([x.values for x in arms], weights)
    lo, d, hi = _oriented(iv, _hb(part))
    verdict = _decide(lo, hi, m)
    words = {
        SUPPORTED: reason("contrast above", boundary=f"{m:.3g}"),
        NOT_SUPPORTED: reason("contrast below", boundary=f"{m:.3g}"),
        INCONCLUSIVE: reason("within noise", boundary=f"{m:.3g}"),
    }
    res = result(part, verdict, words[verdict], estimate=d, lo=lo, hi=hi, confidence=iv.confidence, margin=m or None)
    res.evidence.append("contrast: " + " ".join(f"{w:+g}·[{x.name}]" for w, x in zip(weights, arms, strict=True)))
    return finish(part, res, arms, m, (iv.se, iv.df), weights)


def _contrast_check(part: Part) -> tuple[str, str] | None:
    problem = _needs("terms metric")(part)
    if problem:
        return problem
    raw = part.get("terms")
    if not isinstance(raw, list) or len(raw) < 2 or not all(isinstance(t, dict) and "arm" in t for t in raw):
        return "terms", "a contrast needs at least two terms '{weight: w, arm: {...}}'; fix: write them so"
    weights = [t.get("weight", 1.0) for t in raw]
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
        return "terms", "every weight must be a number; fix: write 'weight: 1' or 'weight: -1'"
    if abs(sum(weights)) > 1e-9 and not part.get("unbalanced"):
        return "terms", (
            f"the weights sum to {sum(weights):g}, so the contrast compares a sum of means, not a difference; "
            "fix: make them sum to 0 (e.g. 1, -1, -1, 1), or add 'unbalanced: true' if a sum is meant"
        )
    if part.margin is not None and part.margin.relative:
        return "margin", (
            "a contrast has no reference arm to take a percentage of; fix: give the margin in the metric's units"
        )
    return None


contrast_test.check = _contrast_check
contrast_test.__name__ = "contrast"


ALL_LEVELS = "all"
"""``values: all``: a part along an axis reads every level the sweep has (stated, not assumed)."""


def _axis_values(ctx: Context, part: Part) -> list[Any]:
    """The levels of ``axis`` a part reads: its declared ``values`` (each one must be in the sweep, else
    :class:`NotCovered` naming the missing ones), or with ``values: all`` (or none declared, for a count
    threshold) every level the sweep has at ``at``."""
    axis = str(part.get("axis"))
    declared = part.get("values")
    at = part.get("at") or {}
    seen = {}
    for j in ctx.sweep.jobs:
        if (j.finished or j.diverged) and all(same(j.value(k), v) for k, v in at.items()):
            if not j.knows(axis):
                continue
            v = j.value(axis)
            seen[fmt_value(v)] = v
    if not seen:
        raise NotCovered(f"the sweep has no axis {axis} at {selector_text(at)}", "axis")
    if declared and declared != ALL_LEVELS:
        missing = [fmt_value(v) for v in declared if not any(same(x, v) for x in seen.values())]
        if missing:
            have = ", ".join(fmt_value(v) for v in sorted(seen.values(), key=value_sort_key))
            raise NotCovered(
                f"level(s) {', '.join(missing)} of {axis} missing at {selector_text(at)} (the sweep has {have})",
                "values",
            )
        return list(declared)
    return sorted(seen.values(), key=value_sort_key)


def _levels_check(part: Part) -> tuple[str, str] | None:
    vals = part.get("values")
    if vals in (None, ALL_LEVELS) or (isinstance(vals, list) and len(vals) >= 2):
        return None
    return "values", (
        "expected the list of levels the part reads (at least 2); fix: e.g. 'values: [1, 2, 4, 8]' or 'values: all'"
    )


def _equal_params(part: Part, arms: list[Arm]) -> None:
    """``equal_params: 0.05``: the part compares arms of equal size; parameter counts farther apart
    than that share make it :class:`NotCovered` (the setting cannot show what the part says)."""
    tol = part.get("equal_params")
    if tol is None:
        return
    counts = [a.params for a in arms]
    if any(c is None for c in counts):
        raise NotCovered("the part compares equal parameter counts, and these jobs record none", "equal_params")
    lo, hi = min(counts), max(counts)
    if hi > lo * (1 + float(tol)):
        raise NotCovered(
            f"the part compares equal parameter counts (within {float(tol):.0%}); these arms have "
            f"{lo / 1e3:.4g} k to {hi / 1e3:.4g} k",
            "equal_params",
        )


def trend(part: Part, ctx: Context) -> PartResult:
    """Along ``axis`` at the declared ``values``: ``shape: monotone`` (each step better) or ``shape:
    diminishing`` (gains per unit shrink: ``per: parameter | value | doubling | step``)."""
    axis = str(part.get("axis"))
    values = _axis_values(ctx, part)
    if len(values) < (3 if part.get("shape") == "diminishing" else 2):
        raise NotCovered(
            f"the sweep has {len(values)} value(s) of {axis} at {selector_text(part.get('at') or {})}", "axis"
        )
    arms = [_arm(ctx, part, "axis", {axis: v}, f"{axis}={fmt_value(v)}") for v in values]
    _equal_params(part, arms)
    hb = _hb(part)
    if part.get("shape") == "diminishing":
        return _diminishing(part, arms, values, hb)
    steps, step_names = [], []
    k_steps = len(arms) - 1  # every step must be shown: each one's detectable effect is at 80 % ** (1 / k)
    for lo_arm, hi_arm in zip(arms, arms[1:], strict=False):
        step = f"{fmt_value(hi_arm.name.split('=')[-1])} vs {fmt_value(lo_arm.name.split('=')[-1])}"
        step_names.append(f"{hi_arm.name} vs {lo_arm.name}")
        sub = replace(part, spec={**part.spec, "test": "superiority", "label": f"{part.label} {step}"})
        if _ranked([hi_arm, lo_arm]):
            steps.append(_diverged_result(sub, [hi_arm, lo_arm], [1.0, -1.0], 0.0, None, k_steps))
            continue
        if len(lo_arm.values) < 2 or len(hi_arm.values) < 2:  # diverged seeds and not ranked: fewer than 2
            steps.append(_few_result(sub, [hi_arm, lo_arm], 0.0))
            continue
        iv = welch(hi_arm.values, lo_arm.values)
        lo, d, hi = _oriented(iv, hb)
        v = _decide(lo, hi, 0.0)
        if v == NOT_SUPPORTED and k_steps > 1:
            # one refuted step refutes the trend: each step refutes at α / (number of steps) (Bonferroni)
            strict = welch(hi_arm.values, lo_arm.values, 1 - (1 - CONFIDENCE) / k_steps)
            if _oriented(strict, hb)[2] >= 0.0:
                v = INCONCLUSIVE
        words = {
            SUPPORTED: reason("better", a=hi_arm.name, b=lo_arm.name, by=""),
            NOT_SUPPORTED: reason("not better", a=hi_arm.name, b=lo_arm.name, by=""),
            INCONCLUSIVE: reason("within noise", boundary="0"),
        }
        r = result(sub, v, words[v], estimate=d, lo=lo, hi=hi, confidence=iv.confidence)
        steps.append(finish(sub, r, [hi_arm, lo_arm], 0.0, (iv.se, iv.df), detect={"tests": k_steps}))
    worst = min(steps, key=lambda s: s.lo if s.lo is not None else -math.inf)
    verdict = _every([s.verdict for s in steps])  # a failing or open trend names the steps that make it so
    listed = "; ".join(f"{n}: {s.reason}" for n, s in zip(step_names, steps, strict=True) if s.verdict == verdict)
    why = {
        SUPPORTED: reason("every step", axis=axis),
        NOT_SUPPORTED: reason("a step fails", steps=listed),
        INCONCLUSIVE: reason("steps open", steps=listed),
    }[verdict]
    res = result(part, verdict, why, estimate=worst.estimate, lo=worst.lo, hi=worst.hi, confidence=worst.confidence)
    res.scale = worst.scale
    res.arms = arms
    res.detectable = max((s.detectable for s in steps if s.detectable is not None), default=None)
    res.evidence = [a.text() for a in arms] + [
        f"step {n}: Δ {s.interval_text()} → {s.verdict}"
        + (f" ({'; '.join(s.problems)})" if s.problems else "")
        + (f" [{'; '.join(s.caveats)}]" if s.caveats else "")
        for n, s in zip(step_names, steps, strict=True)
    ]
    res.evidence += [e for s in steps for e in s.evidence if e.startswith(("trend:", "~", "more than 1000"))]
    res.stability = next((s.stability for s in steps if s.stability is not None), None)
    res.problems = sorted({p for s in steps for p in s.problems})
    res.caveats = sorted({c for s in steps for c in s.caveats})
    needed = [s.seeds_needed for s in steps if s.seeds_needed is not None and s.verdict == INCONCLUSIVE]
    res.seeds_needed = max(needed) if needed and verdict == INCONCLUSIVE else None
    if res.detectable is not None:
        res.evidence.append(f"detectable effect at 80 % power (the weakest step): |Δ| ≥ {res.detectable:.3g}")
    return res


def _trend_check(part: Part) -> tuple[str, str] | None:
    problem = _needs("axis metric shape")(part)
    if problem:
        return problem
    if part.get("values") is None:
        return "values", (
            "a trend names the levels it needs; fix: add 'values: [1, 2, 4, 8]' (the levels, in order) or "
            "'values: all' (every level the sweep has)"
        )
    return _levels_check(part)


trend.check = _trend_check


def _unit(part: Part, arms: list[Arm], values: list[Any], i: int) -> float:
    per = part.get("per") or "step"
    if per == "parameter":
        p0, p1 = arms[i].params, arms[i + 1].params
        if not p0 or not p1 or p1 <= p0:
            raise NotCovered("per: parameter needs increasing parameter counts (params.total in metrics.json)", "per")
        return (p1 - p0) / 1e6
    if per == "value":
        return float(values[i + 1]) - float(values[i])
    if per == "doubling":
        return math.log2(float(values[i + 1]) / float(values[i]))
    return 1.0


def _diminishing(part: Part, arms: list[Arm], values: list[Any], hb: bool) -> PartResult:
    per = part.get("per") or "step"
    unit = {"parameter": "per million parameters", "value": "per unit of the axis", "doubling": "per doubling"}.get(
        per, "per step"
    )
    d = [_unit(part, arms, values, i) for i in range(len(arms) - 1)]
    sign = 1.0 if hb else -1.0
    pairs, strict = [], []
    for i in range(len(arms) - 2):
        trio = arms[i : i + 3]
        if any(len(x.values) < 2 or x.diverged for x in trio):
            continue
        # gain(i) − gain(i+1), each gain oriented (positive: better) and per unit: positive when they shrink
        w = [-sign / d[i], sign / d[i] + sign / d[i + 1], -sign / d[i + 1]]
        iv = contrast([x.values for x in trio], w)
        gains = [sign * (trio[k + 1].mean - trio[k].mean) / d[i + k] for k in range(2)]
        pairs.append((i, iv, gains))
        strict.append(contrast([x.values for x in trio], w, 1 - (1 - CONFIDENCE) / max(1, len(arms) - 2)))
    if not pairs:
        return _few_result(part, arms, None)
    # support needs every pair; one pair refutes, each at α / (number of pairs) (Bonferroni)
    verdicts = [
        v if v != NOT_SUPPORTED or st.hi < 0.0 else INCONCLUSIVE
        for v, st in zip((_decide(iv.lo, iv.hi, 0.0) for _, iv, _ in pairs), strict, strict=True)
    ]
    names = [f"{fmt_value(values[i])}→{fmt_value(values[i + 1])}→{fmt_value(values[i + 2])}" for i, _, _ in pairs]
    verdict = _every(verdicts)
    where = ", ".join(n for n, v in zip(names, verdicts, strict=True) if v == verdict)
    why = {
        SUPPORTED: reason("gains shrink", unit=unit, axis=part.get("axis")),
        NOT_SUPPORTED: reason("gain grows", where=where),
        INCONCLUSIVE: reason("gains open", where=where),
    }[verdict]
    worst = min(pairs, key=lambda p: p[1].lo)
    res = result(
        part, verdict, why, estimate=worst[1].delta, lo=worst[1].lo, hi=worst[1].hi, confidence=worst[1].confidence
    )
    for n, (_, iv, gains), v in zip(names, pairs, verdicts, strict=True):
        res.evidence.append(
            f"{n}: gains {unit} {gains[0]:+.3g} then {gains[1]:+.3g}; their difference {iv.delta:+.3g} "
            f"[95 % {iv.lo:+.3g}, {iv.hi:+.3g}] → {v}"
        )
    res.evidence.append("decided on the final values (a contrast of three settings: no second-half trend)")
    w = [1.0, -2.0, 1.0]
    return finish(part, res, arms[worst[0] : worst[0] + 3], None, (worst[1].se, worst[1].df), w, {"tests": len(pairs)})


def _reaches(v: float, level: float, hb: bool) -> bool:
    return v >= level if hb else v <= level


def threshold(part: Part, ctx: Context) -> PartResult:
    """Seeds reaching ``level``: ``mode: count`` (k of n in every setting) or ``mode: steps`` (steps to
    reach it, censored, and how they grow from ``from_value`` to ``to_value`` of ``axis``)."""
    if part.get("mode", "count") == "steps":
        return _steps(part, ctx)
    level, hb = float(part.get("level")), _hb(part)
    if part.get("axis"):
        axis = str(part.get("axis"))
        arms = [_arm(ctx, part, "axis", {axis: v}, f"{axis}={fmt_value(v)}") for v in _axis_values(ctx, part)]
    else:
        arms = [_arm(ctx, part, "a")]
    _equal_params(part, arms)
    miss = part.get("expect") == "miss"
    word = "miss" if miss else "reach"
    rows, short, open_ = [], [], []
    for x in arms:
        reached = stopped = 0
        n = len(x.jobs)  # an arm's jobs are its finished and diverged ones
        for j in x.jobs:
            v = job_value(j, str(part.metric)) if j.finished else None
            if v is not None and math.isfinite(v) and _reaches(v, level, hb):
                reached += 1
            elif j.diverged or _stopped_early(j):
                stopped += 1  # censored at its stop: it might have reached the level with its budget
        ran_out = n - reached - stopped  # ran the whole budget without reaching the level
        count, could = (ran_out, ran_out + stopped) if miss else (reached, reached + stopped)
        spec = part.get("need", "majority")
        need = n if spec == "all" else n // 2 + 1 if spec == "majority" else int(spec)
        rows.append(
            f"{x.name}: {reached} of {n} seeds reach {level:g}, {ran_out} ran the budget without, {stopped} "
            f"stopped early without (censored) ({word} needed in {need})"
        )
        if could < need:
            short.append(f"{x.name}: {count} of {n} {word}")
        elif count < need:
            open_.append(f"{x.name}: {stopped} of {n}")
    ns = [len(x.jobs) for x in arms]
    if min(ns, default=0) < MIN_SEEDS:
        verdict, why = INCONCLUSIVE, reason("count few", fewest=min(ns, default=0), need=MIN_SEEDS)
    elif short:
        verdict, why = NOT_SUPPORTED, reason("count short", word=word, level=f"{level:g}", short="; ".join(short))
    elif open_:
        verdict, why = INCONCLUSIVE, reason("count censored", censored="; ".join(open_), level=f"{level:g}")
    else:
        verdict = SUPPORTED
        why = reason("count reached", word=word, level=f"{level:g}", need=part.get("need", "majority"))
    res = result(part, verdict, why)
    if verdict == INCONCLUSIVE and open_:
        res.problems.append("censored")
    res.arms = arms
    res.evidence = rows + [
        "a per-seed threshold counts seeds; a run that stopped before its budget (a plateau stop, a "
        "divergence) without reaching the level is censored at its stop: neither a reach nor a miss"
    ]
    return res


def _stopped_early(job: Any) -> bool:
    """Whether ``job`` ended before its step budget (``trainer.max_steps``): a plateau or early stop."""
    ms = ((job.config or {}).get("trainer") or {}).get("max_steps")
    return isinstance(ms, int) and ms > 0 and job.global_step is not None and job.global_step < ms


def _threshold_check(part: Part) -> tuple[str, str] | None:
    steps = _needs("axis from_value to_value", from_value="add 'from_value:' and 'to_value:' (values of axis)")
    problem = _needs("metric level")(part) or _levels_check(part)
    return problem or (steps(part) if part.get("mode") == "steps" else None)


threshold.check = _threshold_check


REACHED, AT_FIRST, CENSORED = "reached", "at first", "censored"
"""How a run's steps to a level are known: exactly, as "≤ its first validation", or as "≥ its last step"."""


def steps_to_level(job: Any, curve: str, level: float, hb: bool) -> tuple[float, str] | None:
    """``(step, how)``: the first validation step at which ``curve`` reaches ``level`` (:data:`REACHED`, or
    :data:`AT_FIRST` at the run's first validation), or the job's last validation step with :data:`CENSORED`
    (it stopped before reaching it); ``None`` without a curve."""
    xs, ys = read_curves(job, (curve,)).get(curve, ([], []))
    if not xs:
        return None
    first = min(xs)
    for x, y in sorted(zip(xs, ys, strict=False)):
        if math.isfinite(y) and _reaches(y, level, hb):
            return x, AT_FIRST if x == first else REACHED
    return max(xs), CENSORED


def _cell(ctx: Context, part: Part, selector: dict, level: float, hb: bool) -> list[tuple[float, str]]:
    try:
        jobs = select(ctx.sweep, selector, "axis")
    except SelectionError as e:
        raise NotCovered(str(e), "axis") from e
    return [s for j in jobs if (s := steps_to_level(j, str(part.metric), level, hb)) is not None]


def _steps_text(s: float, how: str) -> str:
    return {REACHED: f"{s:g}", AT_FIRST: f"≤{s:g}", CENSORED: f"≥{s:g}"}[how]


def _steps_row(name: str, got: list[tuple[float, str]], level: float) -> str:
    reached = sum(how != CENSORED for _, how in got)
    ordered = sorted(got)
    med = ordered[len(got) // 2] if got else None
    return (
        f"{name}: {reached} of {len(got)} seeds reach {level:g}; steps "
        + ", ".join(_steps_text(s, how) for s, how in ordered)
        + (f" (median {_steps_text(*med)})" if med else "")
    )


def _steps(part: Part, ctx: Context) -> PartResult:
    """Steps to reach ``level``, censored both ways: the growth of log2(steps) from ``from_value`` to
    ``to_value`` of ``axis`` at ``at``, minus the same growth at ``versus`` when given, against
    log2(``factor``). A run that never reaches the level enters at its last step (a lower bound), one that
    reaches it at its first validation at that step (an upper bound); an interval bound is read only where
    every censored value pushes the estimate away from it."""
    axis, level, hb = str(part.get("axis")), float(part.get("level")), _hb(part)
    values = _axis_values(ctx, part)
    have = {fmt_value(v) for v in values}
    for k in ("from_value", "to_value"):
        if fmt_value(part.get(k)) not in have:
            raise NotCovered(
                f"the sweep has {axis} ∈ {{{', '.join(fmt_value(v) for v in values)}}} at "
                f"{selector_text(part.get('at') or {})}; the part reads {axis}={fmt_value(part.get(k))}",
                k,
            )
    at, versus = dict(part.get("at") or {}), part.get("versus")
    lo_v, hi_v = part.get("from_value"), part.get("to_value")
    cells = [(1.0, {**at, axis: hi_v}), (-1.0, {**at, axis: lo_v})]
    if versus:
        cells += [(-1.0, {**versus, axis: hi_v}), (1.0, {**versus, axis: lo_v})]
    got = [_cell(ctx, part, sel, level, hb) for _, sel in cells]
    names = [selector_text(sel) for _, sel in cells]
    res = result(part, INCONCLUSIVE, "")
    res.metric = f"log2(steps to {part.metric} {'≥' if hb else '≤'} {level:g})"
    res.arms = [Arm(n, [math.log2(max(s, 1.0)) for s, _ in g]) for n, g in zip(names, got, strict=True)]
    res.evidence = (
        [_steps_row(n, g, level) for n, g in zip(names, got, strict=True)]
        if versus
        else [_steps_row(f"{axis}={fmt_value(v)}", _cell(ctx, part, {**at, axis: v}, level, hb), level) for v in values]
    )
    res.evidence.append(
        "a run that never reaches the level enters at its last step (≥: stopped on a plateau, diverged or at "
        "the budget), one that reaches it at its first validation at that step (≤): bounds, not measurements"
    )
    if any(len(g) < MIN_SEEDS for g in got):
        res.reason = reason("steps few", metric=part.metric, need=MIN_SEEDS, cells=", ".join(names))
        res.problems.append("too few seeds")
        return res
    iv = contrast([a.values for a in res.arms], [w for w, _ in cells])
    res.estimate, res.lo, res.hi, res.confidence = iv.delta, iv.lo, iv.hi, iv.confidence
    res.detectable = detectable_planned(iv.se, iv.df) if iv.se > 0 else 0.0
    # a lower bound (censored) pushes the estimate down where its weight is positive; an upper bound
    # (reached at the first validation) pushes it up there
    hows = [(w, how) for (w, _), g in zip(cells, got, strict=True) for _, how in g]
    lower_ok = not any((how == CENSORED and w < 0) or (how == AT_FIRST and w > 0) for w, how in hows)
    upper_ok = not any((how == CENSORED and w > 0) or (how == AT_FIRST and w < 0) for w, how in hows)
    n_left = sum(how == AT_FIRST for _, how in hows)
    n_right = sum(how == CENSORED for _, how in hows)
    factor = float(part.get("factor", 2.0))
    g = math.log2(factor)
    what = "the growth of steps" + (f" minus its growth at {selector_text(versus)}" if versus else "")
    growth = (
        f"{what} from {axis}={fmt_value(lo_v)} to {fmt_value(hi_v)}: ×{2**iv.delta:.3g} "
        f"[95 % ×{2**iv.lo:.3g}, ×{2**iv.hi:.3g}]"
    )
    bounds_words = (
        f" ({n_right} run(s) never reaching it and {n_left} reaching it at the first validation leave the "
        "deciding bound unknown)"
    )
    more = (iv.lo > g and lower_ok, reason("growth more", growth=growth, factor=f"{factor:g}"))
    at_most = (iv.hi <= g and upper_ok, reason("growth at most", growth=growth, factor=f"{factor:g}"))
    grows = part.get("expect", "grows") == "grows"  # supported when the growth is shown as expected
    first, second = (more, at_most) if grows else (at_most, more)
    if first[0]:
        res.verdict, res.reason = SUPPORTED, first[1]
    elif second[0]:
        res.verdict, res.reason = NOT_SUPPORTED, second[1]
    else:
        unknown = bounds_words if (iv.lo > g and not lower_ok) or (iv.hi <= g and not upper_ok) else ""
        side = "beyond" if grows else "within"
        res.reason = reason("growth open", growth=growth, side=side, factor=f"{factor:g}", censored=unknown)
    if n_left or n_right:
        res.problems += ["censored"] if res.verdict == INCONCLUSIVE and (not lower_ok or not upper_ok) else []
    sd = _pooled_sd(res.arms)
    straddles = iv.lo <= g < iv.hi  # where the interval already decides, censoring, not seeds, holds it back
    if res.verdict == INCONCLUSIVE and sd and straddles and abs(iv.delta - g) > 0:
        res.seeds_needed = seeds_for(sd, [w for w, _ in cells], abs(iv.delta - g))
        words = f"~{res.seeds_needed}" if res.seeds_needed <= 1000 else "more than 1000"
        res.evidence.append(
            f"{words} seeds a side would decide it (80 % power at the growth observed against ×{factor:g}, "
            f"seed spread {sd:.3g} in log2 steps)"
            + ("; censored runs would still bound one side" if "censored" in res.problems else "")
        )
    return res


def quantity(part: Part, ctx: Context) -> PartResult:
    """A measured or counted number (``measure``, a function of :mod:`.measures`, with ``args``)
    within ``target ± tolerance`` (not supported beyond ``refute_beyond``, default ``tolerance``), or
    at least ``at_least``."""
    fn = getattr(measures, str(part.get("measure")), None) if "." not in str(part.get("measure")) else None
    if fn is None:
        fn, _ = import_target(str(part.get("measure")))
    found = fn(ctx, **(part.get("args") or {}))
    if not found:
        raise NotCovered(f"nothing to measure: {part.get('measure')} found no value here", "measure")
    rows = [f"{label}: {v:.4g}" for label, v in found]
    if part.get("at_least") is not None:
        floor = float(part.get("at_least"))
        low = [f"{label} = {v:.3g}" for label, v in found if v < floor]
        verdict = NOT_SUPPORTED if low else SUPPORTED
        why = reason("below", floor=f"{floor:g}", low=", ".join(low)) if low else reason("at least", floor=f"{floor:g}")
    else:
        target, tol = float(part.get("target")), float(part.get("tolerance"))
        far = float(part.get("refute_beyond", tol))
        dev = [(label, v - target) for label, v in found]
        bad = [f"{label} {d:+.3g}" for label, d in dev if abs(d) > far]
        ok = all(abs(d) <= tol for _, d in dev)
        verdict = NOT_SUPPORTED if bad else SUPPORTED if ok else INCONCLUSIVE
        worst = max(dev, key=lambda x: abs(x[1]))
        t, w = f"{target:g}", f"{worst[1]:+.3g}"
        why = {
            NOT_SUPPORTED: reason("quantity off", target=t, far=f"{far:g}", bad=", ".join(bad)),
            SUPPORTED: reason("quantity within", target=t, tol=f"{tol:g}", worst=w),
            INCONCLUSIVE: reason("quantity between", tol=f"{tol:g}", far=f"{far:g}", target=t, worst=f"{worst[0]} {w}"),
        }[verdict]
    res = result(part, verdict, why, estimate=found[0][1])
    res.evidence = rows + ["a measured or counted number: no seeds, no interval"]
    return res


quantity.check = _needs("measure")


BUILTIN = {f.__name__: f for f in vars(sys.modules[__name__]).values() if inspect.isfunction(f) and hasattr(f, "check")}
NAMES = tuple(sorted(BUILTIN))
"""The built-in test types by name."""


def test_type(name: str) -> Callable | None:
    """The test function named ``name`` (a built-in by its name, or any by its dotted path); ``None``
    when there is none."""
    if "." in name:
        try:
            fn, _ = import_target(name)
        except Exception:  # noqa: BLE001 - an unimportable path is an unknown test type
            return None
        return fn if callable(fn) else None
    return BUILTIN.get(name)
