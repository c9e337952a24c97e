"""C13: path length. Self-attention joins two positions in O(1) steps, a recurrent layer in O(n), a
convolution in O(n/k) (Vaswani et al. 2017 §4, Table 1); the claim is that the shorter path makes a
dependency across a long distance easier to learn.

Read from a sweep over ``model/mixer`` (``mha``, ``lstm``, optionally ``conv``) × ``data.distance``
(the recall task of :mod:`xformer.data.recall`) at equal parameter count."""

from __future__ import annotations

from ..aggregate import Group, Sweep, fmt_value
from .core import (
    WORSE,
    Options,
    Verdict,
    claim,
    compare_groups,
    decide,
    each_context,
)

MIXER, DISTANCE = "model/mixer", "data.distance"
ATTENTION, RECURRENT = "mha", "lstm"
LEARNT = 0.9
"""Accuracy at which a mixer counts as having learnt the dependency (chance is 1 / n_symbols)."""
METRICS = ("test/exact_match", "val/exact_match", "test/acc", "val/acc")


def _metric(groups: list[Group], opts: Options) -> str | None:
    for m in ([opts.metric] if opts.metric else []) + list(METRICS):
        if all(g.stat(m) is not None for g in groups):
            return m
    return None


def learnt_up_to(by_k: dict[float, Group], metric: str) -> tuple[float | None, float | None]:
    """``(largest distance learnt, first distance below LEARNT)`` of one mixer: the distances in
    order until the mean accuracy first falls below :data:`LEARNT` (``None`` when none / never)."""
    ok, drop = None, None
    for k in sorted(by_k):
        s = by_k[k].stat(metric)
        if s is None or not s.n or s.mean < LEARNT:
            drop = k
            break
        ok = k
    return ok, drop


@claim("C13")
def c13_path_length(sweep: Sweep, opts: Options) -> list[Verdict]:
    """C13: attention holds its short-distance accuracy at the longest distance, the recurrent layer does not."""

    def judge(ctx: str, cells: dict, metric_for) -> Verdict | None:  # noqa: ARG001 - C13 picks exact match
        by_mixer: dict[str, dict[float, Group]] = {}
        for (mixer, k), g in cells.items():
            if isinstance(k, (int, float)) and not isinstance(k, bool):
                by_mixer.setdefault(str(mixer), {})[k] = g
        att, rec = by_mixer.get(ATTENTION, {}), by_mixer.get(RECURRENT, {})
        shared = sorted(set(att) & set(rec))
        if len(shared) < 2:
            return None
        k_lo, k_hi = shared[0], shared[-1]
        groups = [g for by_k in by_mixer.values() for g in by_k.values()]
        metric = _metric(groups, opts)
        if metric is None:
            return None
        lo_hi = f"{fmt_value(k_lo)}→{fmt_value(k_hi)}"
        c_att = compare_groups(att[k_hi], att[k_lo], metric, f"mha@{fmt_value(k_hi)}", f"mha@{fmt_value(k_lo)}")
        c_rec = compare_groups(rec[k_hi], rec[k_lo], metric, f"lstm@{fmt_value(k_hi)}", f"lstm@{fmt_value(k_lo)}")
        comps, notes, fails = [c_att, c_rec], [], []
        if "conv" in by_mixer and k_hi in by_mixer["conv"] and k_lo in by_mixer["conv"]:
            conv = by_mixer["conv"]
            c_conv = compare_groups(
                conv[k_hi], conv[k_lo], metric, f"conv@{fmt_value(k_hi)}", f"conv@{fmt_value(k_lo)}"
            )
            notes.append(c_conv.text())
        # the positive control: every layer type learns the dependency at the shortest distance
        control = {
            m: by_k[k_lo].stat(metric).mean
            for m, by_k in by_mixer.items()
            if k_lo in by_k and by_k[k_lo].stat(metric) is not None and by_k[k_lo].stat(metric).n
        }
        weak = sorted(m for m in (ATTENTION, RECURRENT) if control.get(m, 0.0) < LEARNT)
        reach = []
        for m, by_k in sorted(by_mixer.items()):
            ok, drop = learnt_up_to(by_k, metric)
            reach.append(
                f"{m}: learnt (mean ≥ {LEARNT:g}) up to distance {fmt_value(ok) if ok is not None else 'none'}"
                + (f", below it from {fmt_value(drop)}" if drop is not None else ", at every distance swept")
            )
        notes += reach
        att_holds = c_att.outcome != WORSE and att[k_hi].stat(metric).mean >= LEARNT
        rec_falls = c_rec.outcome == WORSE
        drop_att, drop_rec = -c_att.delta, -c_rec.delta  # accuracy lost from the shortest to the longest
        coverage = []
        if weak:
            coverage.append(
                f"this setting cannot show it: {', '.join(weak)} does not learn the dependency even at distance "
                f"{fmt_value(k_lo)} (mean {metric} {', '.join(f'{control.get(m, 0.0):.3g}' for m in weak)} < "
                f"{LEARNT:g}); train longer or shorten the smallest distance"
            )
        rec_hi = rec[k_hi].stat(metric)
        if not weak and c_rec.outcome != WORSE and rec_hi is not None and rec_hi.n and rec_hi.mean >= LEARNT:
            fails.append(
                f"the recurrent layer still learns the dependency at distance {fmt_value(k_hi)} "
                f"(mean {rec_hi.mean:.3g} ≥ {LEARNT:g}; {lo_hi}: {c_rec.outcome})"
            )
        elif c_att.outcome == WORSE and rec_falls and drop_att >= drop_rec:
            fails.append(
                f"attention loses as much accuracy as the recurrent layer from distance {lo_hi} "
                f"({drop_att:.3g} vs {drop_rec:.3g})"
            )
        if c_att.outcome == WORSE and not fails:
            notes.append(
                f"attention also loses accuracy from distance {lo_hi} ({drop_att:.3g}, the recurrent layer "
                f"{drop_rec:.3g}): the claim's first half fails at this budget, its contrast holds"
            )
        items = [(f"{m}@{fmt_value(k)}", g) for m, by_k in sorted(by_mixer.items()) for k, g in sorted(by_k.items())]
        measured = f"{metric} by distance: " + "; ".join(
            f"{m}: "
            + ", ".join(
                f"{fmt_value(k)} {g.stat(metric).text() if g.stat(metric) else 'n/a'}" for k, g in sorted(by_k.items())
            )
            for m, by_k in sorted(by_mixer.items())
        )
        v = decide(
            "C13",
            sweep,
            ctx,
            metric,
            [(c_att.a, att[k_hi]), (c_att.b, att[k_lo]), (c_rec.a, rec[k_hi]), (c_rec.b, rec[k_lo])],
            comps,
            fails,
            att_holds and rec_falls and not weak,
            coverage=coverage,
            notes=notes,
            measured=measured,
            key=c_rec,
        )
        v.settings = items
        return v

    need = f"{MIXER}=mha and lstm at two or more {DISTANCE} values"
    return each_context("C13", sweep, opts, [MIXER, DISTANCE], need, judge)
