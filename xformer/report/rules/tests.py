"""The test types a claim's parts are decided by: one module-level function each, named as in the
declarations (``test: superiority``); a dotted path (``test: mypkg.tests.my_test``) selects one
defined elsewhere with the same signature ``(part, ctx) -> PartResult`` and a ``check`` attribute.

Every decision reads an interval, never a point estimate against a threshold alone:

- ``superiority``: arm ``a`` better than ``b`` (by more than ``margin``, default 0): Welch's 95 %
  interval of Δ (a's improvement) above the margin → supported; below it → not supported; else
  inconclusive, or not supported when the interval excludes the ``published_effect`` (an informative
  null), or *underpowered* when the seeds could not have detected it.
- ``non_inferiority``: ``a`` not worse than ``b`` by more than ``margin`` (required): the interval
  above −margin → supported; below it → not supported; else inconclusive.
- ``equivalence``: |a − b| < ``margin`` (required): the 90 % interval inside ±margin (two one-sided
  tests) → supported; the 95 % interval entirely outside → not supported; else inconclusive.
- ``contrast``: Σ wᵢ·mean(armᵢ) (``terms``: ``[{weight: 1, arm: {...}}, ...]``, e.g. an interaction)
  above ``margin`` (default 0), Welch–Satterthwaite interval, decided as ``superiority``.
- ``trend``: along ``axis`` (at the settings ``at``): ``shape: monotone`` every successive value
  better than the one before (each step a superiority); ``shape: diminishing`` the successive gains
  per unit (``per: parameter`` (per million), ``value``, ``doubling`` or ``step``) shrink, each pair of
  neighbouring gains a contrast.
- ``threshold``: ``mode: count``: in every setting (``a``, or each value of ``axis``) at least
  ``need`` seeds (``all``, ``majority``, a number) reach ``level``; ``mode: steps``: the steps a run
  needs to reach ``level`` on its validation curve (censored at its last step when it never does),
  compared between ``from_value`` and ``to_value`` of ``axis`` as a growth factor: ``expect: grows``
  (by more than ``factor``) or ``expect: flat`` (by at most ``factor``), on log2(steps) per seed.
- ``quantity``: a measured or counted number (``measure``: a function of :mod:`.measures`) within
  ``target ± tolerance`` (not supported beyond ``refute_beyond``), or at least ``at_least``.

Checks every comparison gets (:func:`finish`): each arm needs :data:`MIN_SEEDS` seeds that count (a
diverged seed counts, as its setting's worst outcome: :func:`.evidence.worst_value`); a saturated
bounded metric makes a supported or undecided part inconclusive but never a refutation; a decided
part is checked over the second half of training (:mod:`.stability`); every part states its
detectable effect at 80 % power.
"""

from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable

from xformer.config_types import import_target

from ..aggregate import Sweep, fmt_value, read_curves, value_sort_key
from ..stats import CONFIDENCE, contrast, detectable_for, seeds_needed, welch
from . import measures
from .evidence import Arm, SelectionError, arm, bounds, higher_is_better, job_value, same, select, selector_text
from .part import Part
from .results import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, PartResult, Status
from .stability import check as stability_check

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


def _needs(*keys: str, hint: dict | None = None) -> Callable[[Part], tuple[str, str] | None]:
    """A declaration check: each of ``keys`` present (``hint``: the fix per key)."""

    def check(part: Part) -> tuple[str, str] | None:
        for k in keys:
            if part.get(k) is None:
                fix = (hint or {}).get(k) or f"add '{k}: ...'"
                return k, f"{part.test} needs '{k}'; fix: {fix}"
        return None

    return check


# -- shared pieces ------------------------------------------------------------------------------------
def _arm(ctx: Context, part: Part, key: str, selector: dict | None = None, name: str | None = None) -> Arm:
    sel = part.get(key) if selector is None else selector
    try:
        return arm(ctx.sweep, {**(part.get("at") or {}), **sel}, str(part.metric), name, key)
    except SelectionError as e:
        raise NotCovered(str(e), e.key) from e


def _oriented(iv_lo: float, iv_delta: float, iv_hi: float, hb: bool) -> tuple[float, float, float]:
    return (iv_lo, iv_delta, iv_hi) if hb else (-iv_hi, -iv_delta, -iv_lo)


