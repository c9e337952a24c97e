"""What a part reads from a sweep: the jobs an arm selects, each job's value of a metric (or of a
metric expression), and the metric's direction and bounds.

Metric expressions: a metric key (``test/loss``); ``m1 - m2``, the per-job difference of two final
metrics (paired, so each seed's own level cancels: ``test/loss@2x - test/loss@1x``); ``rise(c)``, how
far a job's validation curve ``c`` ends above its best value (``rise(val/loss)``: over-fitting).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..aggregate import Job, Sweep, fmt_value, read_curves, value_sort_key
from .results import Arm

LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "error", "wer", "cer", "nll")
BOUNDS = {
    "exact_match": (0.0, 1.0),
    "acc": (0.0, 1.0),
    "accuracy": (0.0, 1.0),
    "bleu": (0.0, 100.0),
    "loss": (0.0, math.inf),
    "nll": (0.0, math.inf),
    "ppl": (1.0, math.inf),
}
"""The range of a metric, by the last part of its name (``test/exact_match@2x`` → exact_match)."""

RISE = re.compile(r"^rise\((?P<curve>[^()]+)\)$")


class SelectionError(ValueError):
    """An arm that selects no job, or jobs of several settings; ``key`` names the arm's key."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def base_name(metric: str) -> str:
    """``test/exact_match@2x`` → ``exact_match``."""
    return metric.split("@")[0].rsplit("/", 1)[-1].strip().lower()


def higher_is_better(metric: str) -> bool:
    """False for loss-like metrics (the first term of an expression decides), True otherwise."""
    first = metric_terms(metric)[0]
    return not any(word in base_name(first) for word in LOWER_IS_BETTER)


def bounds(metric: str) -> tuple[float, float] | None:
    """The range of a plain metric (``None`` for an expression or an unknown metric)."""
    if " - " in metric or RISE.match(metric):
        return None
    return BOUNDS.get(base_name(metric))


def metric_terms(metric: str) -> list[str]:
    """The metric keys an expression reads (``rise(val/loss)`` → ``val/loss``)."""
    found = RISE.match(metric.strip())
    if found:
        return [found["curve"].strip()]
    return [t.strip() for t in metric.split(" - ")]


def missing_metric(sweep: Sweep, metric: str) -> str | None:
    """The first key of ``metric`` that no finished job of the sweep has, else ``None`` (a curve read by
    ``rise()`` counts as present when its final value is)."""
    return next((t for t in metric_terms(metric) if t not in sweep.metric_keys), None)


def _curve(job: Job, key: str) -> dict[float, float]:
    xs, ys = read_curves(job, (key,)).get(key, ([], []))
    return {x: y for x, y in zip(xs, ys, strict=False)}


def job_value(job: Job, metric: str) -> float | None:
    """``job``'s value of ``metric`` (a key or an expression); ``None`` when it lacks a term; NaN when a
    term is not finite."""
    found = RISE.match(metric.strip())
    if found:
        curve = list(_curve(job, found["curve"].strip()).values())
        cv = [v for v in curve if math.isfinite(v)]
        if len(cv) < 2:
            return None
        return abs(curve[-1] - (max(cv) if higher_is_better(found["curve"]) else min(cv)))
    terms = metric_terms(metric)
    vals = [job.metrics.get(t) for t in terms]
    if any(v is None for v in vals):
        return None
    out = vals[0]
    for v in vals[1:]:
        out = out - v
    return float(out)


def same(a: Any, b: Any) -> bool:
    """Whether a job's value ``a`` is the selector's ``b`` (numbers numerically, else as override text)."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return fmt_value(a) == fmt_value(b)


def selector_text(selector: dict) -> str:
    return ", ".join(f"{k}={fmt_value(v)}" for k, v in selector.items()) or "every job"


def select(sweep: Sweep, selector: dict, key: str = "a") -> list[Job]:
    """The finished and diverged jobs of one setting matched by ``selector`` (``{override key: value}``).

    Raises:
        SelectionError: no job matches (naming the values the sweep has), or the matched jobs belong to
            several settings (naming the swept keys that tell them apart).
    """
    counted = [j for j in sweep.jobs if j.finished or j.diverged]
    hits = [j for j in counted if all(same(j.value(k), v) for k, v in selector.items())]
    if not hits:
        have = []
        for k in selector:
            vals = [fmt_value(v) for v in sorted({j.value(k) for j in counted}, key=value_sort_key)]
            have.append(f"{k} ∈ {{{', '.join(vals)}}}")
        raise SelectionError(
            key, f"the arm {{{selector_text(selector)}}} selects no job; the sweep has {'; '.join(have)}"
        )
    others = [k for k in sweep.swept_keys if k not in selector]
    settings = {tuple(fmt_value(j.value(k)) for k in others) for j in hits}
    if len(settings) > 1:
        apart = [k for i, k in enumerate(others) if len({s[i] for s in settings}) > 1]
        raise SelectionError(
            key,
            f"the arm {{{selector_text(selector)}}} selects {len(settings)} settings; add {' and '.join(apart)} to it",
        )
    return hits


def arm(sweep: Sweep, selector: dict, metric: str, name: str | None = None, key: str = "a") -> Arm:
    """The per-seed values of ``metric`` in the setting ``selector`` picks: each finished seed's value,
    and the count of diverged seeds (or finished ones with a non-finite value), which the tests rank
    below every finished value (:func:`.tests.diverged_decision`)."""
    jobs = select(sweep, selector, key)
    values, div = [], 0
    for j in jobs:
        v = job_value(j, metric) if j.finished else math.nan
        if v is None:
            continue
        if not math.isfinite(v):
            div += 1
            continue
        values.append(v)
    totals = [j.params.get("total") for j in jobs if j.params.get("total")]
    params = sum(totals) / len(totals) if totals else None
    return Arm(name or selector_text(selector), values, div, jobs, params)
