"""The second-half check of a decided comparison: does the ranking hold over the validations of the
second half of training, judged with intervals? (docs/report.md § Checks every part gets.)

The curve read is the one the decision metric comes from: the **running best** for a ``test/*`` metric
(evaluated on the best checkpoint), the raw curve for a ``val/*`` one. Outcomes: **late crossing**,
**closing** (the per-doubling trend of the gap to the boundary lies below ``−CLOSING_SHARE × final gap``
with its whole 95 % interval), **trend undetermined** (that interval straddles the limit), **not
closing**. The trend's interval is Welch's (Welch–Satterthwaite for a contrast) over the per-seed
least-squares slopes of the curve against log2(step).
"""

from __future__ import annotations

import math

from ..aggregate import Job, read_curves
from ..stats import contrast
from .evidence import RISE, base_name, higher_is_better
from .results import Stability, StabilityPoint

MIN_POINTS, MAX_POINTS = 4, 6
"""A trend reads at most MAX_POINTS evenly spaced second-half validations every seed shares, at least MIN_POINTS."""
CLOSING_SHARE = 0.25
"""The gap is closing when it shrinks per doubling of steps by more than this share of its final size."""


def spaced(steps: list[float], k: int = MAX_POINTS) -> list[float]:
    """At most ``k`` of the sorted ``steps``, evenly spaced (the step nearest each of ``k`` equally spaced
    targets, each used once), so that validating more often does not change what is read."""
    if len(steps) <= k:
        return list(steps)
    lo, hi = steps[0], steps[-1]
    out: list[float] = []
    for i in range(k):
        target = lo + (hi - lo) * i / (k - 1)
        free = [s for s in steps if s not in out]
        out.append(min(free, key=lambda s: (abs(s - target), s)))
    return sorted(out)


def curve_key(metric: str, logged: set[str]) -> str | None:
    """The validation curve that follows ``metric``: ``val/<name>`` when logged; for a loss or a
    perplexity ``val/loss`` (the same ranking); ``None`` for an expression or when none is logged."""
    if " - " in metric or RISE.match(metric) or "@" in metric:  # `@`: a length split, measured only at the end
        return None
    name = metric.rsplit("/", 1)[-1]
    if f"val/{name}" in logged:
        return f"val/{name}"
    if base_name(metric) in ("loss", "ppl", "nll") and "val/loss" in logged:
        return "val/loss"
    return None


def monitor(job: Job) -> tuple[str, bool] | None:
    """The best checkpoint's monitor of ``job`` (``(key, higher is better)``), ``None`` when unknown."""
    cb = ((job.config or {}).get("callbacks") or {}).get("model_checkpoint") or {}
    key = cb.get("monitor") if isinstance(cb, dict) else None
    if not key:
        return None
    return str(key), str(cb.get("mode") or "min") == "max"


def job_curve(job: Job, key: str, running_best: bool) -> dict[float, float]:
    """``{step: value}`` of ``key``; with ``running_best`` the value of ``key`` at the step where the
    job's checkpoint monitor was best so far (the checkpoint a test at that step would load)."""
    mon = monitor(job) if running_best else None
    keys = (key,) if mon is None else tuple(dict.fromkeys((key, mon[0])))
    got = read_curves(job, keys)
    xs, ys = got.get(key, ([], []))
    raw = {x: y for x, y in zip(xs, ys, strict=False) if math.isfinite(y)}
    if mon is None:
        return raw
    mx, my = got.get(mon[0], ([], []))
    mon_curve = {x: y for x, y in zip(mx, my, strict=False) if math.isfinite(y)}
    out, best_step, best = {}, None, None
    for s in sorted(raw):
        m = mon_curve.get(s)
        if m is not None and (best is None or (m > best if mon[1] else m < best)):
            best, best_step = m, s
        out[s] = raw[best_step] if best_step is not None else raw[s]
    return out


def _slope(xs: list[float], ys: list[float]) -> float:
    lx = [math.log2(x) for x in xs]
    mx, my = sum(lx) / len(lx), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ys, strict=True)) / sxx if sxx else 0.0