def _hb(part: Part) -> bool:
    better = part.get("better")
    return better == "higher" if better in ("higher", "lower") else higher_is_better(str(part.metric))


def _base(part: Part, verdict: Status, reason: str, **kw: Any) -> PartResult:
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


def _few(arms: list[Arm]) -> list[str]:
    return [f"{a.name}: {a.n} seed(s)" for a in arms if a.n < MIN_SEEDS]


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


def finish(
    part: Part,
    res: PartResult,
    arms: list[Arm],
    terms: list[tuple[float, list]] | None,
    boundary: float | None,
    se_df: tuple[float, float] | None,
) -> PartResult:
    """The checks every comparison gets: seeds, saturation, power, the second-half check (``terms``:
    the weighted arms' jobs; ``boundary``: what Δ was decided against; ``se_df``: Δ's standard error
    and degrees of freedom, for the detectable effect)."""
    res.arms = arms
    res.evidence = [a.text() for a in arms] + res.evidence
    if se_df is not None and se_df[0] > 0:
        res.detectable = detectable_for(*se_df)
    elif se_df is not None:
        res.detectable = 0.0
    if res.detectable is not None:
        res.evidence.append(f"detectable effect at 80 % power: |Δ| ≥ {res.detectable:.3g} ({res.metric})")
    few = _few(arms)
    if few:
        res.problems.append("too few seeds")
        res.reason = (
            f"too few seeds ({'; '.join(few)}; needs ≥ {MIN_SEEDS}); the interval alone would say: {res.verdict}"
        )
        res.verdict = INCONCLUSIVE
        return res
    sat = saturated(str(part.metric), arms)
    if sat and res.verdict != NOT_SUPPORTED:
        res.problems.append("saturated")
        res.reason = f"{sat}: it cannot separate the arms (the interval alone would say: {res.verdict})"
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
        sd = _pooled_sd(arms)
        n = seeds_needed(sd, effect) if sd is not None else None
        res.problems.append("underpowered")
        res.reason = (
            f"underpowered: the seeds detect only |Δ| ≥ {res.detectable:.3g} at 80 % power, above the published "
            f"effect {abs(effect):.3g}" + (f"; ~{n} seeds an arm would detect it" if n else "")
        )
    if terms is not None and boundary is not None and res.verdict in (SUPPORTED, NOT_SUPPORTED):
        side = 1.0 if (res.estimate or 0.0) > boundary else -1.0
        st = stability_check(terms, str(part.metric), boundary, side, part.label)
        res.stability = st
        if st is not None:
            res.evidence.append(f"stability: {st.text}")
            if st.blocks:
                res.problems.append(st.outcome)
                res.reason = f"{st.outcome} over the second half of training (the final interval alone: {res.verdict})"
                res.verdict = INCONCLUSIVE
    return res


def _pooled_sd(arms: list[Arm]) -> float | None:
    num, den = 0.0, 0
    for a in arms:
        if a.n > 1:
            m = a.mean
            num += sum((v - m) ** 2 for v in a.values)
            den += a.n - 1
    return math.sqrt(num / den) if den else None


def _two(part: Part, ctx: Context, confidence: float = CONFIDENCE) -> tuple[Arm, Arm, tuple[float, float, float], Any]:
    a, b = _arm(ctx, part, "a"), _arm(ctx, part, "b")
    if a.n < 2 or b.n < 2:
        return a, b, (math.nan, math.nan, math.nan), None
    iv = welch(a.values, b.values, confidence)
    return a, b, _oriented(iv.lo, iv.delta, iv.hi, _hb(part)), iv


def _margin(part: Part, ref: Arm) -> float:
    m = part.margin
    return m.resolve(ref.mean) if m is not None else 0.0


def _few_result(part: Part, arms: list[Arm], delta: float, margin: float | None) -> PartResult:
    res = _base(part, INCONCLUSIVE, "", estimate=None if math.isnan(delta) else delta, margin=margin)
    return finish(part, res, arms, None, None, None)


