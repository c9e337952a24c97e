"""C4: Pre-LN against Post-LN with and without warm-up, divergence counted."""

from __future__ import annotations

import math

from ..aggregate import Group, Sweep
from ..stats import fisher_more
from .core import (
    BETTER,
    NOISE,
    WORSE,
    Options,
    Verdict,
    _missing,
    _no_metric,
    claim,
    compare_groups,
    contexts,
    decide,
    pick_metric,
)


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
        stats = {k: g.stat(metric) for k, g in grid.items()}  # diverged seeds enter as non-finite values
        div = {k: s.n_nonfinite if s else 0 for k, s in stats.items()}
        runs = {k: (s.n + s.n_nonfinite) if s else 0 for k, s in stats.items()}
        # divergence counts decide inside compare(): a setting whose share of diverged seeds is larger by
        # DIVERGE_SHARE is the worse one; otherwise the finished seeds are compared
        ca = compare_groups(grid["post", w], grid["post", 0], metric, f"post@{w}", "post@0")
        cb = compare_groups(grid["pre", 0], grid["pre", w], metric, "pre@0", f"pre@{w}")
        a_holds, a_fails = ca.outcome == BETTER, ca.outcome == WORSE
        b_fails = cb.outcome == WORSE
        b_holds = (
            cb.outcome in (BETTER, NOISE)
            and not b_fails
            and div["pre", 0] / max(runs["pre", 0], 1) <= div["pre", w] / max(runs["pre", w], 1)
        )
        fails = (["Post-LN does better without warm-up"] if a_fails else []) + (
            ["Pre-LN suffers without warm-up"] if b_fails else []
        )
        notes = [
            "diverged runs per setting: "
            + ", ".join(f"{n}@{s}: {div[n, s]} of {runs[n, s]}" for n, s in grid)
            + f"; one-sided Fisher exact p that post@0 diverges more than post@{w}: "
            f"{fisher_more(div['post', 0], runs['post', 0], div['post', w], runs['post', w]):.2g}, "
            f"that pre@0 diverges more than pre@{w}: "
            f"{fisher_more(div['pre', 0], runs['pre', 0], div['pre', w], runs['pre', w]):.2g} "
            f"(printed; the decision is the share rule)"
        ]
        items = [(f"{n}@{s}", g) for (n, s), g in grid.items()]
        out.append(decide("C4", sweep, ctx, metric, items, [ca, cb], fails, a_holds and b_holds, notes=notes))
    return out or _missing("C4", "pre and post at warm-up 0 and > 0")
