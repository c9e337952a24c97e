"""C4: Pre-LN against Post-LN with and without warm-up: the interaction, divergence counted."""

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
    claim,
    compare_contrast,
    compare_groups,
    decide,
    each_context,
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
    """C4 (Xiong et al. 2020): warm-up matters for Post-LN and not for Pre-LN.

    Decided on the contrast the authors state: (i) Post-LN's benefit from warm-up exceeds Pre-LN's
    (the interaction ``(post@w − post@0) − (pre@w − pre@0)`` in the better direction, Welch–
    Satterthwaite; a Post-LN without warm-up that diverges where Post-LN with it does not settles it),
    and (ii) Pre-LN without warm-up is not worse than Post-LN with it. A warm-up benefit for Pre-LN
    too is printed as a caveat: the paper says Pre-LN can drop warm-up, not that warm-up gives it nothing.
    """
    nk, wk = "model/norm", "optim.warmup_steps"

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:
        warm = sorted({w for (_, w) in cells if isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0})
        if not warm:
            return None
        w = warm[-1]
        grid = {(n, s): cells.get((n, s)) for n in ("pre", "post") for s in (0, w)}
        if any(g is None for g in grid.values()):
            return None
        metric = metric_for(list(grid.values()))
        stats = {k: g.stat(metric) for k, g in grid.items()}  # diverged seeds enter as non-finite values
        div = {k: s.n_nonfinite if s else 0 for k, s in stats.items()}
        runs = {k: (s.n + s.n_nonfinite) if s else 0 for k, s in stats.items()}
        post = compare_groups(grid["post", w], grid["post", 0], metric, f"post@{w}", "post@0")
        pre = compare_groups(grid["pre", w], grid["pre", 0], metric, f"pre@{w}", "pre@0")
        inter = compare_contrast(
            [(1, grid["post", w]), (-1, grid["post", 0]), (-1, grid["pre", w]), (1, grid["pre", 0])],
            metric,
            f"warm-up benefit post − pre (post@{w} − post@0) − (pre@{w} − pre@0)",
        )
        if post.by_divergence and post.outcome == BETTER and not pre.by_divergence:
            inter.outcome, inter.note = BETTER, "settled by divergence: Post-LN without warm-up diverged"
        reach = compare_groups(grid["pre", 0], grid["post", w], metric, "pre@0", f"post@{w}")
        fails = (["Post-LN gains less from warm-up than Pre-LN"] if inter.outcome == WORSE else []) + (
            [f"Pre-LN without warm-up is worse than Post-LN with it (pre@0 vs post@{w})"]
            if reach.outcome == WORSE
            else []
        )
        holds = inter.outcome == BETTER and reach.outcome in (BETTER, NOISE)
        notes = [
            "diverged runs per setting: "
            + ", ".join(f"{n}@{s}: {div[n, s]} of {runs[n, s]}" for n, s in grid)
            + f"; one-sided Fisher exact p that post@0 diverges more than post@{w}: "
            f"{fisher_more(div['post', 0], runs['post', 0], div['post', w], runs['post', w]):.2g} (printed)",
            post.text(),
            pre.text(),
        ]
        if pre.outcome == BETTER:
            notes.append(
                f"caveat: Pre-LN gains from warm-up too (pre@{w} better than pre@0); the claim is that it can "
                "train without it, which (ii) decides"
            )
        items = [(f"{n}@{s}", g) for (n, s), g in grid.items()]
        return decide("C4", sweep, ctx, metric, items, [inter, reach], fails, holds, notes=notes, decisive=[reach])

    return each_context("C4", sweep, opts, [nk, wk], "pre and post at warm-up 0 and > 0", judge)
