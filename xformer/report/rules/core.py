"""The core of the claim verdicts: the result types (:class:`Comparison`, :class:`Stability`,
:class:`Verdict`), the comparison of two settings (Welch's t, divergence, Holm–Bonferroni for
best-of-k), the checks common to every claim (seeds, saturation, the second half of training), the
training budget, the registry of verdict functions (:func:`claim`) and :func:`decide`, which turns a
claim rule's outcome and the common checks into a verdict. The claim rules themselves are one module
per family beside this one (``ffn``, ``heads``, ``norm``, ``positions``, ``attention``,
``regularisation``, ``cost``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ..aggregate import Group, Job, Stat, Sweep, fmt_value, read_curves
from ..catalog import CLAIMS, CLOSING_SHARE, DIVERGE_SHARE, MAX_POINTS, MIN_POINTS, MIN_SEEDS
from ..stats import CONFIDENCE, Interval, holm, log2_trend, welch

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
BETTER, WORSE, NOISE, FEW = "better", "worse", "within noise", "too few seeds"
PREFERRED = ("test/loss", "val/loss", "test/bleu", "val/bleu", "test/ppl", "val/ppl")
"""Continuous held-out metrics, in the order the decision metric is picked from."""
LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "error", "wer", "cer")
BOUNDS = {"exact_match": (0.0, 1.0), "acc": (0.0, 1.0), "accuracy": (0.0, 1.0), "bleu": (0.0, 100.0)}
"""Range of the bounded metrics, by the last part of their name (``test/exact_match@2x`` → exact_match)."""
SATURATION = 0.02  # saturated: every mean within 2 % of the range from one bound
EQUIV_REL = 0.01  # C6 equivalence margin, relative to the larger mean
C2_TOL = 0.03  # C2: |share - 2/3| allowed
C7_OK, C7_BAD = 0.3, 0.5  # C7: |e - 2| <= OK consistent; |e - 2| > BAD contradicts
ALPHA = 1 - CONFIDENCE

PUBLISHED = {cid: c.published for cid, c in CLAIMS.items()}


# -- results ------------------------------------------------------------------------------------
@dataclass
class Comparison:
    """Setting A against setting B on one metric (Welch's t, :func:`xformer.report.stats.welch`).

    ``delta`` is A's improvement over B in the metric's better direction (positive: A better; NaN when
    a side has no finite value; ±inf when divergence decided it), ``interval`` its 95 % interval in the
    same direction (``None`` with fewer than :data:`MIN_SEEDS` finished seeds on a side, or when
    divergence decided), ``outcome`` better | worse | within noise | too few seeds, ``n_a``/``n_b`` the
    finished seeds, ``noise`` the pooled sample std, ``div_a``/``div_b`` the diverged seeds,
    ``mean_b`` B's mean (for the relative effect), ``note`` why the outcome differs from the interval
    (divergence, multiple comparisons), ``p_adj``/``family``: the Holm-adjusted p-value and the family
    size when the pair was picked as the best of ``family``; ``groups``: the two groups compared."""

    a: str
    b: str
    delta: float
    interval: Interval | None
    outcome: str
    n_a: int = 0
    n_b: int = 0
    noise: float | None = None
    div_a: int = 0
    div_b: int = 0
    mean_b: float | None = None
    note: str = ""
    p_adj: float | None = None
    family: int | None = None
    groups: tuple[Group, Group] | None = field(default=None, repr=False)
    metric: str = ""

    @property
    def by_divergence(self) -> bool:
        return math.isinf(self.delta)

    def text(self) -> str:
        head = f"{self.a} vs {self.b}: "
        div = (
            f", diverged {self.div_a}/{self.n_a + self.div_a} vs {self.div_b}/{self.n_b + self.div_b}"
            if self.div_a or self.div_b
            else ""
        )
        if self.interval is not None:
            iv = self.interval
            out = f"{head}Δ {iv.text()}, Welch p={iv.p:.2g}, n={self.n_a}/{self.n_b}{div}"
        else:
            delta = (
                f"{self.delta:+.3g}"
                if math.isfinite(self.delta)
                else ("n/a" if math.isnan(self.delta) else f"{self.delta:+}")
            )
            out = f"{head}Δ {delta}, n={self.n_a}/{self.n_b}{div}"
        if self.p_adj is not None:
            out += f", Holm–Bonferroni over {self.family} comparisons: adjusted p={self.p_adj:.2g}"
        out += f" → {self.outcome}"
        return out + (f" ({self.note})" if self.note else "")

    def relative(self) -> tuple[float, float, float] | None:
        """``(Δ, lo, hi)`` as a percentage of B's mean (B's uncertainty ignored); ``None`` without an
        interval or with B's mean 0."""
        if self.interval is None or not self.mean_b:
            return None
        scale = 100.0 / abs(self.mean_b)
        return self.interval.delta * scale, self.interval.lo * scale, self.interval.hi * scale


