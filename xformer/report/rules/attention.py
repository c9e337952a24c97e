"""C9 and C10: the 1/√d_k scaling and a bidirectional encoder."""

from __future__ import annotations

from ..aggregate import Group, Sweep
from .core import (
    BETTER,
    WORSE,
    Options,
    Verdict,
    _measured,
    _missing,
    _no_metric,
    _simple_axis,
    claim,
    compare_groups,
    contexts,
    decide,
    pick_metric,
)


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
        comps = [
            compare_groups(by_dk[dk][True], by_dk[dk][False], metric, f"scaled@d_k={dk:g}", f"unscaled@d_k={dk:g}")
            for dk in both
        ]
        top = comps[-1]
        fails = ["unscaled is better than scaled at the largest d_k"] if top.outcome == WORSE else []
        items = [(f"{'scaled' if s else 'unscaled'}@d_k={dk:g}", by_dk[dk][s]) for dk in both for s in (True, False)]
        decided = [
            (f"scaled@d_k={both[-1]:g}", by_dk[both[-1]][True]),
            (f"unscaled@d_k={both[-1]:g}", by_dk[both[-1]][False]),
        ]
        v = decide(
            "C9",
            sweep,
            ctx,
            metric,
            decided,
            list(reversed(comps)),
            fails,
            top.outcome == BETTER,
            notes=[f"decided at d_k={both[-1]:g}"],
            measured=_measured(metric, items),
            decisive=[top],
            key=top,
        )
        out.append(v)
    return out or _missing("C9", "attn_scale true and false at one head size")


@claim("C10")
def c10_encoder_attention(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C10: a full (bidirectional) encoder beats a causal one."""
    if "model/attention" not in sweep.swept_keys:
        return []
    return _simple_axis("C10", sweep, opts, "model/attention", "full", "causal")