# -- the test types ---------------------------------------------------------------------------------
def superiority(part: Part, ctx: Context) -> PartResult:
    """Arm ``a`` better than ``b`` by more than ``margin`` (default 0) on ``metric``."""
    a, b, (lo, d, hi), iv = _two(part, ctx)
    m = _margin(part, b)
    if iv is None:
        return _few_result(part, [a, b], d, m)
    verdict = _decide(lo, hi, m)
    words = {
        SUPPORTED: f"{a.name} is better than {b.name}" + (f" by more than {m:.3g}" if m else ""),
        NOT_SUPPORTED: f"{a.name} is not better than {b.name}"
        + (f" by {m:.3g}" if m else "")
        + ": the interval lies below",
        INCONCLUSIVE: "within the noise: the interval contains " + (f"{m:.3g}" if m else "0"),
    }
    res = _base(part, verdict, words[verdict], estimate=d, lo=lo, hi=hi, confidence=iv.confidence, margin=m or None)
    effect = part.published_effect
    boundary = m
    if verdict == INCONCLUSIVE and effect is not None and effect > m and hi < effect:
        res.verdict, boundary = NOT_SUPPORTED, effect
        res.reason = (
            f"the interval [{lo:+.3g}, {hi:+.3g}] excludes the published effect {effect:+.3g}: an effect that large "
            f"is ruled out at this budget"
        )
    return finish(part, res, [a, b], [(1.0, a.jobs), (-1.0, b.jobs)], boundary, (iv.se, iv.df))


superiority.check = _needs("a", "b", "metric")


def non_inferiority(part: Part, ctx: Context) -> PartResult:
    """Arm ``a`` not worse than ``b`` by more than ``margin`` (required): the interval's lower bound
    against −margin."""
    a, b, (lo, d, hi), iv = _two(part, ctx)
    m = _margin(part, b)
    if iv is None:
        return _few_result(part, [a, b], d, m)
    verdict = _decide(lo, hi, -m)
    words = {
        SUPPORTED: f"{a.name} is at worst {-lo:.3g} worse than {b.name}, inside the margin {m:.3g}",
        NOT_SUPPORTED: f"{a.name} is worse than {b.name} by more than the margin {m:.3g}",
        INCONCLUSIVE: f"the interval straddles −{m:.3g}: neither shown within the margin nor beyond it",
    }
    res = _base(part, verdict, words[verdict], estimate=d, lo=lo, hi=hi, confidence=iv.confidence, margin=m)
    return finish(part, res, [a, b], [(1.0, a.jobs), (-1.0, b.jobs)], -m, (iv.se, iv.df))


non_inferiority.check = _needs(
    "a",
    "b",
    "metric",
    "margin",
    hint={
        "margin": "add 'margin: <the largest acceptable deficit, in the metric's units, or a percentage such as "
        "1%>' and 'margin_source: <where it comes from>', decided before looking at the data"
    },
)


def equivalence(part: Part, ctx: Context) -> PartResult:
    """|a − b| < ``margin`` (required): two one-sided tests (the 90 % interval inside ±margin);
    not supported only when the 95 % interval lies entirely outside ±margin."""
    a, b, (lo95, d, hi95), iv = _two(part, ctx)
    m = _margin(part, b)
    if iv is None:
        return _few_result(part, [a, b], d, m)
    iv90 = welch(a.values, b.values, 1 - 2 * (1 - CONFIDENCE))
    lo, _, hi = _oriented(iv90.lo, iv90.delta, iv90.hi, _hb(part))
    if -m < lo and hi < m:
        verdict, reason = SUPPORTED, f"the 90 % interval [{lo:+.3g}, {hi:+.3g}] lies inside ±{m:.3g}"
        boundary = m if d >= 0 else -m
    elif lo95 > m or hi95 < -m:
        verdict = NOT_SUPPORTED
        reason = f"the 95 % interval [{lo95:+.3g}, {hi95:+.3g}] lies entirely outside ±{m:.3g}"
        boundary = m if d > 0 else -m
    else:
        verdict, boundary = INCONCLUSIVE, None
        reason = f"the intervals straddle the margin ±{m:.3g}: neither equivalent nor different at this budget"
    res = _base(part, verdict, reason, estimate=d, lo=lo, hi=hi, confidence=iv90.confidence, margin=m)
    res.evidence.append(f"95 % interval [{lo95:+.3g}, {hi95:+.3g}]")
    return finish(part, res, [a, b], [(1.0, a.jobs), (-1.0, b.jobs)], boundary, (iv.se, iv.df))