@dataclass
class StabilityPoint:
    """Δ (A's improvement over B) of the validation metric at one step: mean over seeds and its 95 %
    Welch interval (``None`` with fewer than 2 seeds a side)."""

    step: float
    delta: float
    interval: Interval | None


@dataclass
class Stability:
    """What the validation curves say about a comparison in the second half of training (item 1 of
    :data:`xformer.report.catalog.COMMON_RULE`).

    Attributes:
        comparison: the comparison checked; ``metric``: the validation curve read; ``points``: the
        (at most :data:`MAX_POINTS`) evenly spaced validations used; ``trend``: ``(a, b)`` of
        ``Δ ≈ a + b·log2(step)`` (``None`` with fewer than 2 points); ``problems``: sentences that make
        the verdict inconclusive; ``caveats``: sentences printed beside it.
    """

    comparison: Comparison
    metric: str
    points: list[StabilityPoint] = field(default_factory=list)
    trend: tuple[float, float] | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """The outcome for one claim in one context.

    Attributes:
        claim: ``"C1"`` ...; ``status``: supported | not supported | inconclusive; ``reason``: why, in
        one sentence; ``measured``: the numbers; ``published``: the paper's; ``context``: the other swept
        values the verdict holds at (``""``: all); ``evidence``: the comparisons with their intervals and
        the checks that failed; ``rule``: the claim's rule (:mod:`xformer.report.catalog`);
        ``budget``: the training budget the verdict holds at (steps, tokens, schedule); ``key``: the
        comparison of the summary table; ``metric``: the decision metric; ``settings``: the compared
        settings ``(name, group)``; ``stability``: the second-half check of the key comparison.
    """

    claim: str
    status: str
    reason: str
    measured: str
    published: str
    context: str = ""
    evidence: list[str] = field(default_factory=list)
    rule: str = ""
    budget: str = ""
    key: Comparison | None = None
    metric: str = ""
    settings: list[tuple[str, Group]] = field(default_factory=list, repr=False)
    stability: Stability | None = None

    def line(self) -> str:
        """One line: ``C1 [ctx]: supported at <budget>: reason | measured ... | published ...``."""
        ctx = f" [{self.context}]" if self.context else ""
        at = f" at {self.budget}" if self.budget else ""
        return (
            f"{self.claim}{ctx}: {self.status}{at}: {self.reason} | measured {self.measured} "
            f"| published {self.published}"
        )

    def block(self) -> str:
        """:meth:`line`, then one indented line per piece of evidence and the rule (what the CLI prints)."""
        lines = [self.line()] + [f"    evidence: {e}" for e in self.evidence]
        if self.rule:
            lines.append(f"    rule: {self.rule}")
        return "\n".join(lines)


@dataclass
class Options:
    """What the verdicts may use beyond the sweep: ``metric`` (``--metric``), parsed ``bench`` JSON."""

    metric: str | None = None
    bench: dict | None = None


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
        iv = Interval(-iv.delta, -iv.hi, -iv.lo, iv.p, iv.df, iv.confidence)
    sa, sb = a.std or 0.0, b.std or 0.0
    noise = math.sqrt(((a.n - 1) * sa**2 + (b.n - 1) * sb**2) / (a.n + b.n - 2))
    outcome = BETTER if iv.lo > 0 else WORSE if iv.hi < 0 else NOISE
    note = ""
    if outcome == BETTER and ka / runs_a > kb / runs_b:
        outcome, note = NOISE, f"not better: {a_name} diverged in {ka} of {runs_a} seeds, its worst outcome"
    elif outcome == WORSE and kb / runs_b > ka / runs_a:
        outcome, note = NOISE, f"not worse: {b_name} diverged in {kb} of {runs_b} seeds, its worst outcome"
    return Comparison(a_name, b_name, iv.delta, iv, outcome, noise=noise, note=note, **common)


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


