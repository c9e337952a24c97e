"""The second-half check of a comparison (rule (d) of :data:`xformer.report.catalog.COMMON_RULE`): is
the ranking of two settings stable over the validations of the second half of training?"""

from __future__ import annotations

import math

from ..aggregate import Job, read_curves
from ..catalog import CLOSING_SHARE, MAX_POINTS, MIN_POINTS
from ..stats import contrast, log2_trend, welch
from .compare import higher_is_better
from .results import BETTER, WORSE, Check, Comparison, Stability, StabilityPoint


def curve_metric(metric: str, jobs_keys: set[str]) -> str:
    """The validation curve that follows a decision metric during training: its ``val/`` form when
    logged (``test/loss`` → ``val/loss``), else ``val/loss``."""
    base = metric.split("@")[0].rsplit("/", 1)[-1]
    return f"val/{base}" if f"val/{base}" in jobs_keys else "val/loss"


def _finite_curve(job: Job, key: str) -> dict[float, float]:
    xs, ys = read_curves(job, (key,)).get(key, ([], []))
    return {x: y for x, y in zip(xs, ys, strict=False) if math.isfinite(y)}


def _family(metric: str) -> str:
    """The quantity a metric measures, for matching a validation curve to a decision metric
    (``test/loss``, ``val/ppl`` → ``loss``; ``test/bleu`` → ``bleu``)."""
    base = metric.split("@")[0].rsplit("/", 1)[-1].lower()
    return "loss" if base in ("loss", "ppl", "perplexity") else base


def spaced(steps: list[float], k: int = MAX_POINTS) -> list[float]:
    """At most ``k`` of the sorted ``steps``, evenly spaced: the step nearest each of ``k`` equally
    spaced targets from the first to the last (each used once), so that validating more often does
    not change which part of training is read."""
    if len(steps) <= k:
        return list(steps)
    lo, hi = steps[0], steps[-1]
    out: list[float] = []
    for i in range(k):
        target = lo + (hi - lo) * i / (k - 1)
        free = [s for s in steps if s not in out]
        out.append(min(free, key=lambda s: (abs(s - target), s)))
    return sorted(out)


def _curves(c: Comparison) -> tuple[str, list[list[dict[float, float]]]] | None:
    """The validation curve that follows ``c.metric`` and each side's per-seed curves of it;
    ``None`` when the only curve logged measures something else (BLEU decided, val/loss logged)."""
    ga, gb = c.groups
    keys = {m for g in (ga, gb) for m in g.stats}
    base = _family(c.metric)
    curves: list[list[dict[float, float]]] = [[], []]
    first = curve_metric(c.metric, keys)
    for cm in dict.fromkeys([first, "val/loss"]):  # val/ppl = exp(val/loss): the same ranking
        if _family(cm) != base:
            continue
        curves = [[cv for j in g.jobs if (cv := _finite_curve(j, cm))] for g in (ga, gb)]
        if curves[0] and curves[1]:
            break
    return None if _family(cm) != base else (cm, curves)


def _still_improving(name: str, side: list[dict[float, float]], cm: str, sign: float) -> str | None:
    """A caveat when the seeds' mean of ``cm`` still improved over their last validation interval."""
    gains, spans = [], set()
    for cv in side:
        xs = sorted(cv)
        if len(xs) >= 2:
            gains.append(sign * (cv[xs[-1]] - cv[xs[-2]]))
            spans.add((xs[-2], xs[-1]))
    if not gains or sum(gains) / len(gains) <= 0:
        return None
    span = f"steps {min(a for a, _ in spans):g}–{max(b for _, b in spans):g}"
    return (
        f"{name}: {cm} still improving: it changed by {sum(gains) / len(gains):.3g} over its last "
        f"validation interval ({span}; the seeds' mean; a caveat, not a blocker)"
    )


