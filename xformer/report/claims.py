"""Claim verdicts: which design claims (C1–C12, :mod:`xformer.report.catalog`) a sweep addresses, and
whether its runs support them.

Each verdict function is registered under its claim id in :data:`REGISTRY`, is named like the claim's
config (``c1_ffn_ratio`` ↔ ``conf/experiment/claims/c1_ffn_ratio.yaml``) and maps a
:class:`~xformer.report.aggregate.Sweep` (plus :class:`Options`) to a list of :class:`Verdict` (empty:
the sweep does not address the claim). A verdict is **supported**, **not supported** or
**inconclusive**; it carries the evidence (every comparison with its interval, every check that
failed), the rule it applied and the measured numbers beside the published ones.

The statistics (:mod:`xformer.report.stats`) and the checks that make a verdict inconclusive whatever
the claim's own rule says are stated in :data:`xformer.report.catalog.COMMON_RULE`; each claim's rule
is in :data:`xformer.report.catalog.CLAIMS`. Claims are judged separately in every *context*: each
combination of the other swept keys (e.g. C1 at ``model.param_budget=null`` and at a fixed budget).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .aggregate import Group, Stat, Sweep, fmt_value, read_curves, value_sort_key
from .benchjson import bench_exponents, fit_rows, leaves
from .catalog import CLAIMS, COMMON_RULE, MIN_SEEDS
from .stats import Interval, equivalent, welch

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
BETTER, WORSE, NOISE, FEW = "better", "worse", "within noise", "too few seeds"
PREFERRED = ("test/loss", "val/loss", "test/bleu", "val/bleu", "test/ppl", "val/ppl")
"""Continuous held-out metrics, in the order the decision metric is picked from."""
LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "error", "wer", "cer")
BOUNDS = {"exact_match": (0.0, 1.0), "acc": (0.0, 1.0), "accuracy": (0.0, 1.0), "bleu": (0.0, 100.0)}
"""Range of the bounded metrics, by the last part of their name (``test/exact_match@2x`` → exact_match)."""
SATURATION = 0.02         # saturated: every mean within 2 % of the range from one bound
TRAIN_FLOOR = 1e-3        # under-training threshold is at least 0.1 % of the last validation value
EQUIV_REL = 0.01          # C6 equivalence margin, relative to the larger mean
C2_TOL = 0.03             # C2: |share - 2/3| allowed
C7_OK, C7_BAD = 0.3, 0.5  # C7: |e - 2| <= OK consistent; |e - 2| > BAD contradicts

PUBLISHED = {cid: c.published for cid, c in CLAIMS.items()}


# -- results ------------------------------------------------------------------------------------
@dataclass
class Verdict:
    """The outcome for one claim in one context.

    Attributes:
        claim: ``"C1"`` ...; ``status``: supported | not supported | inconclusive; ``reason``: why, in
        one sentence; ``measured``: the numbers; ``published``: the paper's; ``context``: the other swept
        values the verdict holds at (``""``: all); ``evidence``: the comparisons with their intervals and
        the checks that failed; ``rule``: the claim's rule (:mod:`xformer.report.catalog`).
    """

    claim: str
    status: str
    reason: str
    measured: str
    published: str
    context: str = ""
    evidence: list[str] = field(default_factory=list)
    rule: str = ""

    def line(self) -> str:
        """One line: ``C1 [ctx]: supported: reason | measured ... | published ...``."""
        ctx = f" [{self.context}]" if self.context else ""
        return (f"{self.claim}{ctx}: {self.status}: {self.reason} | measured {self.measured} "
                f"| published {self.published}")

    def block(self) -> str:
        """:meth:`line`, then one indented line per piece of evidence and the rule (what the CLI prints)."""
        lines = [self.line()] + [f"    evidence: {e}" for e in self.evidence]
        if self.rule:
            lines.append(f"    rule: {self.rule}")
        return "\n".join(lines)


@dataclass
class Comparison:
    """Setting A against setting B on one metric (Welch's t, :func:`xformer.report.stats.welch`).

    ``delta`` is A's improvement over B in the metric's better direction (positive: A better; NaN when
    a side has no finite value), ``interval`` its 95 % interval in the same direction (``None`` with
    fewer than :data:`MIN_SEEDS` seeds on a side or a diverged side), ``outcome`` better | worse |
    within noise | too few seeds, ``n_a``/``n_b`` the finite seeds, ``noise`` the pooled sample std."""

    a: str
    b: str
    delta: float
    interval: Interval | None
    outcome: str
    n_a: int = 0
    n_b: int = 0
    noise: float | None = None

    def text(self) -> str:
        head = f"{self.a} vs {self.b}: "
        if self.interval is not None:
            iv = self.interval
            return f"{head}Δ {iv.text()}, Welch p={iv.p:.2g}, n={self.n_a}/{self.n_b} → {self.outcome}"
        delta = f"{self.delta:+.3g}" if math.isfinite(self.delta) else ("n/a" if math.isnan(self.delta)
                                                                           else f"{self.delta:+}")
        return f"{head}Δ {delta}, n={self.n_a}/{self.n_b} → {self.outcome}"


@dataclass
class Options:
    """What the verdicts may use beyond the sweep: ``metric`` (``--metric``), parsed ``bench`` JSON."""

    metric: str | None = None
    bench: dict | None = None


def higher_is_better(metric: str) -> bool:
    """False for loss-like metrics (``val/loss``, ``val/ppl``, ``test/loss@2x`` ...), True otherwise."""
    base = metric.split("@")[0].rsplit("/", 1)[-1].lower()
    return not any(word in base for word in LOWER_IS_BETTER)


def compare(a: Stat | None, b: Stat | None, higher: bool, a_name: str = "A", b_name: str = "B",
            min_seeds: int = MIN_SEEDS) -> Comparison:
    """Compare two settings' per-seed values with Welch's t (rule in :data:`COMMON_RULE`).

    A side whose runs all diverged (no finite value, at least 2 non-finite) is *worse* than a side with
    ``min_seeds`` finite values."""
    if a is None or b is None:
        return Comparison(a_name, b_name, math.nan, None, FEW)
    a_div = a.n == 0 and a.n_nonfinite >= 2
    b_div = b.n == 0 and b.n_nonfinite >= 2
    if a_div and b.n >= min_seeds:
        return Comparison(a_name, b_name, -math.inf, None, WORSE, a.n, b.n)
    if b_div and a.n >= min_seeds:
        return Comparison(a_name, b_name, math.inf, None, BETTER, a.n, b.n)
    sign = 1.0 if higher else -1.0
    delta = sign * (a.mean - b.mean) if a.n and b.n else math.nan
    if a.n < min_seeds or b.n < min_seeds:
        return Comparison(a_name, b_name, delta, None, FEW, a.n, b.n)
    iv = welch(a.values, b.values)
    if not higher:
        iv = Interval(-iv.delta, -iv.hi, -iv.lo, iv.p, iv.df, iv.confidence)
    sa, sb = a.std or 0.0, b.std or 0.0
    noise = math.sqrt(((a.n - 1) * sa ** 2 + (b.n - 1) * sb ** 2) / (a.n + b.n - 2))
    outcome = BETTER if iv.lo > 0 else WORSE if iv.hi < 0 else NOISE
    return Comparison(a_name, b_name, iv.delta, iv, outcome, a.n, b.n, noise)


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
    return (f"{metric} is saturated at its {side} ({min(means):.4g}–{max(means):.4g} across settings): "
            f"it cannot separate them")


def saturated_metrics(sweep: Sweep, groups: list[Group]) -> list[str]:
    """Sentences for every bounded metric of the sweep that is saturated over ``groups``."""
    return [s for m in sweep.metric_keys if (s := saturation(m, groups))]


def curve_metric(metric: str, jobs_keys: set[str]) -> str:
    """The validation curve that tells whether training had finished for a decision metric:
    its ``val/`` form when logged (``test/loss@2x`` → ``val/loss``), else ``val/loss``."""
    base = metric.split("@")[0].rsplit("/", 1)[-1]
    return f"val/{base}" if f"val/{base}" in jobs_keys else "val/loss"


def training_check(items: list[tuple[str, Group]], metric: str) -> list[str]:
    """Under-training check of :data:`COMMON_RULE` (d) over the compared settings.

    For each job the improvement over its last validation interval is read from ``csv/metrics.csv``
    (the metric's ``val/`` form, else ``val/loss``); a setting is under-trained when its mean
    improvement exceeds the seed noise (pooled sample std of the last validation over all settings,
    at least :data:`TRAIN_FLOOR` of its value) or when a job has fewer than two validations.

    Returns:
        one sentence per problem (empty: every setting had finished training).
    """
    keys = {m for _, g in items for m in g.stats}
    cm = curve_metric(metric, keys)
    hb = higher_is_better(cm)
    lasts: dict[str, list[float]] = {}
    gains: dict[str, list[float]] = {}
    problems = []
    for name, g in items:
        few = 0
        for j in g.jobs:
            _, ys = read_curves(j, (cm,)).get(cm, ([], []))
            ys = [y for y in ys if math.isfinite(y)]
            if len(ys) < 2:
                few += 1
                continue
            lasts.setdefault(name, []).append(ys[-1])
            gains.setdefault(name, []).append((ys[-1] - ys[-2]) if hb else (ys[-2] - ys[-1]))
        if few:
            problems.append(f"{name}: {few} run(s) with fewer than 2 validations of {cm} (cannot tell whether "
                            f"training had finished)")
    dof = sum(len(v) - 1 for v in lasts.values() if len(v) > 1)
    if dof <= 0:
        return problems
    pooled = math.sqrt(sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in lasts.values() if len(v) > 1) / dof)
    for name, gs in gains.items():
        level = sum(lasts[name]) / len(lasts[name])
        noise = max(pooled, TRAIN_FLOOR * abs(level))
        mean_gain = sum(gs) / len(gs)
        if mean_gain > noise:
            problems.append(f"{name}: under-trained, {cm} still improved by {mean_gain:.3g} over its last "
                            f"validation interval (seed noise {noise:.3g})")
    return problems


def seed_check(items: list[tuple[str, Group]], metric: str) -> list[str]:
    """Settings with fewer than :data:`MIN_SEEDS` finished seeds with a finite ``metric``
    (all-diverged settings are not counted as short: divergence is a result)."""
    out = []
    for name, g in items:
        s = g.stat(metric)
        n = s.n if s else 0
        if n < MIN_SEEDS and not (s and s.n == 0 and s.n_nonfinite >= 2):
            out.append(f"{name}: {n} seed(s) (needs ≥ {MIN_SEEDS})")
    return out


def checks(sweep: Sweep, items: list[tuple[str, Group]], metric: str) -> list[str]:
    """Every common check of :data:`COMMON_RULE` ((b) seeds, (c) saturation, (d) training) that fails."""
    groups = [g for _, g in items]
    out = seed_check(items, metric)
    sat = saturation(metric, groups)
    if sat:
        out.append(sat)
    return out + training_check(items, metric)


# -- helpers for the verdicts ---------------------------------------------------------------------
def contexts(sweep: Sweep, axes: list[str]) -> list[tuple[str, dict[tuple, Group]]]:
    """Split the sweep's groups by the swept keys *not* in ``axes``.

    Returns ``[(context label, {axis values tuple: group})]``, in group order."""
    others = [k for k in sweep.swept_keys if k not in axes]
    out: dict[tuple, dict[tuple, Group]] = {}
    for g in sweep.groups:
        ctx = tuple(g.values.get(k) for k in others)
        out.setdefault(ctx, {})[tuple(g.values.get(a) for a in axes)] = g
    return [(", ".join(f"{k}={fmt_value(v)}" for k, v in zip(others, ctx)), cells) for ctx, cells in out.items()]


def _numeric(cells: dict[tuple, Group]) -> dict[float, Group]:
    """``{value: group}`` for a one-axis context, numeric values only (bools excluded)."""
    return {k[0]: g for k, g in cells.items()
            if isinstance(k[0], (int, float)) and not isinstance(k[0], bool)}


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


Recogniser = Callable[[Sweep, Options], list[Verdict]]
REGISTRY: dict[str, list[Recogniser]] = {}


def claim(cid: str) -> Callable[[Recogniser], Recogniser]:
    """Register a verdict function under claim id ``cid`` (a claim may have several, e.g. C12)."""
    def deco(fn: Recogniser) -> Recogniser:
        REGISTRY.setdefault(cid, []).append(fn)
        return fn
    return deco


def _verdict(cid: str, status: str, reason: str, measured: str, context: str = "",
             evidence: list[str] | None = None) -> Verdict:
    return Verdict(cid, status, reason, measured, PUBLISHED[cid], context, list(evidence or []),
                   CLAIMS[cid].rule)


def decide(cid: str, sweep: Sweep, ctx: str, metric: str, items: list[tuple[str, Group]],
           comps: list[Comparison], fails: list[str], holds: bool, coverage: list[str] | None = None,
           notes: list[str] | None = None, measured: str | None = None) -> Verdict:
    """The verdict from a claim rule's outcome and the common checks.

    Args:
        cid: the claim; ``sweep``: for the saturation notes; ``ctx``: the context label; ``metric``: the
        decision metric; ``items``: the compared settings ``(name, group)``; ``comps``: the comparisons;
        ``fails``: sentences for the parts of the rule that failed; ``holds``: every part held;
        ``coverage``: sentences for what the sweep lacks on the claim's axis; ``notes``: more evidence;
        ``measured``: the measured text (default: ``metric`` over ``items``).

    The rule's outcome (not supported when ``fails``, supported when ``holds``, else inconclusive) is
    replaced by inconclusive when coverage, seeds, saturation or training fail.
    """
    problems = list(coverage or []) + checks(sweep, items, metric)
    if fails:
        rule_status, rule_reason = NOT_SUPPORTED, "; ".join(fails)
    elif holds:
        rule_status, rule_reason = SUPPORTED, "every part of the rule holds"
    else:
        undecided = [c for c in comps if c.outcome in (NOISE, FEW)]
        rule_status = INCONCLUSIVE
        rule_reason = ("differences within the noise: " + "; ".join(f"{c.a} vs {c.b}" for c in undecided)
                       if undecided else "the rule's parts are not decided")
    sat_notes = [s for s in saturated_metrics(sweep, [g for _, g in items]) if not s.startswith(metric + " ")]
    evidence = [c.text() for c in comps] + list(notes or [])
    evidence += [f"{s} (not used)" for s in sat_notes]
    if problems:
        evidence += [f"check failed: {p}" for p in problems]
        reason = summarise(problems) + f" (the rule alone would say: {rule_status})"
        status = INCONCLUSIVE
    else:
        status, reason = rule_status, rule_reason
    evidence.insert(0, f"decision metric: {metric}")
    return _verdict(cid, status, reason, measured or _measured(metric, items), ctx, evidence)


def summarise(problems: list[str]) -> str:
    """The failed checks in one short sentence: the coverage sentence, then the settings with too few
    seeds, too few validations or still improving, and the saturation sentence."""
    out = [p for p in problems if p.startswith("the sweep does not cover") or "saturated" in p]
    for marker, label in ((" seed(s) (needs", "too few seeds"), ("fewer than 2 validations", "fewer than 2 validations"),
                          ("under-trained", "under-trained (still improving by more than the seed noise)")):
        names = [p.split(":")[0] for p in problems if marker in p]
        if names:
            out.append(f"{label}: {', '.join(dict.fromkeys(names))}")
    return "; ".join(out)


def _missing(cid: str, need: str) -> list[Verdict]:
    return [_verdict(cid, INCONCLUSIVE, f"the sweep does not cover the claim's axis: no context has {need}", "n/a",
                     evidence=[f"check failed: the sweep lacks {need}"])]


def _no_metric(cid: str, ctx: str) -> Verdict:
    return _verdict(cid, INCONCLUSIVE, "no continuous held-out metric shared by the compared settings "
                    f"(one of {', '.join(PREFERRED)}; or --metric)", "n/a", ctx)


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
        c = compare(g.stat(metric), b.stat(metric), higher_is_better(metric), gn, bn)
        fails = [f"{bn} is better than {gn}"] if c.outcome == WORSE else []
        out.append(decide(cid, sweep, ctx, metric, [(gn, g), (bn, b)], [c], fails, c.outcome == BETTER))
    return out or _missing(cid, f"both {key}={fmt_value(good)} and {fmt_value(bad)}")


# -- the claims ---------------------------------------------------------------------------------
@claim("C1")
def c1_ffn_ratio(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C1: FFN ratio 4 beats every ratio below it; the gain above 4 is smaller per added parameter."""
    key = "model.ffn_ratio"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        r = _numeric(cells)
        if 4 not in r:
            continue
        below, above = sorted(v for v in r if v < 4), sorted(v for v in r if v > 4)
        coverage = [] if below and above else [
            "the sweep does not cover the claim's axis: C1 needs ratio 4 and ratios below and above 4 "
            f"(swept: {', '.join(fmt_value(v) for v in sorted(r))})"]
        metric = pick_metric(list(r.values()), opts)
        if metric is None:
            out.append(_no_metric("C1", ctx))
            continue
        hb = higher_is_better(metric)
        items = [(f"ratio {fmt_value(v)}", r[v]) for v in sorted(r)]
        low = [compare(r[4].stat(metric), r[v].stat(metric), hb, "4", fmt_value(v)) for v in below]
        comps, fails, notes = list(low), [f"ratio {c.b} is better than 4" for c in low if c.outcome == WORSE], []
        diminishing = None
        if below and above:
            lo_v, hi_v = below[-1], above[-1]
            c_up = compare(r[hi_v].stat(metric), r[4].stat(metric), hb, fmt_value(hi_v), "4")
            comps.append(c_up)
            c_low = next(c for c in low if c.b == fmt_value(lo_v))
            if c_low.interval is not None and c_up.interval is not None:
                d_low, d_up, unit = _gain_units(r[lo_v], r[4], r[hi_v], lo_v, hi_v)
                g_low = (c_low.interval.lo / d_low, c_low.delta / d_low, c_low.interval.hi / d_low)
                g_up = (c_up.interval.lo / d_up, c_up.delta / d_up, c_up.interval.hi / d_up)
                notes.append(f"gain {unit}: {fmt_value(lo_v)}→4 {g_low[1]:+.3g} [{g_low[0]:+.3g}, {g_low[2]:+.3g}], "
                             f"4→{fmt_value(hi_v)} {g_up[1]:+.3g} [{g_up[0]:+.3g}, {g_up[2]:+.3g}]")
                if g_up[2] < g_low[0]:
                    diminishing = True
                elif g_up[0] > g_low[2]:
                    diminishing = False
                    fails.append(f"no diminishing return: {fmt_value(hi_v)} gains more over 4 {unit} than 4 "
                                 f"over {fmt_value(lo_v)}")
                else:
                    notes.append("diminishing return not decided (the gain intervals overlap)")
        holds = bool(low) and all(c.outcome == BETTER for c in low) and diminishing is True
        out.append(decide("C1", sweep, ctx, metric, items, comps, fails, holds, coverage, notes))
    return out or _missing("C1", "ratio 4")


def _gain_units(g_lo: Group, g4: Group, g_hi: Group, lo: float, hi: float) -> tuple[float, float, str]:
    """Divisors turning C1's two gains into rates: million added parameters when all three settings have
    increasing parameter totals, else doublings of the ratio."""
    p_lo, p4, p_hi = (g.params.get("total") for g in (g_lo, g4, g_hi))
    if p_lo and p4 and p_hi and p_lo < p4 < p_hi:
        return (p4 - p_lo) / 1e6, (p_hi - p4) / 1e6, "per M added params"
    return math.log2(4 / lo), math.log2(hi / 4), "per doubling"


@claim("C2")
def c2_ffn_share(sweep: Sweep, opts: Options) -> list[Verdict]:
    """The FFN's share of a block's parameters against 2/3, from the parameter counts."""
    if not sweep.groups:
        return []
    rows = [(g, block_share(g)) for g in sweep.groups if g.params.get("ffn") and g.params.get("attention")]
    if not rows:
        return [_verdict("C2", INCONCLUSIVE, "no parameter counts in metrics.json", "n/a")]
    base = [(g, s) for g, s in rows if s is not None and is_base_shape(g.config(), (g.jobs or g.diverged or g.failed)[0].choices)]
    measured = "; ".join(f"{g.label()}: {s:.3f}" if s is not None else f"{g.label()}: n/a" for g, s in rows)
    measured = "FFN share of block: " + measured
    if not base:
        return [_verdict("C2", INCONCLUSIVE, "no run of the base shape (d_ff = 4·d_model, n_heads·d_head = "
                         "d_model, relu/gelu FFN)", measured)]
    off = [(g, s) for g, s in base if abs(s - 2 / 3) > C2_TOL]
    status = NOT_SUPPORTED if off else SUPPORTED
    worst = max(base, key=lambda gs: abs(gs[1] - 2 / 3))
    reason = (f"{len(base)} base-shape setting(s), largest deviation from 2/3: {worst[1] - 2 / 3:+.3f} "
              f"(tolerance ±{C2_TOL})")
    return [_verdict("C2", status, reason, measured)]


def layer_counts(cfg: dict, choices: dict | None = None) -> tuple[int, int] | None:
    """(attention sub-layers, FFN layers) of the model in ``cfg``; ``None`` when the shape is unknown."""
    model = cfg.get("model") or {}
    target = str(model.get("_target_") or (choices or {}).get("model/arch") or "")
    n_enc, n_dec = model.get("n_encoder_layers"), model.get("n_decoder_layers")
    try:
        if target.endswith(("EncoderDecoder", "encoder_decoder")):
            return int(n_enc) + 2 * int(n_dec), int(n_enc) + int(n_dec)
        if target.endswith(("DecoderOnly", "decoder_only")):
            return int(n_dec), int(n_dec)
        if target.endswith(("EncoderOnly", "encoder_only")):
            return int(n_enc), int(n_enc)
    except (TypeError, ValueError):
        return None
    return None


def block_share(g: Group) -> float | None:
    """FFN parameters per FFN layer / (that + attention parameters per attention sub-layer)."""
    job = (g.jobs or g.diverged or g.failed)[0]
    counts = layer_counts(g.config(), job.choices)
    if counts is None:
        return None
    n_attn, n_ffn = counts
    a, f = g.params["attention"] / n_attn, g.params["ffn"] / n_ffn
    return f / (f + a)


def is_base_shape(cfg: dict, choices: dict) -> bool:
    """d_ff = 4·d_model, n_heads·d_head = d_model, a relu/gelu FFN (not SwiGLU) and no parameter budget."""
    m = cfg.get("model") or {}
    try:
        d = int(m["d_model"])
        d_ff = m.get("d_ff") or float(m["ffn_ratio"]) * d
        d_head = m.get("d_head") or d // int(m["n_heads"])
        inner = int(m["n_heads"]) * int(d_head)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return False
    ffn_node = m.get("ffn")
    ffn = str(choices.get("model/ffn") or (ffn_node.get("_target_") if isinstance(ffn_node, dict) else ffn_node))
    return (m.get("param_budget") is None and float(d_ff) == 4 * d and inner == d
            and "swiglu" not in ffn.lower())


@claim("C3")
def c3_heads(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C3: several heads beat one; too many heads hurt again."""
    key = "model.n_heads"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        h = _numeric(cells)
        multi = sorted(v for v in h if v > 1)
        if 1 not in h or not multi:
            continue
        coverage = [] if len(multi) >= 2 else [
            "the sweep does not cover the claim's axis: C3 needs 1 head and at least two head counts above 1"]
        metric = pick_metric(list(h.values()), opts)
        if metric is None:
            out.append(_no_metric("C3", ctx))
            continue
        hb = higher_is_better(metric)
        sign = 1 if hb else -1
        best = max(multi, key=lambda v: sign * h[v].stat(metric).mean if h[v].stat(metric).n else -math.inf)
        ci = compare(h[best].stat(metric), h[1].stat(metric), hb, f"h={fmt_value(best)}", "h=1")
        comps, fails = [ci], []
        if ci.outcome == WORSE:
            fails.append("one head is better than the best multi-head setting")
        ii_holds = False
        top = multi[-1]
        if len(multi) >= 2:
            if top != best:
                cii = compare(h[best].stat(metric), h[top].stat(metric), hb, f"h={fmt_value(best)}",
                              f"h={fmt_value(top)}")
                ii_holds = cii.outcome == BETTER
            else:
                cii = compare(h[top].stat(metric), h[multi[-2]].stat(metric), hb, f"h={fmt_value(top)}",
                              f"h={fmt_value(multi[-2])}")
                if cii.outcome == BETTER:
                    fails.append("the largest head count is the best (too many heads do not hurt)")
            comps.append(cii)
        items = [(f"h={fmt_value(v)}", h[v]) for v in sorted(h)]
        out.append(decide("C3", sweep, ctx, metric, items, comps, fails, ci.outcome == BETTER and ii_holds, coverage))
    return out or _missing("C3", "n_heads 1 and > 1")


def diverged(g: Group, metric: str) -> int:
    """Runs of ``g`` that diverged: recorded as diverged (``Group.diverged``), or finished with a
    non-finite ``metric`` or ``val/loss``."""
    n = len(g.diverged)
    for j in g.jobs:
        vals = [j.metrics.get(metric), j.metrics.get("val/loss")]
        n += any(v is not None and not math.isfinite(v) for v in vals)
    return n


@claim("C4")
def c4_norm_warmup(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C4: Post-LN needs warm-up; Pre-LN does not."""
    nk, wk = "model/norm", "optim.warmup_steps"
    if nk not in sweep.swept_keys or wk not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [nk, wk]):
        warm = sorted({w for (_, w) in cells if isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0})
        if not warm:
            continue
        w = warm[-1]
        grid = {(n, s): cells.get((n, s)) for n in ("pre", "post") for s in (0, w)}
        if any(g is None for g in grid.values()):
            continue
        groups = list(grid.values())
        metric = pick_metric(groups, opts)
        if metric is None:
            out.append(_no_metric("C4", ctx))
            continue
        hb = higher_is_better(metric)
        div = {k: diverged(g, metric) for k, g in grid.items()}
        ca = compare(grid["post", w].stat(metric), grid["post", 0].stat(metric), hb, f"post@{w}", "post@0")
        cb = compare(grid["pre", 0].stat(metric), grid["pre", w].stat(metric), hb, "pre@0", f"pre@{w}")
        a_holds = ca.outcome == BETTER or div["post", 0] > div["post", w]
        a_fails = not a_holds and ca.outcome == WORSE
        b_fails = cb.outcome == WORSE or div["pre", 0] > 0
        b_holds = cb.outcome in (BETTER, NOISE) and not b_fails
        fails = (["Post-LN does better without warm-up"] if a_fails else []) + \
                (["Pre-LN suffers without warm-up"] if b_fails else [])
        notes = ["diverged runs: " + ", ".join(f"{n}@{s}: {div[n, s]}" for n, s in grid)]
        items = [(f"{n}@{s}", g) for (n, s), g in grid.items()]
        out.append(decide("C4", sweep, ctx, metric, items, [ca, cb], fails, a_holds and b_holds, notes=notes))
    return out or _missing("C4", "pre and post at warm-up 0 and > 0")


LENGTH_RE = re.compile(r"^(?P<base>.+)@(?P<n>\d+(?:\.\d+)?)x$")


def length_metrics(keys: list[str], base: str | None = None) -> tuple[str, dict[float, str]] | None:
    """The ``@Nx`` metric family used by C5: ``(base, {N: key})`` with some N > 1, or ``None``."""
    families: dict[str, dict[float, str]] = {}
    for k in keys:
        m = LENGTH_RE.match(k)
        if m:
            families.setdefault(m["base"], {})[float(m["n"])] = k
    order = [base] if base else ["test/loss", "test/bleu", "test/exact_match", "test/acc"]
    order += sorted(families)
    for b in order:
        fam = families.get(b or "")
        if fam and any(n > 1 for n in fam):
            return b, dict(sorted(fam.items()))
    return None


@claim("C5")
def c5_pe_length(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C5: sinusoidal positions extrapolate to longer test sequences; learned do not."""
    key = "model/pe"
    base = opts.metric.split("@")[0] if opts.metric else None
    fam = length_metrics(sweep.metric_keys, base)
    if key not in sweep.swept_keys or fam is None:
        return []
    base, lengths = fam
    hb = higher_is_better(base)
    longest = max(lengths)
    out = []
    for ctx, cells in contexts(sweep, [key]):
        sin, lrn = cells.get(("sinusoidal",)), cells.get(("learned",))
        if sin is None or lrn is None:
            continue
        comps = [compare(sin.stat(k), lrn.stat(k), hb, f"sinusoidal@{n:g}x", f"learned@{n:g}x")
                 for n, k in lengths.items() if n > 1]
        fails = [f"learned is better than sinusoidal at {c.a.split('@')[1]}" for c in comps if c.outcome == WORSE]
        holds = any(c.outcome == BETTER for c in comps)
        others = sorted((pe for (pe,) in cells if pe not in ("sinusoidal", "learned")), key=value_sort_key)
        notes = [compare(cells[(pe,)].stat(lengths[longest]), sin.stat(lengths[longest]), hb,
                         f"{fmt_value(pe)}@{longest:g}x", f"sinusoidal@{longest:g}x").text() for pe in others]
        parts = []
        for (pe,), g in sorted(cells.items(), key=lambda kv: value_sort_key(kv[0][0])):
            vals = ", ".join(f"{n:g}x {g.stat(k).text() if g.stat(k) else 'n/a'}" for n, k in lengths.items())
            parts.append(f"{fmt_value(pe)}: {vals}")
        items = [("sinusoidal", sin), ("learned", lrn)]
        out.append(decide("C5", sweep, ctx, lengths[longest], items, comps, fails, holds, notes=notes,
                          measured=f"{base}: " + "; ".join(parts)))
    return out or _missing("C5", "both sinusoidal and learned")


@claim("C6")
def c6_pe_in_distribution(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C6: learned and sinusoidal positions give nearly the same in-distribution quality (equivalence)."""
    key = "model/pe"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        sin, lrn = cells.get(("sinusoidal",)), cells.get(("learned",))
        if sin is None or lrn is None:
            continue
        metric = pick_metric([sin, lrn], opts)
        if metric is None:
            out.append(_no_metric("C6", ctx))
            continue
        s, l = sin.stat(metric), lrn.stat(metric)
        c = compare(s, l, higher_is_better(metric), "sinusoidal", "learned")
        fails, holds, notes = [], False, []
        if c.interval is not None:
            margin = EQUIV_REL * max(abs(s.mean), abs(l.mean))
            if margin > 0:
                holds, iv90 = equivalent(s.values, l.values, margin)
                notes.append(f"equivalence margin ±{margin:.3g} ({EQUIV_REL:.0%} of the larger mean); 90 % interval "
                             f"of sinusoidal − learned [{iv90.lo:+.3g}, {iv90.hi:+.3g}] → "
                             f"{'inside' if holds else 'not inside'} the margin (TOST)")
                if c.outcome in (BETTER, WORSE) and abs(c.delta) > margin:
                    fails.append(f"the two differ by {abs(c.delta):.3g}, more than the margin {margin:.3g}")
        out.append(decide("C6", sweep, ctx, metric, [("sinusoidal", sin), ("learned", lrn)], [c], fails, holds,
                          notes=notes))
    return out or _missing("C6", "both sinusoidal and learned")


def head_size(cfg: dict) -> float | None:
    """d_k of a config: ``model.d_head``, else ``d_model / n_heads``."""
    m = cfg.get("model") or {}
    try:
        return float(m.get("d_head") or int(m["d_model"]) / int(m["n_heads"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


@claim("C9")
def c9_attn_scale(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C9: 1/√d_k scaling helps, decided at the largest head size."""
    key = "model.attn_scale"
    if key not in sweep.swept_keys:
        return []
    out = []
    size_keys = [k for k in ("model.d_head", "model.n_heads", "model.d_model") if k in sweep.swept_keys]
    for ctx, cells in contexts(sweep, [key] + size_keys):
        by_dk: dict[float, dict[bool, Group]] = {}
        for vals, g in cells.items():
            dk = head_size(g.config())
            if dk is not None and isinstance(vals[0], bool):
                by_dk.setdefault(dk, {}).setdefault(vals[0], g)
        both = sorted(dk for dk, s in by_dk.items() if len(s) == 2)
        if not both:
            continue
        metric = pick_metric([g for dk in both for g in by_dk[dk].values()], opts)
        if metric is None:
            out.append(_no_metric("C9", ctx))
            continue
        hb = higher_is_better(metric)
        comps = [compare(by_dk[dk][True].stat(metric), by_dk[dk][False].stat(metric), hb,
                         f"scaled@d_k={dk:g}", f"unscaled@d_k={dk:g}") for dk in both]
        top = comps[-1]
        fails = ["unscaled is better than scaled at the largest d_k"] if top.outcome == WORSE else []
        items = [(f"{'scaled' if s else 'unscaled'}@d_k={dk:g}", by_dk[dk][s]) for dk in both for s in (True, False)]
        decided = [(f"scaled@d_k={both[-1]:g}", by_dk[both[-1]][True]), (f"unscaled@d_k={both[-1]:g}",
                                                                          by_dk[both[-1]][False])]
        v = decide("C9", sweep, ctx, metric, decided, list(reversed(comps)), fails, top.outcome == BETTER,
                   notes=[f"decided at d_k={both[-1]:g}"], measured=_measured(metric, items))
        out.append(v)
    return out or _missing("C9", "attn_scale true and false at one head size")


@claim("C10")
def c10_encoder_attention(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C10: a full (bidirectional) encoder beats a causal one."""
    if "model/attention" not in sweep.swept_keys:
        return []
    return _simple_axis("C10", sweep, opts, "model/attention", "full", "causal")


@claim("C11")
def c11_d_head(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C11: a larger key size beats a smaller one (largest against smallest d_head)."""
    key = "model.d_head"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        d = _numeric(cells)
        if len(d) < 2:
            continue
        lo, hi = min(d), max(d)
        metric = pick_metric(list(d.values()), opts)
        if metric is None:
            out.append(_no_metric("C11", ctx))
            continue
        c = compare(d[hi].stat(metric), d[lo].stat(metric), higher_is_better(metric),
                    f"d_head={fmt_value(hi)}", f"d_head={fmt_value(lo)}")
        fails = [f"d_head={fmt_value(lo)} is better than d_head={fmt_value(hi)}"] if c.outcome == WORSE else []
        items = [(f"d_head={fmt_value(v)}", d[v]) for v in sorted(d)]
        out.append(decide("C11", sweep, ctx, metric, [items[0], items[-1]], [c], fails, c.outcome == BETTER,
                          measured=_measured(metric, items)))
    return out or _missing("C11", "two d_head values")


SEQ_METRICS = ("test/bleu", "val/bleu")


@claim("C12")
def c12_dropout(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C12 (dropout): the best dropout rate > 0 beats no dropout."""
    key = "model.dropout"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        p = _numeric(cells)
        pos = [v for v in p if v > 0]
        if 0 not in p or not pos:
            continue
        metric = pick_metric(list(p.values()), opts)
        if metric is None:
            out.append(_no_metric("C12", ctx))
            continue
        hb = higher_is_better(metric)
        sign = 1 if hb else -1
        best = max(pos, key=lambda v: sign * p[v].stat(metric).mean if p[v].stat(metric).n else -math.inf)
        c = compare(p[best].stat(metric), p[0].stat(metric), hb, f"dropout={fmt_value(best)}", "dropout=0")
        fails = ["no dropout is better than every rate > 0"] if c.outcome == WORSE else []
        items = [(f"dropout={fmt_value(v)}", p[v]) for v in sorted(p)]
        v = decide("C12", sweep, ctx, metric, items, [c], fails, c.outcome == BETTER)
        v.reason = "dropout: " + v.reason
        out.append(v)
    return out or _missing("C12", "dropout 0 and > 0")


@claim("C12")
def c12_label_smoothing(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C12 (label smoothing): ε > 0 costs perplexity but gains BLEU."""
    key = "loss.label_smoothing"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        e = _numeric(cells)
        pos = sorted(v for v in e if v > 0)
        if 0 not in e or not pos:
            continue
        groups = list(e.values())
        wanted = ([opts.metric] if opts.metric and higher_is_better(opts.metric) else []) + list(SEQ_METRICS)
        seq = next((m for m in wanted if all(g.stat(m) for g in groups)), None)
        ppl = next((m for m in ("val/ppl", "val/loss") if all(g.stat(m) for g in groups)), None)
        if seq is None or ppl is None:
            out.append(_verdict("C12", INCONCLUSIVE, "label smoothing: needs a BLEU metric and val/ppl or val/loss "
                                f"in every setting (found: {seq or 'no BLEU'}, {ppl or 'no perplexity'})", "n/a", ctx))
            continue
        eps = max(pos, key=lambda v: e[v].stat(seq).mean if e[v].stat(seq).n else -math.inf)
        name = f"ls={fmt_value(eps)}"
        ci = compare(e[0].stat(ppl), e[eps].stat(ppl), False, "ls=0", name)
        cii = compare(e[eps].stat(seq), e[0].stat(seq), True, name, "ls=0")
        fails = (["label smoothing lowers perplexity"] if ci.outcome == WORSE else []) + \
                ([f"label smoothing lowers {seq}"] if cii.outcome == WORSE else [])
        items = [(f"ls={fmt_value(v)}", e[v]) for v in sorted(e)]
        pair = [("ls=0", e[0]), (name, e[eps])]
        v = decide("C12", sweep, ctx, seq, pair, [ci, cii], fails, ci.outcome == BETTER and cii.outcome == BETTER,
                   measured=" | ".join(_measured(m, items) for m in (ppl, seq)))
        v.reason = "label smoothing: " + v.reason
        out.append(v)
    return out or _missing("C12", "label_smoothing 0 and > 0")


# -- bench.json (C7, C8) ------------------------------------------------------------------------
@claim("C7")
def c7_attention_cost(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Time and memory exponents of attention against n from bench.json."""
    section = (opts.bench or {}).get("attention_cost")
    if not isinstance(section, (dict, list)):
        return []
    exps = bench_exponents(section) if isinstance(section, dict) else fit_rows(section)
    if not exps:
        return [_verdict("C7", INCONCLUSIVE, "bench.json attention_cost has no exponents or per-n rows", "n/a")]
    measured = "; ".join(f"{label} ({kind}) exponent {e:.2f}" for label, kind, e in exps)
    bad = [f"{label} = {e:.2f}" for label, _, e in exps if abs(e - 2) > C7_BAD]
    ok = all(abs(e - 2) <= C7_OK for _, _, e in exps)
    status = NOT_SUPPORTED if bad else SUPPORTED if ok else INCONCLUSIVE
    reason = (f"exponent far from 2: {', '.join(bad)}" if bad else
              f"all exponents within 2 ± {C7_OK}" if ok else f"exponents between ±{C7_OK} and ±{C7_BAD} of 2")
    return [_verdict("C7", status, reason, measured)]


@claim("C8")
def c8_attention_vs_lstm(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Attention against an LSTM layer: crossover length against d."""
    section = (opts.bench or {}).get("attention_vs_lstm")
    if not isinstance(section, dict):
        return []
    flat = {path[-1]: v for path, v in leaves(section)}
    n, d = flat.get("crossover_n"), flat.get("d", flat.get("d_model"))
    if not isinstance(d, (int, float)) or isinstance(d, bool):
        return [_verdict("C8", INCONCLUSIVE, "bench.json attention_vs_lstm has no d", f"crossover_n={n}")]
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return [_verdict("C8", INCONCLUSIVE, "no crossover within the measured lengths", f"crossover_n=n/a, d={d:g}")]
    status = SUPPORTED if n >= d / 2 else NOT_SUPPORTED
    reason = f"crossover_n / d = {n / d:.2f} ({'≥' if status == SUPPORTED else '<'} 0.5)"
    return [_verdict("C8", status, reason, f"crossover_n={n:g}, d={d:g}")]


def evaluate(sweep: Sweep, opts: Options | None = None) -> list[Verdict]:
    """Every verdict of every registered claim the sweep addresses, in claim order."""
    opts = opts or Options()
    out: list[Verdict] = []
    for cid in sorted(REGISTRY, key=lambda c: int(c[1:])):
        for fn in REGISTRY[cid]:
            out += fn(sweep, opts)
    return out