# -- the checks common to every claim -----------------------------------------------------------
def metric_bounds(metric: str) -> tuple[float, float] | None:
    """The range of a bounded metric (exact match, accuracy: [0, 1]; BLEU: [0, 100]); ``None`` otherwise."""
    base = metric.split("@")[0].rsplit("/", 1)[-1].lower()
    return BOUNDS.get(base)


def saturation(metric: str, groups: list[Group]) -> str | None:
    """A sentence when ``metric`` is saturated over ``groups`` (every group mean within
    :data:`SATURATION` of the range from the same bound), else ``None``."""
    bounds = metric_bounds(metric)
    means = [g.stat(metric).mean for g in groups if g.stat(metric) is not None and g.stat(metric).n]
    if bounds is None or not means:
        return None
    lo, hi = bounds
    tol = SATURATION * (hi - lo)
    side = "ceiling" if all(m >= hi - tol for m in means) else "floor" if all(m <= lo + tol for m in means) else None
    if side is None:
        return None
    return (
        f"{metric} is saturated at its {side} ({min(means):.4g}–{max(means):.4g} across settings): "
        f"it cannot separate them"
    )


def saturated_metrics(sweep: Sweep, groups: list[Group]) -> list[str]:
    """Sentences for every bounded metric of the sweep that is saturated over ``groups``."""
    return [s for m in sweep.metric_keys if (s := saturation(m, groups))]


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
    if c.groups is None or c.by_divergence or "@" in c.metric:
        return None
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
    if _family(cm) != base:  # e.g. BLEU decided, only val/loss logged: the loss does not track BLEU
        return None
    hb = higher_is_better(cm)
    sign = 1.0 if hb else -1.0
    out = Stability(c, cm)
    if not curves[0] or not curves[1]:
        out.problems.append(
            (
                "no validation curve",
                f"{c.a} vs {c.b}: no {cm} curve in csv/metrics.csv (cannot tell whether the ranking was stable)",
            )
        )
        return out
    last = max(max(cv) for side in curves for cv in side)
    shared = set.intersection(*(set(cv) for side in curves for cv in side))
    second = sorted(s for s in shared if s >= last / 2 and s > 0)
    chosen = spaced(second)
    for side_name, side in ((c.a, curves[0]), (c.b, curves[1])):
        gains, spans = [], set()
        for cv in side:
            xs = sorted(cv)
            if len(xs) >= 2:
                gains.append(sign * (cv[xs[-1]] - cv[xs[-2]]))
                spans.add((xs[-2], xs[-1]))
        if gains and sum(gains) / len(gains) > 0:
            span = f"steps {min(a for a, _ in spans):g}–{max(b for _, b in spans):g}" if spans else "its last interval"
            out.caveats.append(
                f"{side_name}: {cm} still improving: it changed by {sum(gains) / len(gains):.3g} over its last "
                f"validation interval ({span}; the seeds' mean; a caveat, not a blocker)"
            )
    if len(chosen) < MIN_POINTS:
        out.problems.append(
            (
                f"fewer than {MIN_POINTS} validations in the second half",
                f"{c.a} vs {c.b}: {len(chosen)} validation(s) of {cm} shared by every seed in the "
                f"second half of training (steps {last / 2:g}–{last:g}); needs ≥ {MIN_POINTS}. Fix: "
                f"set trainer.val_check_interval to at most {max(1, int(last // 8))}",
            )
        )
        return out
    for s in chosen:
        a_vals = [cv[s] for cv in curves[0]]
        b_vals = [cv[s] for cv in curves[1]]
        mean = sign * (sum(a_vals) / len(a_vals) - sum(b_vals) / len(b_vals))
        iv = None
        if len(a_vals) >= 2 and len(b_vals) >= 2:
            w = welch(a_vals, b_vals)
            iv = w if hb else Interval(-w.delta, -w.hi, -w.lo, w.p, w.df, w.confidence)
        out.points.append(StabilityPoint(s, mean + 0.0, iv))
    a0, b1 = log2_trend([p.step for p in out.points], [p.delta for p in out.points])
    out.trend = (a0, b1)
    final = out.points[-1].delta
    if equivalence_margin is None and c.outcome in (BETTER, WORSE):
        want = 1.0 if c.outcome == BETTER else -1.0
        crossed = [
            p for p in out.points if p.interval is not None and (p.interval.hi < 0 if want > 0 else p.interval.lo > 0)
        ]
        if crossed:
            p = crossed[0]
            out.problems.append(
                (
                    "late crossing",
                    f"{c.a} vs {c.b}: late crossing: at step {p.step:g} the 95 % "
                    f"interval of Δ {cm} [{p.interval.lo:+.3g}, {p.interval.hi:+.3g}] lies on the "
                    f"other side of 0 from the final result ({c.outcome})",
                )
            )
        closing = -b1 * want
        if want * final > 0 and closing > CLOSING_SHARE * abs(final):
            zero = 2 ** (-a0 / b1) if b1 else math.inf
            out.problems.append(
                (
                    "the gap is closing",
                    f"{c.a} vs {c.b}: the gap is closing: mean Δ {cm} changes "
                    f"by {b1:+.3g} per doubling of steps, more than {CLOSING_SHARE:g} of its final "
                    f"size {final:+.3g}; the trend reaches 0 at step ~{zero:.3g}",
                )
            )
    if equivalence_margin is not None:
        at_end = a0 + b1 * math.log2(out.points[-1].step)
        if abs(at_end) >= equivalence_margin:
            out.problems.append(
                (
                    "the gap trend leaves the margin",
                    f"{c.a} vs {c.b}: the fitted trend of Δ {cm} "
                    f"reaches {at_end:+.3g} at step {out.points[-1].step:g}, outside the margin "
                    f"±{equivalence_margin:.3g}",
                )
            )
    out.caveats.insert(
        0,
        f"{c.a} vs {c.b} over the second half ({cm}, steps "
        f"{', '.join(f'{p.step:g}' for p in out.points)}): Δ "
        f"{', '.join(f'{p.delta:+.3g}' for p in out.points)}; trend {b1:+.3g} per doubling",
    )
    return out


