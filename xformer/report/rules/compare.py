"""Comparing two settings: Welch's t on the per-seed values, divergence as an outcome, Holm–Bonferroni
for a best-of-k pick, and the difference the comparison could have detected (its power)."""

from __future__ import annotations

import math

from ..aggregate import Group, Stat
from ..catalog import DIVERGE_SHARE, MIN_SEEDS
from ..stats import CONFIDENCE, contrast, detectable_difference, detectable_for, holm, welch
from .results import BETTER, FEW, NOISE, WORSE, Comparison

LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "error", "wer", "cer")
ALPHA = 1 - CONFIDENCE


def higher_is_better(metric: str) -> bool:
    """False for loss-like metrics (``val/loss``, ``val/ppl``, ``test/loss@2x`` ...), True otherwise."""
    base = metric.split("@")[0].rsplit("/", 1)[-1].lower()
    return not any(word in base for word in LOWER_IS_BETTER)


def compare(
    a: Stat | None, b: Stat | None, higher: bool, a_name: str = "A", b_name: str = "B", min_seeds: int = MIN_SEEDS
) -> Comparison:
    """Compare two settings' per-seed values with Welch's t (rule in :data:`COMMON_RULE`).

    A diverged seed (non-finite value, ``Stat.n_nonfinite``) is its setting's worst outcome: when both
    sides have at least ``min_seeds`` runs and A's share of diverged runs exceeds B's by at least
    :data:`DIVERGE_SHARE`, A is *worse* (Δ = −inf) whatever its other seeds say, and the reverse. Below
    that share the finished seeds are compared with Welch's t, but the side with more diverged seeds is
    never called better (the outcome becomes within noise)."""
    if a is None or b is None:
        return Comparison(a_name, b_name, math.nan, None, FEW)
    ka, kb = a.n_nonfinite, b.n_nonfinite
    runs_a, runs_b = a.n + ka, b.n + kb
    sign = 1.0 if higher else -1.0
    common = dict(n_a=a.n, n_b=b.n, div_a=ka, div_b=kb, mean_b=b.mean if b.n else None)
    if (ka or kb) and runs_a >= min_seeds and runs_b >= min_seeds:
        share = ka / runs_a - kb / runs_b
        if share >= DIVERGE_SHARE:
            return Comparison(
                a_name,
                b_name,
                -math.inf,
                None,
                WORSE,
                **common,
                note=f"{a_name} diverged in {ka} of {runs_a} seeds against {kb} of {runs_b}: "
                f"a diverged seed is the worst outcome",
            )
        if -share >= DIVERGE_SHARE:
            return Comparison(
                a_name,
                b_name,
                math.inf,
                None,
                BETTER,
                **common,
                note=f"{b_name} diverged in {kb} of {runs_b} seeds against {ka} of {runs_a}: "
                f"a diverged seed is the worst outcome",
            )
    delta = sign * (a.mean - b.mean) if a.n and b.n else math.nan
    if a.n < min_seeds or b.n < min_seeds:
        return Comparison(a_name, b_name, delta, None, FEW, **common)
    iv = welch(a.values, b.values)
    if not higher:
        iv = iv.flipped()
    sa, sb = a.std or 0.0, b.std or 0.0
    noise = math.sqrt(((a.n - 1) * sa**2 + (b.n - 1) * sb**2) / (a.n + b.n - 2))
    outcome = BETTER if iv.lo > 0 else WORSE if iv.hi < 0 else NOISE
    note = ""
    if outcome == BETTER and ka / runs_a > kb / runs_b:
        outcome, note = NOISE, f"not better: {a_name} diverged in {ka} of {runs_a} seeds, its worst outcome"
    elif outcome == WORSE and kb / runs_b > ka / runs_a:
        outcome, note = NOISE, f"not worse: {b_name} diverged in {kb} of {runs_b} seeds, its worst outcome"
    found = detectable_difference(noise, a.n, b.n)
    return Comparison(a_name, b_name, iv.delta, iv, outcome, noise=noise, note=note, detectable=found, **common)


def compare_groups(
    ga: Group, gb: Group, metric: str, a_name: str, b_name: str, higher: bool | None = None
) -> Comparison:
    """:func:`compare` on ``metric`` of two groups, remembering the groups (for the stability check)."""
    hb = higher_is_better(metric) if higher is None else higher
    c = compare(ga.stat(metric), gb.stat(metric), hb, a_name, b_name)
    c.groups, c.metric = (ga, gb), metric
    return c


def best_of(
    candidates: list[tuple[str, Group]],
    base: tuple[str, Group],
    metric: str,
    higher: bool | None = None,
    rank_metric: str | None = None,
) -> tuple[Comparison, list[Comparison]]:
    """Compare every candidate against ``base`` and correct the family (Holm–Bonferroni): the best
    candidate (best mean of ``rank_metric``, default ``metric``) is picked after seeing the data, so
    its comparison is *better*/*worse* only when its Holm-adjusted p-value is below α = 0.05 (a
    divergence decision stands as it is). Returns ``(best comparison, all comparisons)``."""
    hb = higher_is_better(metric) if higher is None else higher
    comps = [compare_groups(g, base[1], metric, name, base[0], hb) for name, g in candidates]
    rank = rank_metric or metric
    r_sign = 1 if higher_is_better(rank) else -1

    def score(item: tuple[str, Group]) -> float:
        s = item[1].stat(rank)
        return r_sign * s.mean if s is not None and s.n else -math.inf

    best_i = max(range(len(candidates)), key=lambda i: score(candidates[i]))
    ps = [(0.0 if c.by_divergence else c.interval.p if c.interval is not None else 1.0) for c in comps]
    adjusted = holm(ps)
    k = len(comps)
    for c, p in zip(comps, adjusted, strict=True):
        if k < 2:
            continue
        c.p_adj, c.family = p, k
        if c.interval is not None and c.outcome in (BETTER, WORSE) and p >= ALPHA:
            c.outcome = NOISE
            c.note = (c.note + "; " if c.note else "") + f"not significant after Holm–Bonferroni over {k}"
    return comps[best_i], comps


def compare_contrast(
    terms: list[tuple[float, Group]], metric: str, name: str, higher: bool | None = None
) -> Comparison:
    """A linear contrast ``Σ wᵢ·mean(groupᵢ)`` of ``metric`` over independent settings (an interaction:
    weights ``+1, −1, −1, +1``), oriented so that positive is better as in :func:`compare`, as a
    :class:`Comparison` named ``name`` against 0 (Welch–Satterthwaite interval,
    :func:`~xformer.report.stats.contrast`). Only finite per-seed values enter (diverged seeds are
    named by the verdict); fewer than :data:`MIN_SEEDS` in a group decides nothing."""
    hb = higher_is_better(metric) if higher is None else higher
    stats = [g.stat(metric) for _, g in terms]
    ns = [s.n if s else 0 for s in stats]
    if min(ns) < MIN_SEEDS:
        c = Comparison(name, "0", math.nan, None, FEW, n_a=min(ns), n_b=0, metric=metric)
        return c
    iv = contrast([s.values for s in stats], [w for w, _ in terms])
    if not hb:
        iv = iv.flipped()
    outcome = BETTER if iv.lo > 0 else WORSE if iv.hi < 0 else NOISE
    return Comparison(
        name,
        "0",
        iv.delta,
        iv,
        outcome,
        n_a=min(ns),
        n_b=min(ns),
        metric=metric,
        detectable=detectable_for(iv.se, iv.df) if iv.se > 0 else 0.0,
        terms=list(terms),
    )
