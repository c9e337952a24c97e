"""C1 and C2: the FFN's width (C1) and its share of a block's parameters (C2)."""

from __future__ import annotations

import math

from ..aggregate import Group, Sweep, fmt_value
from .core import (
    BETTER,
    C2_TOL,
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    WORSE,
    Options,
    Verdict,
    _numeric,
    _verdict,
    claim,
    compare_groups,
    decide,
    each_context,
)


@claim("C1")
def c1_ffn_ratio(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C1: FFN ratio 4 beats every ratio below it; the gain above 4 is smaller per added parameter."""
    key = "model.ffn_ratio"

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:
        r = _numeric(cells)
        if 4 not in r:
            return None
        below, above = sorted(v for v in r if v < 4), sorted(v for v in r if v > 4)
        coverage = (
            []
            if below and above
            else [
                "the sweep does not cover the claim's axis: C1 needs ratio 4 and ratios below and above 4 "
                f"(swept: {', '.join(fmt_value(v) for v in sorted(r))})"
            ]
        )
        metric = metric_for(list(r.values()))
        items = [(f"ratio {fmt_value(v)}", r[v]) for v in sorted(r)]
        low = [compare_groups(r[4], r[v], metric, "4", fmt_value(v)) for v in below]
        comps, fails, notes = list(low), [f"ratio {c.b} is better than 4" for c in low if c.outcome == WORSE], []
        diminishing = None
        if below and above:
            lo_v, hi_v = below[-1], above[-1]
            c_up = compare_groups(r[hi_v], r[4], metric, fmt_value(hi_v), "4")
            comps.append(c_up)
            c_low = next(c for c in low if c.b == fmt_value(lo_v))
            if c_low.interval is not None and c_up.interval is not None:
                d_low, d_up, unit = _gain_units(r[lo_v], r[4], r[hi_v], lo_v, hi_v)
                g_low = (c_low.interval.lo / d_low, c_low.delta / d_low, c_low.interval.hi / d_low)
                g_up = (c_up.interval.lo / d_up, c_up.delta / d_up, c_up.interval.hi / d_up)
                notes.append(
                    f"gain {unit}: {fmt_value(lo_v)}→4 {g_low[1]:+.3g} [{g_low[0]:+.3g}, {g_low[2]:+.3g}], "
                    f"4→{fmt_value(hi_v)} {g_up[1]:+.3g} [{g_up[0]:+.3g}, {g_up[2]:+.3g}]"
                )
                if g_up[2] < g_low[0]:
                    diminishing = True
                elif g_up[0] > g_low[2]:
                    diminishing = False
                    fails.append(
                        f"no diminishing return: {fmt_value(hi_v)} gains more over 4 {unit} than 4 "
                        f"over {fmt_value(lo_v)}"
                    )
                else:
                    notes.append("diminishing return not decided (the gain intervals overlap)")
        holds = bool(low) and all(c.outcome == BETTER for c in low) and diminishing is True
        key_c = next((c for c in low if below and c.b == fmt_value(below[-1])), None)  # 4 against the next ratio below
        return decide("C1", sweep, ctx, metric, items, comps, fails, holds, coverage, notes, key=key_c)

    return each_context("C1", sweep, opts, [key], "ratio 4", judge)


def _gain_units(g_lo: Group, g4: Group, g_hi: Group, lo: float, hi: float) -> tuple[float, float, str]:
    """Divisors turning C1's two gains into rates: million added parameters when all three settings have
    increasing parameter totals, else doublings of the ratio."""
    p_lo, p4, p_hi = (g.params.get("total") for g in (g_lo, g4, g_hi))
    if p_lo and p4 and p_hi and p_lo < p4 < p_hi:
        return (p4 - p_lo) / 1e6, (p_hi - p4) / 1e6, "per M added params"
    return math.log2(4 / lo), math.log2(hi / 4), "per doubling"


@claim("C2")
def c2_ffn_share(sweep: Sweep, _opts: Options) -> list[Verdict]:
    """The FFN's share of a block's parameters against 2/3, from the parameter counts."""
    if not sweep.groups:
        return []
    rows = [(g, block_share(g)) for g in sweep.groups if g.params.get("ffn") and g.params.get("attention")]
    if not rows:
        return [_verdict("C2", INCONCLUSIVE, "no parameter counts in metrics.json", "n/a")]
    base = [
        (g, s)
        for g, s in rows
        if s is not None and is_base_shape(g.config(), (g.jobs or g.diverged or g.failed)[0].choices)
    ]
    measured = "; ".join(f"{g.label()}: {s:.3f}" if s is not None else f"{g.label()}: n/a" for g, s in rows)
    measured = "FFN share of block: " + measured
    if not base:
        return [
            _verdict(
                "C2",
                INCONCLUSIVE,
                "no run of the base shape (d_ff = 4·d_model, n_heads·d_head = d_model, relu/gelu FFN)",
                measured,
            )
        ]
    off = [(g, s) for g, s in base if abs(s - 2 / 3) > C2_TOL]
    status = NOT_SUPPORTED if off else SUPPORTED
    worst = max(base, key=lambda gs: abs(gs[1] - 2 / 3))
    reason = (
        f"{len(base)} base-shape setting(s), largest deviation from 2/3: {worst[1] - 2 / 3:+.3f} (tolerance ±{C2_TOL})"
    )
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
    """d_ff = 4·d_model, n_heads·d_head = d_model, a relu/gelu FFN (not SwiGLU), no parameter budget, and
    multi-head softmax attention with as many key/value heads as query heads and d_k = d_v (the
    4·d_model² attention the paper's 2/3 counts)."""
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
    mixer = m.get("mixer")
    softmax = not isinstance(mixer, dict) or str(mixer.get("_target_", "")).endswith(".MultiHeadMixer")
    full_heads = m.get("n_kv_heads") in (None, m.get("n_heads")) and m.get("d_qk") in (None, d_head)
    return (
        m.get("param_budget") is None
        and float(d_ff) == 4 * d
        and inner == d
        and "swiglu" not in ffn.lower()
        and softmax  # attention 4·d² (not GQA, LSTM, conv or another mixer)
        and full_heads
    )