def seed_check(items: list[tuple[str, Group]], metric: str) -> list[str]:
    """Settings with fewer than :data:`MIN_SEEDS` runs that count (finished with a finite ``metric``, or
    diverged: divergence is a result)."""
    out = []
    for name, g in items:
        s = g.stat(metric)
        n = (s.n + s.n_nonfinite) if s else 0
        if n < MIN_SEEDS:
            out.append(
                f"{name}: {n} seed(s) (needs ≥ {MIN_SEEDS}). Fix: run it with more seeds, e.g. add "
                f"seed={','.join(str(i) for i in range(1, MIN_SEEDS + 1))} to the sweep's command (-m)"
            )
    return out


# -- helpers for the verdicts ---------------------------------------------------------------------
def contexts(sweep: Sweep, axes: list[str]) -> list[tuple[str, dict[tuple, Group]]]:
    """Split the sweep's groups by the swept keys *not* in ``axes``.

    Returns ``[(context label, {axis values tuple: group})]``, in group order."""
    others = [k for k in sweep.swept_keys if k not in axes]
    out: dict[tuple, dict[tuple, Group]] = {}
    for g in sweep.groups:
        ctx = tuple(g.values.get(k) for k in others)
        out.setdefault(ctx, {})[tuple(g.values.get(a) for a in axes)] = g
    return [
        (", ".join(f"{k}={fmt_value(v)}" for k, v in zip(others, ctx, strict=True)), cells)
        for ctx, cells in out.items()
    ]


def _numeric(cells: dict[tuple, Group]) -> dict[float, Group]:
    """``{value: group}`` for a one-axis context, numeric values only (bools excluded)."""
    return {k[0]: g for k, g in cells.items() if isinstance(k[0], (int, float)) and not isinstance(k[0], bool)}