def _point(step: float, a_vals: list[float], b_vals: list[float], hb: bool) -> StabilityPoint:
    """Δ (A's improvement) at one step: the mean difference and its Welch interval (2+ seeds a side)."""
    sign = 1.0 if hb else -1.0
    mean = sign * (sum(a_vals) / len(a_vals) - sum(b_vals) / len(b_vals))
    iv = None
    if len(a_vals) >= 2 and len(b_vals) >= 2:
        w = welch(a_vals, b_vals)
        iv = w if hb else w.flipped()
    return StabilityPoint(step, mean + 0.0, iv)


def _late_crossing(c: Comparison, out: Stability) -> str | None:
    want = 1.0 if c.outcome == BETTER else -1.0
    for p in out.points:
        if p.interval is not None and (p.interval.hi < 0 if want > 0 else p.interval.lo > 0):
            return (
                f"{c.a} vs {c.b}: late crossing: at step {p.step:g} the 95 % interval of Δ {out.metric} "
                f"[{p.interval.lo:+.3g}, {p.interval.hi:+.3g}] lies on the other side of 0 from the final "
                f"result ({c.outcome})"
            )
    return None


def _closing(c: Comparison, out: Stability) -> str | None:
    a0, b1 = out.trend
    want = 1.0 if c.outcome == BETTER else -1.0
    final = out.points[-1].delta
    if want * final > 0 and -b1 * want > CLOSING_SHARE * abs(final):
        zero = 2 ** (-a0 / b1) if b1 else math.inf
        return (
            f"{c.a} vs {c.b}: the gap is closing: mean Δ {out.metric} changes by {b1:+.3g} per doubling "
            f"of steps, more than {CLOSING_SHARE:g} of its final size {final:+.3g}; the trend reaches 0 "
            f"at step ~{zero:.3g}"
        )
    return None


def _off_margin(c: Comparison, out: Stability, margin: float) -> str | None:
    a0, b1 = out.trend
    at_end = a0 + b1 * math.log2(out.points[-1].step)
    if abs(at_end) < margin:
        return None
    return (
        f"{c.a} vs {c.b}: the fitted trend of Δ {out.metric} reaches {at_end:+.3g} at step "
        f"{out.points[-1].step:g}, outside the margin ±{margin:.3g}"
    )


def stability(c: Comparison, equivalence_margin: float | None = None) -> Stability | None:
    """The second-half check of comparison ``c`` (rule (d) of :data:`COMMON_RULE`), or ``None`` when
    there is nothing to check (no groups, decided by divergence, or a metric without a validation
    curve of its own such as ``test/loss@4x``).

    Reads the validation curve of ``c.metric`` (:func:`curve_metric`) of every finished seed of both
    groups at the validation steps they share in the second half of training (step ≥ half the last
    one), keeps at most :data:`MAX_POINTS` evenly spaced ones (:func:`spaced`) and needs at least
    :data:`MIN_POINTS`. Problems: **late crossing** (at a point the 95 % interval of Δ lies on the
    other side of 0 from the final outcome), **gap closing** (the fitted change of mean Δ per doubling
    of steps, ``Δ ≈ a + b·log2(step)``, shrinks the gap by more than :data:`CLOSING_SHARE` of its
    final size), and for an equivalence (``equivalence_margin`` m) the fitted Δ at the last step
    outside ±m. The improvement over each setting's last validation interval is a caveat only.
    """
    if c.terms is not None and not c.by_divergence and "@" not in c.metric:
        return contrast_stability(c)
    if c.groups is None or c.by_divergence or "@" in c.metric:
        return None
    found = _curves(c)
    if found is None:
        return None
    cm, curves = found
    hb = higher_is_better(cm)
    out = Stability(c, cm)
    if not curves[0] or not curves[1]:
        why = f"{c.a} vs {c.b}: no {cm} curve in csv/metrics.csv (cannot tell whether the ranking was stable)"
        out.problems.append((Check.NO_CURVE, why))
        return out
    last = max(max(cv) for side in curves for cv in side)
    shared = set.intersection(*(set(cv) for side in curves for cv in side))
    chosen = spaced(sorted(s for s in shared if s >= last / 2 and s > 0))
    for name, side in ((c.a, curves[0]), (c.b, curves[1])):
        if note := _still_improving(name, side, cm, 1.0 if hb else -1.0):
            out.caveats.append(note)
    if len(chosen) < MIN_POINTS:
        out.problems.append(
            (
                Check.FEW_POINTS,
                f"{c.a} vs {c.b}: {len(chosen)} validation(s) of {cm} shared by every seed in the "
                f"second half of training (steps {last / 2:g}–{last:g}); needs ≥ {MIN_POINTS}. Fix: "
                f"set trainer.val_check_interval to at most {max(1, int(last // 8))}",
            )
        )
        return out
    out.points = [_point(s, [cv[s] for cv in curves[0]], [cv[s] for cv in curves[1]], hb) for s in chosen]
    out.trend = log2_trend([p.step for p in out.points], [p.delta for p in out.points])
    if equivalence_margin is None and c.outcome in (BETTER, WORSE):
        for kind, text in ((Check.LATE_CROSSING, _late_crossing(c, out)), (Check.CLOSING, _closing(c, out))):
            if text:
                out.problems.append((kind, text))
    if equivalence_margin is not None and (text := _off_margin(c, out, equivalence_margin)):
        out.problems.append((Check.OFF_MARGIN, text))
    out.caveats.insert(
        0,
        f"{c.a} vs {c.b} over the second half ({cm}, steps "
        f"{', '.join(f'{p.step:g}' for p in out.points)}): Δ "
        f"{', '.join(f'{p.delta:+.3g}' for p in out.points)}; trend {out.trend[1]:+.3g} per doubling",
    )
    return out


