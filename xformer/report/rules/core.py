"""The core of the claim verdicts: the checks common to every claim (seeds, saturation), the
training budget, the contexts of a sweep, and :func:`decide`, which turns a claim rule's outcome, its
precondition and power, and the common checks into a verdict.

Beside it: :mod:`.results` (the result types and outcome enums), :mod:`.compare` (two settings
compared, power), :mod:`.stability` (the second-half check) and :mod:`.registry` (the registry, the
loop over contexts and :func:`~.registry.evaluate`). The claim rules themselves are one module per
family (``ffn``, ``heads``, ``norm``, ``positions``, ``attention``, ``regularisation``, ``cost``,
``paths``). The names of those modules are re-exported here, so a claim module imports from ``.core``.
"""

from __future__ import annotations

from typing import Any, Callable

from xformer.config_types import import_target

from ..aggregate import Group, Job, Sweep, fmt_value
from ..catalog import CLAIMS, MIN_SEEDS
from ..stats import seeds_needed
from .compare import (  # noqa: F401 (re-exported)
    ALPHA,
    LOWER_IS_BETTER,
    best_of,
    compare,
    compare_contrast,
    compare_groups,
    higher_is_better,
)
from .registry import BENCH_CLAIMS, REGISTRY, Recogniser, claim, evaluate  # noqa: F401
from .results import (  # noqa: F401 (re-exported)
    BETTER,
    FEW,
    INCONCLUSIVE,
    NOISE,
    NOT_SUPPORTED,
    SUPPORTED,
    WORSE,
    Check,
    Comparison,
    Options,
    Outcome,
    Stability,
    StabilityPoint,
    Status,
    Verdict,
)
from .stability import curve_metric, spaced, stability  # noqa: F401

PREFERRED = ("test/loss", "val/loss", "test/bleu", "val/bleu", "test/ppl", "val/ppl")
"""Continuous held-out metrics, in the order the decision metric is picked from."""
BOUNDS = {"exact_match": (0.0, 1.0), "acc": (0.0, 1.0), "accuracy": (0.0, 1.0), "bleu": (0.0, 100.0)}
"""Range of the bounded metrics, by the last part of their name (``test/exact_match@2x`` → exact_match)."""
SATURATION = 0.02  # saturated: every mean within 2 % of the range from one bound
EQUIV_REL = 0.01  # C6 equivalence margin, relative to the larger mean
C2_TOL = 0.03  # C2: |share - 2/3| allowed
C7_OK, C7_BAD = 0.3, 0.5  # C7: |e - 2| <= OK consistent; |e - 2| > BAD contradicts

PUBLISHED = {cid: c.published for cid, c in CLAIMS.items()}


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
    """``warm-up W + <the schedule's own words>, peak lr X``: a schedule function describes itself
    (``describe`` of :func:`xformer.train.schedules.describes`); an unknown one is named by its target."""
    optim = cfg.get("optim") or {}
    sched = optim.get("scheduler") or {}
    target = str(sched.get("_target_") or "") if isinstance(sched, dict) else ""
    warm, lr = optim.get("warmup_steps"), optim.get("lr")
    words = target.rsplit(".", 1)[-1]
    fn, _ = import_target(target) if target else (None, None)
    if fn is not None and hasattr(fn, "describe"):
        try:
            words = fn.describe(**sched)
        except (KeyError, ValueError, TypeError):  # a node from before a key was added: its name only
            pass
    text = " + ".join(p for p in (f"warm-up {warm}" if warm is not None else "", words) if p)
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
    cannot_show: list[str] | None = None,
    effect: float | None = None,
) -> Verdict:
    """The verdict from a claim rule's outcome, its precondition, its power and the common checks.

    Args:
        cid: the claim; ``sweep``: for the saturation notes; ``ctx``: the context label; ``metric``: the
        decision metric; ``items``: the compared settings ``(name, group)``; ``comps``: the comparisons;
        ``fails``: sentences for the parts of the rule that failed; ``holds``: every part held;
        ``coverage``: sentences for what the sweep lacks on the claim's axis; ``notes``: more evidence;
        ``measured``: the measured text (default: ``metric`` over ``items``); ``decisive``: the
        comparisons whose stability and power are checked (default ``comps``); ``margin``: an
        equivalence margin (the stability check then asks that the trend stay inside it); ``key``: the
        comparison of the summary table (default: the first of ``comps``); ``cannot_show``: why the
        experiment cannot show the effect (the claim's positive control failed); ``effect``: the
        published effect in the decision metric's units, for the power check.

    The rule's outcome (not supported when ``fails``, supported when ``holds``, else inconclusive) is
    replaced by inconclusive when coverage, the precondition, seeds, saturation or stability fail, and
    when a decisive comparison within noise could not have detected a difference of ``effect``
    (underpowered: the seeds a side that would, from the sweep's own spread, are named).
    """
    problems: list[tuple[Check, str]] = [(Check.COVERAGE, p) for p in coverage or []]
    problems += [(Check.PRECONDITION, p) for p in cannot_show or []]
    problems += [(Check.SEEDS, p) for p in seed_check(items, metric)]
    sat = saturation(metric, [g for _, g in items])
    if sat:
        problems.append((Check.SATURATED, sat))
    caveats: list[str] = []
    stab_key: Stability | None = None
    checked = decisive if decisive is not None else comps
    for c in checked:
        st = stability(c, margin if (margin is not None and holds) else None)
        if st is None:
            continue
        problems += st.problems
        caveats += st.caveats
        if stab_key is None or c is (key or (comps[0] if comps else None)):
            stab_key = st
    problems += underpowered(checked, effect)
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
    evidence = [c.text() for c in comps] + list(notes or []) + outcome_notes(items) + powered(checked, effect)
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
    v.problems = [kind for kind, _ in problems]
    return v