def check(
    terms: list[tuple[float, list[Job]]], metric: str, boundary: float, side: float, name: str
) -> Stability | None:
    """The second-half check of a decision that Δ = Σ wᵢ·mean(termᵢ) (oriented: positive is better) lies
    above (``side`` +1) or below (``side`` −1) ``boundary``. ``None`` when the metric has no curve."""
    jobs = [j for _, js in terms for j in js if j.finished]
    name_key = f"val/{metric.split('@')[0].rsplit('/', 1)[-1]}"
    logged = set(read_curves(jobs[0], ("val/loss", name_key))) if jobs else set()
    key = curve_key(metric, logged)
    if key is None:
        return None
    running = metric.startswith("test/") and all(monitor(j) is not None for j in jobs)
    out = Stability(key, running)
    hb = higher_is_better(metric)
    curves = [[c for j in js if j.finished and (c := job_curve(j, key, running))] for _, js in terms]
    if not all(curves):
        out.outcome, out.text = "no curve", f"{name}: no {key} curve for every arm: not checked"
        return out
    last = max(max(c) for side_c in curves for c in side_c)
    shared = set.intersection(*(set(c) for side_c in curves for c in side_c))
    chosen = spaced(sorted(s for s in shared if s >= last / 2 and s > 0))
    if len(chosen) < MIN_POINTS:
        out.outcome = "few points"
        out.text = (
            f"{name}: {len(chosen)} validation(s) of {key} shared by every seed in the second half (steps "
            f"{last / 2:g}–{last:g}); a trend needs ≥ {MIN_POINTS} (trainer.val_check_interval at most "
            f"{max(1, int(last // 8))} gives them)"
        )
        return out
    sign = 1.0 if hb else -1.0
    weights = [w for w, _ in terms]
    for s in chosen:
        samples = [[c[s] for c in side_c] for side_c in curves]
        mean = sign * sum(w * sum(x) / len(x) for w, x in zip(weights, samples, strict=True))
        if all(len(x) >= 2 for x in samples):
            iv = contrast(samples, weights)
            lo, hi = sorted((sign * iv.lo, sign * iv.hi))
            out.points.append(StabilityPoint(s, mean + 0.0, lo, hi))
        else:
            out.points.append(StabilityPoint(s, mean + 0.0))
    slopes = [[_slope(chosen, [c[s] for s in chosen]) for c in side_c] for side_c in curves]
    gap_final = side * (out.points[-1].delta - boundary)
    out.limit = -CLOSING_SHARE * abs(gap_final)
    gap_slope = side * sign * sum(w * sum(x) / len(x) for w, x in zip(weights, slopes, strict=True))
    steps = ", ".join(f"{p.step:g}" for p in out.points)
    deltas = ", ".join(f"{p.delta:+.3g}" for p in out.points)
    curve_words = f"running best of {key}" if running else key
    head = f"{name} over the second half ({curve_words}, steps {steps}): Δ {deltas}"
    for p in out.points:
        if p.lo is not None and (side * (p.hi - boundary) < 0 if side > 0 else side * (p.lo - boundary) < 0):
            out.outcome = "late crossing"
            out.text = (
                f"{head}; late crossing: at step {p.step:g} the 95 % interval [{p.lo:+.3g}, {p.hi:+.3g}] lies "
                f"on the other side of {boundary:+.3g} from the final result"
            )
            return out
    if all(len(x) >= 2 for x in slopes):
        iv = contrast(slopes, weights)
        gap_lo, gap_hi = sorted((side * sign * iv.lo, side * sign * iv.hi))
    else:
        gap_lo = gap_hi = gap_slope
    out.slope, out.slope_lo, out.slope_hi = gap_slope, gap_lo, gap_hi
    trend = (
        f"trend of the gap to {boundary:+.3g}: {gap_slope:+.3g} per doubling [95 % {gap_lo:+.3g}, {gap_hi:+.3g}] "
        f"against the limit {out.limit:+.3g} (a quarter of the final gap {gap_final:+.3g})"
    )
    if gap_hi < out.limit:
        out.outcome = "closing"
    elif gap_lo >= out.limit:
        out.outcome = "not closing"
    else:
        out.outcome = "trend undetermined"
    out.text = f"{head}; {trend} → {out.outcome}"
    return out
