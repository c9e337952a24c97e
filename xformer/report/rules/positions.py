"""C5 and C6: positional encodings, out of and in distribution."""

from __future__ import annotations

import re

from ..aggregate import Sweep, fmt_value, value_sort_key
from ..stats import equivalent
from .core import (
    BETTER,
    EQUIV_REL,
    WORSE,
    Options,
    Verdict,
    _missing,
    _no_metric,
    claim,
    compare,
    compare_groups,
    contexts,
    decide,
    higher_is_better,
    pick_metric,
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
        comps = [
            compare_groups(sin, lrn, k, f"sinusoidal@{n:g}x", f"learned@{n:g}x", hb)
            for n, k in lengths.items()
            if n > 1
        ]
        fails = [f"learned is better than sinusoidal at {c.a.split('@')[1]}" for c in comps if c.outcome == WORSE]
        holds = any(c.outcome == BETTER for c in comps)
        others = sorted((pe for (pe,) in cells if pe not in ("sinusoidal", "learned")), key=value_sort_key)
        notes = [
            compare(
                cells[(pe,)].stat(lengths[longest]),
                sin.stat(lengths[longest]),
                hb,
                f"{fmt_value(pe)}@{longest:g}x",
                f"sinusoidal@{longest:g}x",
            ).text()
            for pe in others
        ]
        parts = []
        for (pe,), g in sorted(cells.items(), key=lambda kv: value_sort_key(kv[0][0])):
            vals = ", ".join(f"{n:g}x {g.stat(k).text() if g.stat(k) else 'n/a'}" for n, k in lengths.items())
            parts.append(f"{fmt_value(pe)}: {vals}")
        items = [("sinusoidal", sin), ("learned", lrn)]
        out.append(
            decide(
                "C5",
                sweep,
                ctx,
                lengths[longest],
                items,
                comps,
                fails,
                holds,
                notes=notes,
                measured=f"{base}: " + "; ".join(parts),
            )
        )
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
        out.append(
            decide(
                "C6",
                sweep,
                ctx,
                metric,
                [("sinusoidal", sin), ("learned", lrn)],
                [c],
                fails,
                holds,
                notes=notes,
                margin=margin,
            )
        )
    return out or _missing("C6", "both sinusoidal and learned")