def pick_metric(groups: list[Group], opts: Options) -> str | None:
    """The decision metric for ``groups``: ``--metric`` when every group has it, else the first of
    :data:`PREFERRED` that every group has; ``None`` when none is shared."""

    def present(m: str) -> bool:
        return all(g.stat(m) is not None for g in groups)

    if opts.metric:
        return opts.metric if present(opts.metric) else None
    return next((m for m in PREFERRED if present(m)), None)


def _measured(metric: str, items: list[tuple[str, Group]]) -> str:
    """``"val/loss: ratio 2: 2.31 ± 0.02 (n=3); ..."``."""
    parts = []
    for name, g in items:
        s = g.stat(metric)
        parts.append(f"{name}: {s.text() if s else 'n/a'}")
    return f"{metric}: " + "; ".join(parts)


def _count(n: float) -> str:
    return f"{n / 1e6:.3g} M" if n >= 1e6 else f"{n / 1e3:.3g} k" if n >= 1e3 else f"{n:.0f}"


def _schedule(cfg: dict) -> str:
    optim = cfg.get("optim") or {}
    sched = optim.get("scheduler") or {}
    target = str(sched.get("_target_") or "") if isinstance(sched, dict) else ""
    warm = optim.get("warmup_steps")
    lr = optim.get("lr")
    parts = [f"warm-up {warm}" if warm is not None else ""]
    if target.endswith("warmup_linear"):
        floor = sched.get("floor")
        parts.append("linear decay" + (f" to {floor:g}× peak" if isinstance(floor, (int, float)) else ""))
    elif target.endswith("inverse_sqrt"):
        parts.append("inverse-sqrt decay")
    elif target:
        parts.append(target.rsplit(".", 1)[-1])
    text = " + ".join(p for p in parts if p)
    return text + (f", peak lr {lr:g}" if isinstance(lr, (int, float)) else "")


def budget(items: list[tuple[str, Group]]) -> str:
    """The training budget of the compared settings: optimizer steps (``trainer.max_steps``, else the
    steps run), tokens seen by a finished run (characters for tiny-shakespeare) and the LR schedule,
    e.g. ``"3 000 steps, 6.1 M characters, warm-up 100 + linear decay to 0× peak, peak lr 0.003"``;
    differing steps and schedules are joined with ``/`` and ``;``, differing token counts (padded
    batches differ a little per seed) given as a range."""
    jobs = [j for _, g in items for j in g.jobs + g.diverged]
    if not jobs:
        return ""
    steps, scheds, unit = [], [], "tokens"
    counts: list[int] = []
    for j in jobs:
        cfg = j.config or {}
        ms = (cfg.get("trainer") or {}).get("max_steps")
        s = ms if isinstance(ms, int) and ms > 0 else j.global_step
        if s is not None and s not in steps:
            steps.append(s)
        if j.finished and j.tokens_seen:
            counts.append(int(j.tokens_seen))
        sch = _schedule(cfg)
        if sch and sch not in scheds:
            scheds.append(sch)
        if str((cfg.get("data") or {}).get("_target_", "")).endswith("TinyShakespeareDataModule"):
            unit = "characters"
    parts = []
    if steps:
        parts.append("/".join(f"{s:,}".replace(",", " ") for s in sorted(steps)) + " steps")
    if counts:
        lo, hi = _count(min(counts)), _count(max(counts))
        parts.append((lo if lo == hi else f"{lo}–{hi}") + f" {unit}")
    parts += ["; ".join(scheds)] if scheds else []
    return ", ".join(parts)


Recogniser = Callable[[Sweep, Options], list[Verdict]]
REGISTRY: dict[str, list[Recogniser]] = {}


def claim(cid: str) -> Callable[[Recogniser], Recogniser]:
    """Register a verdict function under claim id ``cid`` (a claim may have several, e.g. C12)."""

    def deco(fn: Recogniser) -> Recogniser:
        REGISTRY.setdefault(cid, []).append(fn)
        return fn

    return deco


