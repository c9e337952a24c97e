"""C3 and C11: the number of heads and the key size d_k."""

from __future__ import annotations

from ..aggregate import Sweep, fmt_value
from .core import (
    BETTER,
    WORSE,
    Options,
    Verdict,
    _measured,
    _missing,
    _no_metric,
    _numeric,
    best_of,
    claim,
    compare_groups,
    contexts,
    decide,
    pick_metric,
)


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
        coverage = (
            []
            if len(multi) >= 2
            else ["the sweep does not cover the claim's axis: C3 needs 1 head and at least two head counts above 1"]
        )
        metric = pick_metric(list(h.values()), opts)
        if metric is None:
            out.append(_no_metric("C3", ctx))
            continue
        names = {v: f"h={fmt_value(v)}" for v in h}
        ci, family = best_of([(names[v], h[v]) for v in multi], (names[1], h[1]), metric)
        best = next(v for v in multi if names[v] == ci.a)
        comps, fails, notes = (
            [ci],
            [],
            [
                f"(i) the best multi-head count is picked after the fact: its comparison "
                f"with 1 head is corrected over the {len(multi)} head counts "
                f"(Holm–Bonferroni)"
            ],
        )
        if ci.outcome == WORSE:
            fails.append("one head is better than the best multi-head setting")
        ii_holds = False
        top = multi[-1]
        if len(multi) >= 2:
            if top != best:
                # (ii) the largest head count is fixed in advance; the best one is not: Holm over the others
                cii, _ = best_of([(names[v], h[v]) for v in multi if v != top], (names[top], h[top]), metric)
                ii_holds = cii.outcome == BETTER
            else:
                cii = compare_groups(h[top], h[multi[-2]], metric, names[top], names[multi[-2]])
                if cii.outcome == BETTER:
                    fails.append("the largest head count is the best (too many heads do not hurt)")
            comps.append(cii)
        comps += [c for c in family if c is not ci]
        items = [(f"h={fmt_value(v)}", h[v]) for v in sorted(h)]
        out.append(
            decide(
                "C3",
                sweep,
                ctx,
                metric,
                items,
                comps,
                fails,
                ci.outcome == BETTER and ii_holds,
                coverage,
                notes,
                decisive=comps[:2],
            )
        )
    return out or _missing("C3", "n_heads 1 and > 1")


@claim("C11")
def c11_d_head(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C11: a larger key size beats a smaller one (largest against smallest ``model.d_qk``, as Table 3
    row B; else ``model.d_head``, where the value size shrinks with the key size)."""
    key = next((k for k in ("model.d_qk", "model.d_head") if k in sweep.swept_keys), None)
    if key is None:
        return []
    name = key.split(".")[1]
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
        c = compare_groups(d[hi], d[lo], metric, f"{name}={fmt_value(hi)}", f"{name}={fmt_value(lo)}")
        fails = [f"{name}={fmt_value(lo)} is better than {name}={fmt_value(hi)}"] if c.outcome == WORSE else []
        items = [(f"{name}={fmt_value(v)}", d[v]) for v in sorted(d)]
        out.append(
            decide(
                "C11",
                sweep,
                ctx,
                metric,
                [items[0], items[-1]],
                [c],
                fails,
                c.outcome == BETTER,
                measured=_measured(metric, items),
            )
        )
    return out or _missing("C11", "two d_qk (or d_head) values")