def powered(comps: list[Comparison], effect: float | None) -> list[str]:
    """Evidence for each comparison within noise that could have detected the published ``effect``:
    whether its interval excludes an effect that large (an informative null at this budget)."""
    out = []
    for c in comps:
        if effect is None or c.outcome != NOISE or c.detectable is None or c.detectable > abs(effect):
            continue
        excluded = c.interval is not None and c.interval.hi < abs(effect)
        out.append(
            f"power: {c.a} vs {c.b} could detect |Δ| ≥ {c.detectable:.3g} (80 %), below the published effect "
            f"{abs(effect):.3g}; its interval [{c.interval.lo:+.3g}, {c.interval.hi:+.3g}] "
            + ("excludes an effect that large at this budget" if excluded else "does not exclude it")
        )
    return out


def underpowered(comps: list[Comparison], effect: float | None) -> list[tuple[Check, str]]:
    """A problem for each comparison within noise whose detectable difference (80 % power,
    :func:`~xformer.report.stats.detectable_difference`) exceeds the published ``effect``, naming the
    seeds a side that would detect it given the comparison's own spread."""
    if effect is None:
        return []
    out = []
    for c in comps:
        if c.outcome != NOISE or c.detectable is None or c.detectable <= abs(effect):
            continue
        n = seeds_needed(c.noise or 0.0, effect)
        out.append(
            (
                Check.UNDERPOWERED,
                f"{c.a} vs {c.b}: the sweep could detect only |Δ| ≥ {c.detectable:.3g} (80 % power, "
                f"n={c.n_a}/{c.n_b}, seed spread {c.noise:.3g}), larger than the published effect "
                f"{abs(effect):.3g}; ~{n} seeds a side would detect it",
            )
        )
    return out


def summarise(problems: list[tuple[Check, str]]) -> str:
    """The failed checks in one short sentence: each kind once, with the settings it concerns (the
    coverage, saturation and precondition checks in their own words)."""
    kinds: dict[Check, list[str]] = {}
    for kind, text in problems:
        who = kinds.setdefault(kind, [])
        name = text.split(":")[0]
        if kind not in WHOLE_SENTENCE and name not in who:
            who.append(name)
    out = []
    for kind, who in kinds.items():
        if kind in WHOLE_SENTENCE:
            text = next(t for k, t in problems if k == kind)
            out.append(f"{kind.value}, because {text}" if kind == Check.PRECONDITION else text)
        else:
            out.append(f"{kind.value}: {', '.join(who)}" if who else kind.value)
    return "; ".join(out)


WHOLE_SENTENCE = (Check.COVERAGE, Check.SATURATED, Check.PRECONDITION)
"""Checks whose sentence is quoted whole by :func:`summarise` (the others list the settings)."""


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


class _NoMetric(Exception):
    """Raised by the ``metric_for`` of :func:`each_context` when the groups share no decision metric."""


Judge = Callable[[str, dict[tuple, Group], Callable[[list[Group]], str]], "Verdict | list[Verdict] | None"]


def each_context(cid: str, sweep: Sweep, opts: Options, axes: list[str], need: str, judge: Judge) -> list[Verdict]:
    """The loop every claim function runs: ``[]`` when the sweep does not sweep every key of ``axes``
    (it does not address the claim); else ``judge(ctx, cells, metric_for)`` for each context (the
    values of the other swept keys; ``cells``: ``{axis values: group}``), where ``metric_for(groups)``
    is the decision metric of those groups (:func:`pick_metric`). ``judge`` returns the context's
    verdict(s), or ``None`` when the context lacks what the claim needs. A context whose groups share
    no metric gets :func:`_no_metric`; a sweep where no context had what the claim needs gets one
    inconclusive verdict naming ``need``."""
    if any(a not in sweep.swept_keys for a in axes):
        return []
    out: list[Verdict] = []
    for ctx, cells in contexts(sweep, axes):

        def metric_for(groups: list[Group]) -> str:
            metric = pick_metric(groups, opts)
            if metric is None:
                raise _NoMetric
            return metric

        try:
            got = judge(ctx, cells, metric_for)
        except _NoMetric:
            got = _no_metric(cid, ctx)
        if got is not None:
            out += got if isinstance(got, list) else [got]
    return out or _missing(cid, need)


def _simple_axis(cid: str, sweep: Sweep, opts: Options, key: str, good: Any, bad: Any) -> list[Verdict]:
    """Verdicts for claims "``good`` is better than ``bad`` on ``key``" (C10)."""
    gn, bn = fmt_value(good), fmt_value(bad)

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:
        g, b = cells.get((good,)), cells.get((bad,))
        if g is None or b is None:
            return None
        metric = metric_for([g, b])
        c = compare_groups(g, b, metric, gn, bn)
        fails = [f"{bn} is better than {gn}"] if c.outcome == WORSE else []
        return decide(cid, sweep, ctx, metric, [(gn, g), (bn, b)], [c], fails, c.outcome == BETTER)

    return each_context(cid, sweep, opts, [key], f"both {key}={gn} and {bn}", judge)
