"""C12: dropout and label smoothing."""

from __future__ import annotations

from ..aggregate import Sweep, fmt_value
from .core import (
    BETTER,
    INCONCLUSIVE,
    WORSE,
    Options,
    Verdict,
    _measured,
    _missing,
    _no_metric,
    _numeric,
    _verdict,
    best_of,
    claim,
    contexts,
    decide,
    higher_is_better,
    pick_metric,
)

SEQ_METRICS = ("test/bleu", "val/bleu")


@claim("C12")
def c12_dropout(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C12 (dropout): the best dropout rate > 0 beats no dropout."""
    key = "model.dropout"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        p = _numeric(cells)
        pos = [v for v in p if v > 0]
        if 0 not in p or not pos:
            continue
        metric = pick_metric(list(p.values()), opts)
        if metric is None:
            out.append(_no_metric("C12", ctx))
            continue
        c, family = best_of([(f"dropout={fmt_value(v)}", p[v]) for v in sorted(pos)], ("dropout=0", p[0]), metric)
        fails = ["no dropout is better than every rate > 0"] if c.outcome == WORSE else []
        items = [(f"dropout={fmt_value(v)}", p[v]) for v in sorted(p)]
        notes = (
            [
                f"the best rate is picked after the fact: its comparison with dropout 0 is corrected over the "
                f"{len(pos)} rates > 0 (Holm–Bonferroni)"
            ]
            if len(pos) > 1
            else []
        )
        v = decide(
            "C12",
            sweep,
            ctx,
            metric,
            items,
            [c] + [x for x in family if x is not c],
            fails,
            c.outcome == BETTER,
            notes=notes,
            decisive=[c],
        )
        v.reason = "dropout: " + v.reason
        out.append(v)
    return out or _missing("C12", "dropout 0 and > 0")


@claim("C12")
def c12_label_smoothing(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C12 (label smoothing): ε > 0 costs perplexity but gains BLEU."""
    key = "loss.label_smoothing"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        e = _numeric(cells)
        pos = sorted(v for v in e if v > 0)
        if 0 not in e or not pos:
            continue
        groups = list(e.values())
        wanted = ([opts.metric] if opts.metric and higher_is_better(opts.metric) else []) + list(SEQ_METRICS)
        seq = next((m for m in wanted if all(g.stat(m) for g in groups)), None)
        ppl = next((m for m in ("val/ppl", "val/loss") if all(g.stat(m) for g in groups)), None)
        if seq is None or ppl is None:
            out.append(
                _verdict(
                    "C12",
                    INCONCLUSIVE,
                    "label smoothing: needs a BLEU metric and val/ppl or val/loss "
                    f"in every setting (found: {seq or 'no BLEU'}, {ppl or 'no perplexity'})",
                    "n/a",
                    ctx,
                )
            )
            continue
        cands = [(f"ls={fmt_value(v)}", e[v]) for v in pos]
        # the ε > 0 with the best BLEU is picked after the fact: both of its comparisons are corrected
        # over the len(pos) candidates (Holm–Bonferroni)
        cii, _ = best_of(cands, ("ls=0", e[0]), seq, True)
        ci, _ = best_of(cands, ("ls=0", e[0]), ppl, False, rank_metric=seq)
        name = cii.a
        eps = next(g for n, g in cands if n == name)
        fails = (["label smoothing lowers perplexity"] if ci.outcome == BETTER else []) + (
            [f"label smoothing lowers {seq}"] if cii.outcome == WORSE else []
        )
        items = [(f"ls={fmt_value(v)}", e[v]) for v in sorted(e)]
        pair = [("ls=0", e[0]), (name, eps)]
        notes = [f"(i) holds when {name} is worse than ls=0 on {ppl}"]
        if len(pos) > 1:
            notes.append(
                f"ε is picked by best {seq}, so both comparisons are corrected over the {len(pos)} values "
                f"ε > 0 (Holm–Bonferroni)"
            )
        v = decide(
            "C12",
            sweep,
            ctx,
            seq,
            pair,
            [cii, ci],
            fails,
            ci.outcome == WORSE and cii.outcome == BETTER,
            notes=notes,
            measured=" | ".join(_measured(m, items) for m in (ppl, seq)),
        )
        v.reason = "label smoothing: " + v.reason
        out.append(v)
    return out or _missing("C12", "label_smoothing 0 and > 0")
