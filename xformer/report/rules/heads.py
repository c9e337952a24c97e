"""C3 and C11: the number of heads and the key size d_k."""

from __future__ import annotations

from ..aggregate import Sweep, fmt_value
from .core import (
    BETTER,
    WORSE,
    Options,
    Verdict,
    _measured,
    _numeric,
    best_of,
    claim,
    compare_groups,
    decide,
    each_context,
)


@claim("C3")
def c3_heads(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C3: several heads beat one; too many heads hurt again."""
    key = "model.n_heads"

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:
        h = _numeric(cells)
        multi = sorted(v for v in h if v > 1)
        if 1 not in h or not multi:
            return None
        coverage = (
            []
            if len(multi) >= 2
            else ["the sweep does not cover the claim's axis: C3 needs 1 head and at least two head counts above 1"]
        )
        metric = metric_for(list(h.values()))
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
        return decide(
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

    return each_context("C3", sweep, opts, [key], "n_heads 1 and > 1", judge)


@claim("C11")
def c11_d_head(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C11: a larger key size beats a smaller one (largest against smallest ``model.d_qk``, as Table 3
    row B; else ``model.d_head``, where the value size shrinks with the key size)."""
    key = next((k for k in ("model.d_qk", "model.d_head") if k in sweep.swept_keys), None)
    if key is None:
        return []
    name = key.split(".")[1]

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:
        d = _numeric(cells)
        if len(d) < 2:
            return None
        lo, hi = min(d), max(d)
        metric = metric_for(list(d.values()))
        c = compare_groups(d[hi], d[lo], metric, f"{name}={fmt_value(hi)}", f"{name}={fmt_value(lo)}")
        fails = [f"{name}={fmt_value(lo)} is better than {name}={fmt_value(hi)}"] if c.outcome == WORSE else []
        items = [(f"{name}={fmt_value(v)}", d[v]) for v in sorted(d)]
        return decide(
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

    return each_context("C11", sweep, opts, [key], "two d_qk (or d_head) values", judge)