def _verdict(
    cid: str, status: str, reason: str, measured: str, context: str = "", evidence: list[str] | None = None
) -> Verdict:
    return Verdict(cid, status, reason, measured, PUBLISHED[cid], context, list(evidence or []), CLAIMS[cid].rule)


def _job_name(j: Job) -> str:
    seed = j.seed
    return (f"seed {fmt_value(seed)}" if seed is not None else "") + f" ({j.path.name})"


def outcome_notes(items: list[tuple[str, Group]]) -> list[str]:
    """Evidence lines naming the diverged seeds (counted as their setting's worst outcome) and the
    crashed or unfinished jobs (not counted) of the compared settings."""
    out = []
    div = [
        f"{name}: {len(g.diverged)} of {len(g.jobs) + len(g.diverged)} seeds ("
        + ", ".join(f"{_job_name(j).strip()} at step {j.diverged_step}" for j in g.diverged)
        + ")"
        for name, g in items
        if g.diverged
    ]
    if div:
        out.append("diverged (each counted as its setting's worst outcome): " + "; ".join(div))
    crashed = [
        f"{name}: {_job_name(j).strip()}, status {j.status}" + (f": {j.error[:160]}" if j.error else "")
        for name, g in items
        for j in g.failed
    ]
    if crashed:
        out.append("crashed or unfinished, not counted: " + "; ".join(crashed))
    return out


def decide(
    cid: str,
    sweep: Sweep,
    ctx: str,
    metric: str,
    items: list[tuple[str, Group]],
    comps: list[Comparison],
    fails: list[str],
    holds: bool,
    coverage: list[str] | None = None,
    notes: list[str] | None = None,
    measured: str | None = None,
    decisive: list[Comparison] | None = None,
    margin: float | None = None,
    key: Comparison | None = None,
) -> Verdict:
    """The verdict from a claim rule's outcome and the common checks.

    Args:
        cid: the claim; ``sweep``: for the saturation notes; ``ctx``: the context label; ``metric``: the
        decision metric; ``items``: the compared settings ``(name, group)``; ``comps``: the comparisons;
        ``fails``: sentences for the parts of the rule that failed; ``holds``: every part held;
        ``coverage``: sentences for what the sweep lacks on the claim's axis; ``notes``: more evidence;
        ``measured``: the measured text (default: ``metric`` over ``items``); ``decisive``: the
        comparisons whose stability is checked (default ``comps``); ``margin``: an equivalence margin
        (the stability check then asks that the trend stay inside it); ``key``: the comparison of the
        summary table (default: the first of ``comps``).

    The rule's outcome (not supported when ``fails``, supported when ``holds``, else inconclusive) is
    replaced by inconclusive when coverage, seeds, saturation or stability fail.
    """
    problems: list[tuple[str, str]] = [("the sweep does not cover the claim's axis", p) for p in coverage or []]
    problems += [("too few seeds", p) for p in seed_check(items, metric)]
    sat = saturation(metric, [g for _, g in items])
    if sat:
        problems.append(("saturated", sat))
    caveats: list[str] = []
    stab_key: Stability | None = None
    for c in decisive if decisive is not None else comps:
        st = stability(c, margin if (margin is not None and holds) else None)
        if st is None:
            continue
        problems += st.problems
        caveats += st.caveats
        if stab_key is None or c is (key or (comps[0] if comps else None)):
            stab_key = st
    if fails:
        rule_status, rule_reason = NOT_SUPPORTED, "; ".join(fails)
    elif holds:
        rule_status, rule_reason = SUPPORTED, "every part of the rule holds"
    else:
        undecided = [c for c in comps if c.outcome in (NOISE, FEW)]
        rule_status = INCONCLUSIVE
        rule_reason = (
            "differences within the noise: " + "; ".join(f"{c.a} vs {c.b}" for c in undecided)
            if undecided
            else "the rule's parts are not decided"
        )
    sat_notes = [s for s in saturated_metrics(sweep, [g for _, g in items]) if not s.startswith(metric + " ")]
    evidence = [c.text() for c in comps] + list(notes or []) + outcome_notes(items)
    evidence += [f"{s} (not used)" for s in sat_notes]
    evidence += [f"stability: {c}" for c in dict.fromkeys(caveats)]
    if problems:
        evidence += [f"check failed: {p}" for _, p in problems]
        reason = summarise(problems) + f" (the rule alone would say: {rule_status})"
        status = INCONCLUSIVE
    else:
        status, reason = rule_status, rule_reason
    evidence.insert(0, f"decision metric: {metric}")
    v = _verdict(cid, status, reason, measured or _measured(metric, items), ctx, evidence)
    v.budget, v.key, v.metric, v.settings, v.stability = (
        budget(items),
        key or (comps[0] if comps else None),
        metric,
        list(items),
        stab_key,
    )
    return v


