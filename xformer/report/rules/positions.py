"""C5 and C6: positional encodings, out of and in distribution."""

from __future__ import annotations

import re

from ..aggregate import Group, Stat, Sweep, fmt_value, value_sort_key
from ..stats import equivalent
from .core import (
    BETTER,
    EQUIV_REL,
    INCONCLUSIVE,
    NOISE,
    WORSE,
    Options,
    Verdict,
    _missing,
    _verdict,
    claim,
    compare_groups,
    decide,
    each_context,
    higher_is_better,
)

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


CONTROLS = ("alibi", "t5", "rope")
"""Schemes built to extrapolate (Press et al. 2022; Raffel et al. 2020; Su et al. 2021), in the order one
is taken as C5's positive control when the sweep has it; without any, the non-sinusoidal scheme that
degrades least is used (picked after the fact, which the verdict says)."""


def degradation(g: Group, at: str, base: str, higher: bool) -> Stat | None:
    """Per seed, how much worse metric ``at`` (e.g. ``test/loss@2x``) is than ``base`` (``@1x``) of the
    same run (paired, so the seed's own level cancels): ``at − base`` for a loss, ``base − at`` for
    a score. Positive: it degrades. A run missing either value is left out; a non-finite one counts as
    diverged."""
    vals = []
    for j in g.jobs:
        x, y = j.metrics.get(at), j.metrics.get(base)
        if x is None or y is None:
            continue
        vals.append((y - x) if higher else (x - y))
    return Stat.of(vals)


def rise_key(base: str, n: float) -> str:
    """The name of the degradation from 1× to ``n``× of metric family ``base``: ``test/loss@2x − @1x``."""
    return f"{base}@{n:g}x − @1x"


def _lengths_group(g: Group, base: str, lengths: dict[float, str], higher: bool) -> Group:
    """A group whose stats are ``g``'s per-seed degradations :func:`rise_key` (N > 1), same jobs."""
    at_1x = lengths[min(lengths)]
    stats = {rise_key(base, n): d for n, k in lengths.items() if n > 1 and (d := degradation(g, k, at_1x, higher))}
    return Group(values=g.values, jobs=g.jobs, diverged=g.diverged, failed=g.failed, stats=stats)