def contrast_stability(c: Comparison) -> Stability | None:
    """The second-half check of a contrast (``c.terms``: weighted groups, e.g. an interaction): its
    Welch–Satterthwaite interval at each shared second-half validation of the decision metric's
    curve, then late crossing and gap closing as for two settings (:func:`stability`)."""
    keys = {m for _, g in c.terms for m in g.stats}
    cm = curve_metric(c.metric, keys)
    if _family(cm) != _family(c.metric):
        return None
    hb = higher_is_better(cm)
    out = Stability(c, cm)
    curves = [[cv for j in g.jobs if (cv := _finite_curve(j, cm))] for _, g in c.terms]
    if not all(curves):
        out.problems.append((Check.NO_CURVE, f"{c.a}: no {cm} curve for every setting of the contrast"))
        return out
    last = max(max(cv) for side in curves for cv in side)
    shared = set.intersection(*(set(cv) for side in curves for cv in side))
    chosen = spaced(sorted(s for s in shared if s >= last / 2 and s > 0))
    if len(chosen) < MIN_POINTS:
        why = f"{c.a}: {len(chosen)} shared validation(s) of {cm} in the second half; needs ≥ {MIN_POINTS}"
        out.problems.append((Check.FEW_POINTS, why))
        return out
    weights = [w for w, _ in c.terms]
    for s in chosen:
        samples = [[cv[s] for cv in side] for side in curves]
        if all(len(x) >= 2 for x in samples):
            iv = contrast(samples, weights)
            iv = iv if hb else iv.flipped()
            out.points.append(StabilityPoint(s, iv.delta + 0.0, iv))
        else:
            sign = 1.0 if hb else -1.0
            mean = sign * sum(w * sum(x) / len(x) for w, x in zip(weights, samples, strict=True))
            out.points.append(StabilityPoint(s, mean + 0.0, None))
    out.trend = log2_trend([p.step for p in out.points], [p.delta for p in out.points])
    if c.outcome in (BETTER, WORSE):
        for kind, text in ((Check.LATE_CROSSING, _late_crossing(c, out)), (Check.CLOSING, _closing(c, out))):
            if text:
                out.problems.append((kind, text))
    out.caveats.insert(
        0,
        f"{c.a} over the second half ({cm}, steps {', '.join(f'{p.step:g}' for p in out.points)}): "
        f"{', '.join(f'{p.delta:+.3g}' for p in out.points)}; trend {out.trend[1]:+.3g} per doubling",
    )
    return out
