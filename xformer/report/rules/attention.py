"""C9 and C10: the 1/√d_k scaling and a bidirectional encoder."""

from __future__ import annotations

from ..aggregate import Group, Sweep
from .core import (
    BETTER,
    WORSE,
    Options,
    Verdict,
    _measured,
    _simple_axis,
    claim,
    compare_contrast,
    compare_groups,
    decide,
    each_context,
)


def head_size(cfg: dict) -> float | None:
    """d_k of a config: ``model.d_qk``, else ``model.d_head``, else ``d_model / n_heads``."""
    m = cfg.get("model") or {}
    try:
        return float(m.get("d_qk") or m.get("d_head") or int(m["d_model"]) / int(m["n_heads"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


@claim("C9")
def c9_attn_scale(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C9 (Vaswani et al. §3.2.1): the 1/√d_k scaling counters dot products that grow with d_k.

    Decided on what the claim names: (i) scaling helps at the largest d_k, and (ii) its benefit grows
    with d_k: the interaction ``(scaled − unscaled)@largest − (scaled − unscaled)@smallest`` (Welch–
    Satterthwaite), whose second-half stability is checked. **supported**: both; **not supported**:
    unscaled is better at the largest d_k, or the benefit shrinks with d_k; else inconclusive.
    """
    key = "model.attn_scale"
    size_keys = [k for k in ("model.d_head", "model.d_qk", "model.n_heads", "model.d_model") if k in sweep.swept_keys]

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:
        by_dk: dict[float, dict[bool, Group]] = {}
        for vals, g in cells.items():
            dk = head_size(g.config())
            if dk is not None and isinstance(vals[0], bool):
                by_dk.setdefault(dk, {}).setdefault(vals[0], g)
        both = sorted(dk for dk, s in by_dk.items() if len(s) == 2)
        if not both:
            return None
        metric = metric_for([g for dk in both for g in by_dk[dk].values()])
        comps = [
            compare_groups(by_dk[dk][True], by_dk[dk][False], metric, f"scaled@d_k={dk:g}", f"unscaled@d_k={dk:g}")
            for dk in both
        ]
        top = comps[-1]
        items = [(f"{'scaled' if s else 'unscaled'}@d_k={dk:g}", by_dk[dk][s]) for dk in both for s in (True, False)]
        lo, hi = both[0], both[-1]
        coverage = [] if len(both) > 1 else [f"C9 needs scaled and unscaled at two d_k (swept: d_k={lo:g} only)"]
        inter = None
        if len(both) > 1:
            inter = compare_contrast(
                [(1, by_dk[hi][True]), (-1, by_dk[hi][False]), (-1, by_dk[lo][True]), (1, by_dk[lo][False])],
                metric,
                f"scaling benefit@d_k={hi:g} − @d_k={lo:g}",
            )
        fails = ["unscaled is better than scaled at the largest d_k"] if top.outcome == WORSE else []
        if inter is not None and inter.outcome == WORSE:
            fails.append(f"the scaling benefit shrinks from d_k={lo:g} to d_k={hi:g}")
        holds = top.outcome == BETTER and inter is not None and inter.outcome == BETTER
        decisive = [inter] if inter is not None else [top]
        return decide(
            "C9",
            sweep,
            ctx,
            metric,
            items,
            ([inter] if inter is not None else []) + list(reversed(comps)),
            fails,
            holds,
            coverage=coverage,
            measured=_measured(metric, items),
            decisive=decisive,
            key=decisive[0],
        )

    return each_context("C9", sweep, opts, [key] + size_keys, "attn_scale true and false at one head size", judge)


@claim("C10")
def c10_encoder_attention(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C10: a full (bidirectional) encoder beats a causal one."""
    if "model/attention" not in sweep.swept_keys:
        return []
    return _simple_axis("C10", sweep, opts, "model/attention", "full", "causal")