equivalence.check = _needs(
    "a",
    "b",
    "metric",
    "margin",
    hint={"margin": "add 'margin: <the largest difference that counts as the same>' and 'margin_source: ...'"},
)


def contrast_test(part: Part, ctx: Context) -> PartResult:
    """Σ wᵢ·mean(armᵢ) above ``margin`` (default 0): ``terms: [{weight: w, arm: {...}}, ...]``."""
    raw = part.get("terms") or []
    arms = [_arm(ctx, part, "terms", dict(t.get("arm") or {}), t.get("name")) for t in raw]
    weights = [float(t.get("weight", 1.0)) for t in raw]
    m = _margin(part, arms[0]) if part.margin is not None and not part.margin.relative else 0.0
    if any(x.n < 2 for x in arms):
        return _few_result(part, arms, math.nan, m)
    iv = contrast([x.values for x in arms], weights)
    lo, d, hi = _oriented(iv.lo, iv.delta, iv.hi, _hb(part))
    verdict = _decide(lo, hi, m)
    words = {
        SUPPORTED: f"the contrast lies above {m:.3g}",
        NOT_SUPPORTED: f"the contrast lies below {m:.3g}",
        INCONCLUSIVE: f"within the noise: the interval contains {m:.3g}",
    }
    res = _base(part, verdict, words[verdict], estimate=d, lo=lo, hi=hi, confidence=iv.confidence, margin=m or None)
    res.evidence.append("contrast: " + " ".join(f"{w:+g}·[{x.name}]" for w, x in zip(weights, arms, strict=True)))
    return finish(part, res, arms, [(w, x.jobs) for w, x in zip(weights, arms, strict=True)], m, (iv.se, iv.df))


contrast_test.check = _needs("terms", "metric")
contrast_test.__name__ = "contrast"


def _axis_values(ctx: Context, part: Part) -> list[Any]:
    axis = str(part.get("axis"))
    declared = part.get("values")
    if declared:
        return list(declared)
    at = part.get("at") or {}
    seen = {}
    for j in ctx.sweep.jobs:
        if (j.finished or j.diverged) and all(same(j.value(k), v) for k, v in at.items()):
            v = j.value(axis)
            seen[fmt_value(v)] = v
    return sorted(seen.values(), key=value_sort_key)


def trend(part: Part, ctx: Context) -> PartResult:
    """Along ``axis``: ``shape: monotone`` (each step better) or ``shape: diminishing`` (gains per
    unit shrink: ``per: parameter | value | doubling | step``)."""
    axis = str(part.get("axis"))
    values = _axis_values(ctx, part)
    if len(values) < (3 if part.get("shape") == "diminishing" else 2):
        raise NotCovered(
            f"the sweep has {len(values)} value(s) of {axis} at {selector_text(part.get('at') or {})}", "axis"
        )
    arms = [_arm(ctx, part, "axis", {axis: v}, f"{axis}={fmt_value(v)}") for v in values]
    hb = _hb(part)
    if part.get("shape") == "diminishing":
        return _diminishing(part, arms, values, hb)
    steps = []
    for lo_arm, hi_arm in zip(arms, arms[1:], strict=False):
        step = f"{part.label} {fmt_value(hi_arm.name.split('=')[-1])} vs {fmt_value(lo_arm.name.split('=')[-1])}"
        sub = Part(part.claim, part.index, {**part.spec, "test": "superiority", "label": step}, part.file)
        if lo_arm.n < 2 or hi_arm.n < 2:
            steps.append(_few_result(sub, [hi_arm, lo_arm], math.nan, 0.0))
            continue
        iv = welch(hi_arm.values, lo_arm.values)
        lo, d, hi = _oriented(iv.lo, iv.delta, iv.hi, hb)
        r = _base(
            sub,
            _decide(lo, hi, 0.0),
            f"{hi_arm.name} vs {lo_arm.name}",
            estimate=d,
            lo=lo,
            hi=hi,
            confidence=iv.confidence,
        )
        steps.append(finish(sub, r, [hi_arm, lo_arm], [(1.0, hi_arm.jobs), (-1.0, lo_arm.jobs)], 0.0, (iv.se, iv.df)))
    worst = min(steps, key=lambda s: s.lo if s.lo is not None else -math.inf)
    verdicts = [s.verdict for s in steps]
    if all(v == SUPPORTED for v in verdicts):
        verdict, reason = SUPPORTED, f"every step along {axis} is better than the one before"
    elif any(v == NOT_SUPPORTED for v in verdicts):
        bad = [s.reason for s in steps if s.verdict == NOT_SUPPORTED]
        verdict, reason = NOT_SUPPORTED, "a step is not better: " + "; ".join(bad)
    else:
        open_ = [
            f"{s.reason} ({s.verdict}{': ' + s.problems[0] if s.problems else ''})"
            for s in steps
            if s.verdict != SUPPORTED
        ]
        verdict, reason = INCONCLUSIVE, "not every step is decided: " + "; ".join(open_)
    res = _base(part, verdict, reason, estimate=worst.estimate, lo=worst.lo, hi=worst.hi, confidence=worst.confidence)
    res.arms = arms
    res.detectable = max((s.detectable for s in steps if s.detectable is not None), default=None)
    res.evidence = [a.text() for a in arms] + [
        f"step {s.reason}: Δ {s.interval_text()} → {s.verdict}" + (f" ({'; '.join(s.problems)})" if s.problems else "")
        for s in steps
    ]
    res.evidence += [e for s in steps for e in s.evidence if e.startswith("stability:")]
    stab = [s.stability for s in steps if s.stability is not None]
    res.stability = stab[0] if stab else None
    res.problems = sorted({p for s in steps for p in s.problems})
    if res.detectable is not None:
        res.evidence.append(f"detectable effect at 80 % power (the weakest step): |Δ| ≥ {res.detectable:.3g}")
    return res