@claim("C5")
def c5_pe_length(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C5: sinusoidal positions let a model extrapolate beyond the training length (Vaswani et al. §3.5).

    Decided on each scheme's degradation from 1× to N× the training length (per seed, paired):
    sinusoidal against a positive control, a scheme that extrapolates (ALiBi where swept). The
    precondition is that the control degrades less than learned positions (the negative control) at
    2×: then the task is solvable beyond the training length and the measure can tell. **supported**
    when sinusoidal degrades no more than the control at every length; **not supported** when it
    degrades more at the shortest extrapolated length; else inconclusive.
    """
    key = "model/pe"
    base = opts.metric.split("@")[0] if opts.metric else None
    fam = length_metrics(sweep.metric_keys, base)
    if fam is None:
        return []
    base, lengths = fam
    hb = higher_is_better(base)
    if min(lengths) != 1 or len(lengths) < 2:
        return _missing("C5", f"{base}@1x and {base}@Nx with N > 1")
    longer = [n for n in lengths if n > 1]

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:  # noqa: ARG001 - decided on the degradation
        sin = cells.get(("sinusoidal",))
        if sin is None:
            return None
        deg = {pe: _lengths_group(g, base, lengths, hb) for (pe,), g in cells.items()}
        two = rise_key(base, min(longer))
        others = [pe for pe in deg if pe != "sinusoidal" and deg[pe].stat(two)]
        control = next((pe for pe in CONTROLS if pe in others), None)
        notes = []
        if control is None and others:
            control = min(others, key=lambda pe: deg[pe].stat(two).mean)
            notes.append(
                f"no scheme built to extrapolate swept: {fmt_value(control)} (least degradation) is the control"
            )
        if control is None:
            return _verdict(
                "C5", INCONCLUSIVE, "needs a second scheme as the control (e.g. model/pe=alibi)", "n/a", ctx
            )
        cname = fmt_value(control)
        cannot = []
        if "learned" in deg and "learned" != control and deg["learned"].stat(two):
            pc = compare_groups(
                deg[control],
                deg["learned"],
                two,
                f"{cname} degradation@{min(longer):g}x",
                f"learned degradation@{min(longer):g}x",
                higher=False,
            )
            notes.append(f"positive control: {pc.text()}")
            if pc.outcome != BETTER:
                cannot.append(
                    f"the control {cname} does not degrade less than learned positions at {min(longer):g}×, so "
                    "this task and budget do not separate a scheme that extrapolates from one that cannot"
                )
        else:
            cannot.append(
                "the sweep has no learned positions, the negative control against which the control "
                f"{cname} shows that this setting separates a scheme that extrapolates from one that cannot"
            )
        comps = [
            compare_groups(
                deg["sinusoidal"],
                deg[control],
                rise_key(base, n),
                f"sinusoidal degradation@{n:g}x",
                f"{cname} degradation@{n:g}x",
                higher=False,
            )
            for n in longer
        ]
        for c in comps:  # a degradation's size relative to another's is not a meaningful percentage
            c.mean_b = None
        fails = (
            [f"sinusoidal degrades more than {cname} from 1× to {min(longer):g}× the training length"]
            if comps[0].outcome == WORSE
            else []
        )
        holds = all(c.outcome in (BETTER, NOISE) for c in comps) and not fails
        parts = []
        for pe, g in sorted(deg.items(), key=lambda kv: value_sort_key(kv[0])):
            rises = [(n, g.stat(rise_key(base, n))) for n in longer]
            vals = ", ".join(f"{n:g}x {st.mean:+.3g}" for n, st in rises if st)
            level = cells[(pe,)].stat(lengths[1])
            parts.append(f"{fmt_value(pe)}: {base}@1x {level.text() if level else 'n/a'}, degradation {vals}")
        items = [("sinusoidal", deg["sinusoidal"]), (cname, deg[control])]
        return decide(
            "C5",
            sweep,
            ctx,
            two,
            items,
            comps,
            fails,
            holds,
            notes=notes,
            measured="; ".join(parts),
            cannot_show=cannot,
        )

    return each_context("C5", sweep, opts, [key], "sinusoidal and a control scheme", judge)


@claim("C6")
def c6_pe_in_distribution(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C6: learned and sinusoidal positions give nearly the same in-distribution quality (equivalence)."""
    key = "model/pe"

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:
        sin, lrn = cells.get(("sinusoidal",)), cells.get(("learned",))
        if sin is None or lrn is None:
            return None
        metric = metric_for([sin, lrn])
        s_sin, s_lrn = sin.stat(metric), lrn.stat(metric)
        c = compare_groups(sin, lrn, metric, "sinusoidal", "learned")
        fails, holds, notes, margin = [], False, [], None
        if c.by_divergence:
            fails.append(c.note)
        elif c.interval is not None:
            margin = EQUIV_REL * max(abs(s_sin.mean), abs(s_lrn.mean))
            if margin > 0:
                holds, iv90 = equivalent(s_sin.values, s_lrn.values, margin)
                lo90, hi90 = (iv90.lo, iv90.hi) if higher_is_better(metric) else (-iv90.hi, -iv90.lo)
                iv95 = c.interval
                outside = iv95.lo > margin or iv95.hi < -margin
                notes.append(
                    f"equivalence margin ±{margin:.3g} ({EQUIV_REL:.0%} of the larger mean); 90 % interval "
                    f"of Δ [{lo90:+.3g}, {hi90:+.3g}] → "
                    f"{'inside' if holds else 'not inside'} the margin (TOST); 95 % interval of Δ "
                    f"[{iv95.lo:+.3g}, {iv95.hi:+.3g}] → "
                    f"{'entirely outside' if outside else 'not entirely outside'} it"
                )
                if outside:
                    fails.append(
                        f"the 95 % interval of the difference [{iv95.lo:+.3g}, {iv95.hi:+.3g}] lies entirely "
                        f"outside the margin ±{margin:.3g}"
                    )
                elif not holds:
                    notes.append("the intervals straddle the margin: neither equivalent nor different at this budget")
            else:
                margin = None
        items = [("sinusoidal", sin), ("learned", lrn)]
        return decide("C6", sweep, ctx, metric, items, [c], fails, holds, notes=notes, margin=margin)

    return each_context("C6", sweep, opts, [key], "both sinusoidal and learned", judge)
