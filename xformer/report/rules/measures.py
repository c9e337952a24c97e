"""The measures a ``quantity`` part reads (``measure: <name>``, with ``args``): each a function
``(ctx, **args) -> [(label, value)]`` returning one value per thing measured, ``[]`` when the sweep or
the bench file has nothing to measure.
"""

from __future__ import annotations

from typing import Any

from ..aggregate import Group


def _path(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def bench(ctx: Any, paths: list[str] | str) -> list[tuple[str, float]]:
    """The numbers at ``paths`` (dotted) in ``bench.json``; paths without a number are left out."""
    found = [(p, _number(_path(ctx.bench or {}, p))) for p in ([paths] if isinstance(paths, str) else paths)]
    return [(p, v) for p, v in found if v is not None]


def bench_ratio(ctx: Any, num: str, den: str) -> list[tuple[str, float]]:
    """``bench[num] / bench[den]`` (dotted paths); ``[]`` when either is missing or the divisor is 0."""
    a, b = _number(_path(ctx.bench or {}, num)), _number(_path(ctx.bench or {}, den))
    if a is None or not b:
        return []
    return [(f"{num} / {den}", a / b)]


def param_spread(ctx: Any) -> list[tuple[str, float]]:
    """The largest mean parameter count of the sweep's settings over the smallest (1: equal size)."""
    totals = [g.params["total"] for g in ctx.sweep.groups if g.params.get("total")]
    if len(totals) < 2:
        return []
    return [("largest / smallest parameter count of the settings", max(totals) / min(totals))]


def ffn_block_share(ctx: Any) -> list[tuple[str, float]]:
    """Per setting of the base shape (:func:`is_base_shape`): FFN parameters per FFN layer / (that +
    attention parameters per attention sub-layer)."""
    out = []
    for g in ctx.sweep.groups:
        if not (g.params.get("ffn") and g.params.get("attention")):
            continue
        job = (g.jobs or g.diverged or g.failed)[0]
        if not is_base_shape(g.config(), job.choices):
            continue
        share = block_share(g)
        if share is not None:
            out.append((g.label(), share))
    return out


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