trend.check = _needs("axis", "metric", "shape")


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
    pairs = []
    for i in range(len(arms) - 2):
        trio = arms[i : i + 3]
        if any(x.n < 2 for x in trio):
            continue
        # gain(i) − gain(i+1), each gain oriented (positive: better) and per unit: positive when they shrink
        w = [-sign / d[i], sign / d[i] + sign / d[i + 1], -sign / d[i + 1]]
        iv = contrast([x.values for x in trio], w)
        gains = [sign * (trio[k + 1].mean - trio[k].mean) / d[i + k] for k in range(2)]
        pairs.append((i, iv, gains))
    if not pairs:
        return _few_result(part, arms, math.nan, None)
    verdicts = [_decide(iv.lo, iv.hi, 0.0) for _, iv, _ in pairs]
    names = [f"{fmt_value(values[i])}→{fmt_value(values[i + 1])}→{fmt_value(values[i + 2])}" for i, _, _ in pairs]
    if all(v == SUPPORTED for v in verdicts):
        verdict, reason = SUPPORTED, f"the gains {unit} shrink at every step along {part.get('axis')}"
    elif any(v == NOT_SUPPORTED for v in verdicts):
        verdict = NOT_SUPPORTED
        reason = "the gain grows at " + ", ".join(n for n, v in zip(names, verdicts, strict=True) if v == NOT_SUPPORTED)
    else:
        verdict = INCONCLUSIVE
        reason = "within the noise at " + ", ".join(n for n, v in zip(names, verdicts, strict=True) if v != SUPPORTED)
    worst = min(pairs, key=lambda p: p[1].lo)
    res = _base(
        part, verdict, reason, estimate=worst[1].delta, lo=worst[1].lo, hi=worst[1].hi, confidence=worst[1].confidence
    )
    for n, (_, iv, gains), v in zip(names, pairs, verdicts, strict=True):
        res.evidence.append(
            f"{n}: gains {unit} {gains[0]:+.3g} then {gains[1]:+.3g}; their difference {iv.delta:+.3g} "
            f"[95 % {iv.lo:+.3g}, {iv.hi:+.3g}] → {v}"
        )
    res.evidence.append("decided on the final values (a contrast of three settings: no second-half check)")
    return finish(part, res, arms, None, None, (worst[1].se, worst[1].df))