def summarise(problems: list[tuple[str, str]]) -> str:
    """The failed checks in one short sentence: each kind once, with the settings it concerns."""
    kinds: dict[str, list[str]] = {}
    for kind, text in problems:
        who = kinds.setdefault(kind, [])
        name = text.split(":")[0]
        if kind not in ("the sweep does not cover the claim's axis", "saturated") and name not in who:
            who.append(name)
    out = []
    for kind, who in kinds.items():
        if kind == "saturated":
            out.append(next(t for k, t in problems if k == kind))
        elif kind == "the sweep does not cover the claim's axis":
            out.append(next(t for k, t in problems if k == kind))
        else:
            out.append(f"{kind}: {', '.join(who)}" if who else kind)
    return "; ".join(out)


def _missing(cid: str, need: str) -> list[Verdict]:
    return [
        _verdict(
            cid,
            INCONCLUSIVE,
            f"the sweep does not cover the claim's axis: no context has {need}",
            "n/a",
            evidence=[f"check failed: the sweep lacks {need}"],
        )
    ]


def _no_metric(cid: str, ctx: str) -> Verdict:
    return _verdict(
        cid,
        INCONCLUSIVE,
        f"no continuous held-out metric shared by the compared settings (one of {', '.join(PREFERRED)}; or --metric)",
        "n/a",
        ctx,
    )


def _simple_axis(cid: str, sweep: Sweep, opts: Options, key: str, good: Any, bad: Any) -> list[Verdict]:
    """Verdicts for claims "``good`` is better than ``bad`` on ``key``" (C10)."""
    out = []
    for ctx, cells in contexts(sweep, [key]):
        g, b = cells.get((good,)), cells.get((bad,))
        if g is None or b is None:
            continue
        metric = pick_metric([g, b], opts)
        if metric is None:
            out.append(_no_metric(cid, ctx))
            continue
        gn, bn = fmt_value(good), fmt_value(bad)
        c = compare_groups(g, b, metric, gn, bn)
        fails = [f"{bn} is better than {gn}"] if c.outcome == WORSE else []
        out.append(decide(cid, sweep, ctx, metric, [(gn, g), (bn, b)], [c], fails, c.outcome == BETTER))
    return out or _missing(cid, f"both {key}={fmt_value(good)} and {fmt_value(bad)}")


BENCH_CLAIMS = ("C7", "C8")
"""Claims decided from ``bench.json``, not from the sweep's jobs."""


def evaluate(sweep: Sweep, opts: Options | None = None) -> list[Verdict]:
    """Every verdict of every registered claim the sweep addresses, in claim order. Crashed or
    unfinished jobs outside a verdict's compared settings (e.g. a setting whose every seed crashed,
    which then has no group) are named in that verdict too."""
    opts = opts or Options()
    out: list[Verdict] = []
    for cid in sorted(REGISTRY, key=lambda c: int(c[1:])):
        for fn in REGISTRY[cid]:
            out += fn(sweep, opts)
    for v in out:
        if v.claim in BENCH_CLAIMS:
            continue
        named = {id(j) for _, g in v.settings for j in g.failed}
        rest = [j for j in sweep.failed if id(j) not in named]
        if rest:
            v.evidence.append(
                "crashed or unfinished elsewhere in the sweep, not counted: "
                + "; ".join(
                    f"{j.override_text()} ({j.path.name}), status {j.status}"
                    + (f": {j.error[:120]}" if j.error else "")
                    for j in rest
                )
            )
    return out