def _need(part: Part, n: int) -> int:
    need = part.get("need", "majority")
    if need == "all":
        return n
    if need == "majority":
        return n // 2 + 1
    return int(need)


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
    miss = part.get("expect") == "miss"
    word = "miss" if miss else "reach"
    rows, short = [], []
    for x in arms:
        finished = [v for j in x.jobs if j.finished and (v := job_value(j, str(part.metric))) is not None]
        reached = sum(_reaches(v, level, hb) for v in finished if math.isfinite(v))
        n = len([j for j in x.jobs if j.finished or j.diverged])
        count = n - reached if miss else reached
        need = _need(part, n)
        rows.append(f"{x.name}: {reached} of {n} seeds reach {level:g} ({word} needed in {need})")
        if count < need:
            short.append(f"{x.name}: {count} of {n} {word}")
    ns = [len(x.jobs) for x in arms]
    if min(ns, default=0) < MIN_SEEDS:
        verdict, reason = INCONCLUSIVE, f"too few seeds (fewest: {min(ns, default=0)}; needs ≥ {MIN_SEEDS})"
    elif short:
        verdict, reason = NOT_SUPPORTED, f"too few seeds {word} {level:g}: " + "; ".join(short)
    else:
        verdict, reason = (
            SUPPORTED,
            f"enough seeds {word} {level:g} in every setting (need: {part.get('need', 'majority')})",
        )
    res = _base(part, verdict, reason)
    res.arms = arms
    res.evidence = rows + [
        "a per-seed threshold counts seeds (a diverged seed never reaches it); no mean is compared with it"
    ]
    return res


def _threshold_check(part: Part) -> tuple[str, str] | None:
    problem = _needs("metric", "level")(part)
    if problem is None and part.get("mode") == "steps":
        problem = _needs(
            "axis", "from_value", "to_value", hint={"from_value": "add 'from_value:' and 'to_value:' (values of axis)"}
        )(part)
    return problem


threshold.check = _threshold_check


def steps_to_level(job: Any, curve: str, level: float, hb: bool) -> tuple[float, bool] | None:
    """``(step, reached)``: the first validation step at which ``curve`` reaches ``level``, or the job's
    last validation step with ``reached`` False (censored there); ``None`` without a curve. A diverged
    job is censored at its last step."""
    xs, ys = read_curves(job, (curve,)).get(curve, ([], []))
    if not xs:
        return None
    for x, y in sorted(zip(xs, ys, strict=False)):
        if math.isfinite(y) and _reaches(y, level, hb):
            return x, True
    return max(xs), False


def _cell(ctx: Context, part: Part, selector: dict, level: float, hb: bool) -> list[tuple[float, bool]]:
    try:
        jobs = select(ctx.sweep, selector, "axis")
    except SelectionError as e:
        raise NotCovered(str(e), "axis") from e
    return [s for j in jobs if (s := steps_to_level(j, str(part.metric), level, hb)) is not None]


def _steps_row(name: str, got: list[tuple[float, bool]], level: float) -> str:
    reached = sum(ok for _, ok in got)
    ordered = sorted(got)
    med = ordered[len(got) // 2] if got else None
    return (
        f"{name}: {reached} of {len(got)} seeds reach {level:g}; steps "
        + ", ".join(f"{s:g}" if ok else f"≥{s:g}" for s, ok in ordered)
        + (f" (median {'' if med[1] else '≥'}{med[0]:g})" if med else "")
    )


def _steps(part: Part, ctx: Context) -> PartResult:
    """Steps to reach ``level``, censored: the growth of log2(steps) from ``from_value`` to ``to_value``
    of ``axis`` at ``at``, minus the same growth at ``versus`` when given (a contrast of growths),
    against log2(``factor``). A censored run enters at its last step, a lower bound: the interval's
    lower bound stays valid where only the positively weighted cells are censored, its upper bound
    where only the negatively weighted ones are."""
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
    res = _base(part, INCONCLUSIVE, "")
    res.metric = f"log2(steps to {part.metric} {'≥' if hb else '≤'} {level:g})"
    res.arms = [Arm(n, [math.log2(max(s, 1.0)) for s, _ in g]) for n, g in zip(names, got, strict=True)]
    res.evidence = [_steps_row(n, g, level) for n, g in zip(names, got, strict=True)]
    if versus is None:
        rows = []
        for v in values:
            g = _cell(ctx, part, {**at, axis: v}, level, hb)
            rows.append(_steps_row(f"{axis}={fmt_value(v)}", g, level))
        res.evidence = rows
    res.evidence.append(
        "a run that never reaches the level enters at its last step (stopped on a plateau or at the budget), "
        "a lower bound of the steps it needs"
    )
    if any(len(g) < MIN_SEEDS for g in got):
        res.reason = f"too few seeds with a {part.metric} curve (needs ≥ {MIN_SEEDS} in each of {', '.join(names)})"
        res.problems.append("too few seeds")
        return res
    iv = contrast([a.values for a in res.arms], [w for w, _ in cells])
    res.estimate, res.lo, res.hi, res.confidence = iv.delta, iv.lo, iv.hi, iv.confidence
    res.detectable = detectable_for(iv.se, iv.df) if iv.se > 0 else 0.0
    censored_pos = sum(not ok for (w, _), g in zip(cells, got, strict=True) if w > 0 for _, ok in g)
    censored_neg = sum(not ok for (w, _), g in zip(cells, got, strict=True) if w < 0 for _, ok in g)
    lower_ok, upper_ok = censored_neg == 0, censored_pos == 0
    factor = float(part.get("factor", 2.0))
    g = math.log2(factor)
    what = "the growth of steps" + (f" minus its growth at {selector_text(versus)}" if versus else "")
    growth = (
        f"{what} from {axis}={fmt_value(lo_v)} to {fmt_value(hi_v)}: ×{2**iv.delta:.3g} "
        f"[95 % ×{2**iv.lo:.3g}, ×{2**iv.hi:.3g}]"
    )
    censored = f" ({censored_pos + censored_neg} censored run(s) make the other bound unknown)"
    if part.get("expect", "grows") == "grows":
        if iv.lo > g and lower_ok:
            res.verdict, res.reason = SUPPORTED, f"{growth}: more than ×{factor:g}"
        elif iv.hi <= g and upper_ok:
            res.verdict, res.reason = NOT_SUPPORTED, f"{growth}: at most ×{factor:g}"
        else:
            res.reason = f"{growth}: not shown beyond ×{factor:g}" + (censored if not (lower_ok and upper_ok) else "")
    else:
        if iv.hi <= g and upper_ok:
            res.verdict, res.reason = SUPPORTED, f"{growth}: at most ×{factor:g}"
        elif iv.lo > g and lower_ok:
            res.verdict, res.reason = NOT_SUPPORTED, f"{growth}: more than ×{factor:g}"
        else:
            res.reason = f"{growth}: not shown within ×{factor:g}" + (censored if not (lower_ok and upper_ok) else "")
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
        reason = f"below {floor:g}: {', '.join(low)}" if low else f"every value ≥ {floor:g}"
    else:
        target, tol = float(part.get("target")), float(part.get("tolerance"))
        far = float(part.get("refute_beyond", tol))
        dev = [(label, v - target) for label, v in found]
        bad = [f"{label} {d:+.3g}" for label, d in dev if abs(d) > far]
        ok = all(abs(d) <= tol for _, d in dev)
        verdict = NOT_SUPPORTED if bad else SUPPORTED if ok else INCONCLUSIVE
        worst = max(dev, key=lambda x: abs(x[1]))
        reason = (
            f"off {target:g} by more than {far:g}: {', '.join(bad)}"
            if bad
            else f"every value within {target:g} ± {tol:g} (largest deviation {worst[1]:+.3g})"
            if ok
            else f"between ±{tol:g} and ±{far:g} of {target:g} (largest deviation {worst[0]} {worst[1]:+.3g})"
        )
    res = _base(part, verdict, reason, estimate=found[0][1])
    res.evidence = rows + ["a measured or counted number: no seeds, no interval"]
    return res


quantity.check = _needs("measure")


NAMES = tuple(
    sorted(
        getattr(f, "__name__", n)
        for n, f in vars(sys.modules[__name__]).items()
        if inspect.isfunction(f) and hasattr(f, "check")
    )
)
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
    for n, f in vars(sys.modules[__name__]).items():
        if inspect.isfunction(f) and hasattr(f, "check") and getattr(f, "__name__", n) == name:
            return f
    return None
