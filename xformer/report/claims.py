"""Claim recognisers: which design claims (C1–C12 of CLAIMS.md) a sweep addresses, and the verdict.

Each recogniser is registered under its claim id in :data:`REGISTRY` and maps a
:class:`~xformer.report.aggregate.Sweep` (plus :class:`Options`) to a list of :class:`Verdict`
(empty: the sweep does not address the claim). A verdict is **supported**, **not supported** or
**inconclusive**, and carries the measured numbers (mean ± std, n) beside the published ones.

Noise rule (every comparison of two groups A and B on one metric)
-----------------------------------------------------------------
``Δ`` is A's improvement over B in the metric's better direction (lower is better for metrics named
``*loss*``, ``*ppl*``, ``*perplexity*``, ``*error*``, ``*wer*``, ``*cer*``; higher for the rest).
The noise is the pooled sample std ``s_p = sqrt(((n_A-1)s_A² + (n_B-1)s_B²) / (n_A+n_B-2))``.

- **too few seeds** when A or B has fewer than 2 finite runs → never decides anything;
- **better** when ``Δ > s_p``, **worse** when ``Δ < -s_p``;
- **tie** (within noise) when ``|Δ| ≤ s_p``.

A claim that predicts a difference is *inconclusive* when its deciding comparison is a tie or has
too few seeds; a claim that predicts *no* difference (C4 Pre-LN part, C6) treats a tie as support.
A group whose runs all diverged (non-finite metric, at least 2 of them) is *worse* than a group
with at least 2 finite runs.

Decision metric
---------------
``--metric KEY`` when given; otherwise the first of :data:`PREFERRED` present in every compared
group and not constant across them: ``test/bleu``, ``val/bleu``, ``test/exact_match``,
``val/exact_match``, ``test/exact_match@1x``, ``val/loss``, ``test/loss`` (BLEU/exact match first,
else loss). Claims are judged separately in every *context*: each combination of the other swept keys
(e.g. C1 at ``model.param_budget=null`` and at a fixed budget).

Rules per claim
---------------
- **C1** (``model.ffn_ratio``; needs 2 and 4): *supported* when 4 is better than 2 (and than 1, if
  swept) and, if 8 is swept, the gain 4→8 is smaller than the gain 2→4 (diminishing return). Gains are
  per million added parameters when the parameter totals are known (the paper's 25.4/25.8/26.2 BLEU at
  53/65/90 M: +0.033 vs +0.016 per M), else the raw differences (one doubling each). *Not supported*
  when 2 or 1 is better than 4, or 8 is better than 4 and its gain is not smaller. Else inconclusive.
- **C2** (always, from ``params``): per-block FFN share ``f / (f + a)`` with ``f`` = FFN parameters per
  FFN layer and ``a`` = attention parameters per attention sub-layer (a decoder layer has two). Judged on
  runs of the base shape (``d_ff = 4·d_model``, ``n_heads·d_head = d_model``, relu/gelu FFN, no
  parameter budget): *supported* when every such share is within ±0.03 of 2/3 (biases move it
  slightly), *not supported* otherwise, *inconclusive* without such runs. Counts are exact, no seeds.
- **C3** (``model.n_heads``; needs 1 and a value > 1): part (i) the best multi-head setting is better
  than 1 head; part (ii), with two or more multi-head settings, the largest head count is worse than
  the best (too many heads hurt); if the largest is itself the best and better than the next largest,
  (ii) fails. *Supported* when (i) holds and (ii) holds or cannot be tested; *not supported* when (i) or
  (ii) fails; else inconclusive.
- **C4** (``model/norm`` × ``optim.warmup_steps``; needs pre and post at 0 and at some warm-up > 0,
  the largest is used): (a) Post-LN needs warm-up: post with warm-up is better than post without, or
  post without warm-up has more diverged runs; fails when post without warm-up is better. (b) Pre-LN does
  not: pre without warm-up is a tie with or better than pre with warm-up, and has no diverged run; fails
  when worse or diverging. *Supported* when (a) and (b) hold, *not supported* when either fails, else
  inconclusive.
- **C5** (``model/pe`` and ``@Nx`` test metrics with N > 1; needs sinusoidal and learned): family
  ``test/exact_match@Nx`` (else ``acc``, ``bleu``, ``loss``; or the base of ``--metric``). *Supported*
  when sinusoidal is better than learned at one length N > 1 and worse at none; *not supported* when
  learned is better at any N > 1; else inconclusive. Other schemes are listed for comparison.
- **C6** (``model/pe`` with sinusoidal and learned): an equivalence claim with margin
  ``m = 0.02·max(|mean_sin|, |mean_learned|)``. *Supported* when ``|Δ| ≤ m`` and ``s_p ≤ m``; *not
  supported* when ``|Δ| > m`` and ``|Δ| > s_p``; inconclusive otherwise or with fewer than 2 seeds.
- **C7** (``bench.json`` ``attention_cost``): fitted log-log exponents of time and memory against n
  (read from the file, or fitted on the larger half of the per-n rows). Each exponent is consistent when
  ``|e - 2| ≤ 0.3`` and contradicts when ``e < 1.5`` or ``e > 2.5``. *Supported* when all are consistent,
  *not supported* when one contradicts, else inconclusive. Exponents labelled ``xformer`` are preferred.
- **C8** (``bench.json`` ``attention_vs_lstm``, ``crossover_n`` = the length where attention stops being
  cheaper, at width ``d``): *supported* when ``crossover_n ≥ d/2`` (attention is cheaper up to about
  n = d or beyond), *not supported* when ``crossover_n < d/2``, *inconclusive* without a crossover.
- **C9** (``model.attn_scale``): at the largest head size ``d_k`` (``d_head``, else
  ``d_model / n_heads``) swept with both settings, *supported* when scaled is better than unscaled,
  *not supported* when worse, else inconclusive; gaps at every ``d_k`` are listed.
- **C10** (``model/attention``; needs full and causal): *supported* when full is better than causal,
  *not supported* when worse, else inconclusive.
- **C11** (``model.d_head``; two or more values): *supported* when the largest ``d_head`` is better than
  the smallest, *not supported* when worse, else inconclusive.
- **C12** dropout (``model.dropout``; needs 0 and > 0): *supported* when the best rate > 0 is better than
  0, *not supported* when worse, else inconclusive. Label smoothing (``loss.label_smoothing``; needs 0
  and > 0, the ε > 0 with the best BLEU/exact match is used): (i) ε = 0 has lower ``val/ppl`` (else
  ``val/loss``), (ii) ε > 0 has better BLEU/exact match. *Supported* when both hold, *not supported* when
  either is reversed, else inconclusive (also when there is no BLEU/exact-match metric).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from .aggregate import Group, Stat, Sweep, fmt_value, value_sort_key
from .benchjson import bench_exponents, fit_rows, leaves

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
PREFERRED = ("test/bleu", "val/bleu", "test/exact_match", "val/exact_match", "test/exact_match@1x",
             "val/loss", "test/loss")
LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "error", "wer", "cer")
EQUIV_REL = 0.02          # C6 equivalence margin, relative to the larger mean
C2_TOL = 0.03             # C2: |share - 2/3| allowed
C7_OK, C7_BAD = 0.3, 0.5  # C7: |e - 2| <= OK consistent; |e - 2| > BAD contradicts

PUBLISHED = {
    "C1": "BLEU 25.4 / 25.8 / 26.2 at d_ff 1024 / 2048 / 4096 (ratio 2 / 4 / 8; 53 / 65 / 90 M params), "
          "Vaswani et al. 2017 Table 3 row C",
    "C2": "attention 4·512² ≈ 1.05 M vs FFN 2·512·2048 ≈ 2.10 M: FFN ≈ 2/3 of a block, Vaswani et al. 2017 §3.3",
    "C3": "BLEU 24.9 / 25.5 / 25.8 / 25.8 / 25.4 at h = 1 / 4 / 8 / 16 / 32, Vaswani et al. 2017 Table 3 row A",
    "C4": "IWSLT14 BLEU: Post-LN 8.45 without warm-up, ~34 with 4000 steps; Pre-LN ~34 without, Xiong et al. 2020",
    "C5": "sinusoidal extrapolates to longer sequences, learned cannot; relative schemes differ "
          "(Vaswani et al. 2017 §3.5; Press et al. 2022; Kazemnejad et al. 2023)",
    "C6": "BLEU 25.7 (learned) vs 25.8 (sinusoidal), Vaswani et al. 2017 Table 3 row E",
    "C7": "O(n²·d) time, O(n²) memory (exponent 2; fp16 n×n scores 1 k → 2 MB, 10 k → 200 MB, 100 k → 20 GB), "
          "Vaswani et al. 2017 Table 1",
    "C8": "attention cheaper than recurrence when n < d (n²·d vs n·d²), O(1) sequential steps, "
          "Vaswani et al. 2017 Table 1 and §4",
    "C9": "scaling by 1/√d_k keeps softmax out of saturation; worse without it for large d_k, "
          "Vaswani et al. 2017 §3.2.1",
    "C10": "bidirectional encoder understands the source better than a causal one, Vaswani et al. 2017 §3.2.3; BERT",
    "C11": "BLEU 25.1 / 25.4 at d_k 16 / 32 (base d_k 64: 25.8), Vaswani et al. 2017 Table 3 rows B and base",
    "C12": "P_drop 0 → 24.6 BLEU (base 0.1: 25.8, PPL 4.92); ε_ls 0 → better perplexity, worse BLEU, "
           "Vaswani et al. 2017 Table 3 row D",
}


# -- results ------------------------------------------------------------------------------------
@dataclass
class Verdict:
    """The outcome for one claim in one context.

    Attributes:
        claim: ``"C1"`` ...; ``status``: supported | not supported | inconclusive; ``reason``: the
        deciding comparisons; ``measured``: the numbers; ``published``: the paper's; ``context``: the
        other swept values the verdict holds at (``""``: all).
    """

    claim: str
    status: str
    reason: str
    measured: str
    published: str
    context: str = ""

    def line(self) -> str:
        """One line: ``C1 [ctx]: supported: reason | measured ... | published ...``."""
        ctx = f" [{self.context}]" if self.context else ""
        return (f"{self.claim}{ctx}: {self.status}: {self.reason} | measured {self.measured} "
                f"| published {self.published}")


@dataclass
class Comparison:
    """Group A against group B on one metric (see the module docstring's noise rule).

    ``delta`` is A's improvement over B (positive: A better), ``noise`` the pooled std (``None`` with
    fewer than 2 seeds on a side), ``outcome`` one of better | worse | tie | too few seeds."""

    a: str
    b: str
    delta: float
    noise: float | None
    outcome: str

    def text(self) -> str:
        noise = f"{self.noise:.3g}" if self.noise is not None else "n/a"
        delta = f"{(self.delta or 0.0):+.3g}" if math.isfinite(self.delta) else "n/a"
        return f"{self.a} vs {self.b}: Δ {delta} (noise {noise}) → {self.outcome}"


@dataclass
class Options:
    """What the recognisers may use beyond the sweep: ``metric`` (``--metric``), parsed ``bench`` JSON."""

    metric: str | None = None
    bench: dict | None = None


def higher_is_better(metric: str) -> bool:
    """False for loss-like metrics (``val/loss``, ``val/ppl``, ``test/loss@2x`` ...), True otherwise."""
    base = metric.split("@")[0].rsplit("/", 1)[-1].lower()
    return not any(word in base for word in LOWER_IS_BETTER)


def compare(a: Stat | None, b: Stat | None, higher: bool, a_name: str = "A", b_name: str = "B") -> Comparison:
    """Compare two statistics with the noise rule of the module docstring."""
    if a is None or b is None:
        return Comparison(a_name, b_name, math.nan, None, "too few seeds")
    a_div = a.n == 0 and a.n_nonfinite >= 2
    b_div = b.n == 0 and b.n_nonfinite >= 2
    if a_div and b.n >= 2:
        return Comparison(a_name, b_name, -math.inf, None, "worse")
    if b_div and a.n >= 2:
        return Comparison(a_name, b_name, math.inf, None, "better")
    sign = 1.0 if higher else -1.0
    delta = sign * (a.mean - b.mean) if a.n and b.n else math.nan
    if a.n < 2 or b.n < 2:
        return Comparison(a_name, b_name, delta, None, "too few seeds")
    sa, sb = a.std or 0.0, b.std or 0.0
    noise = math.sqrt(((a.n - 1) * sa ** 2 + (b.n - 1) * sb ** 2) / (a.n + b.n - 2))
    outcome = "better" if delta > noise else "worse" if delta < -noise else "tie"
    return Comparison(a_name, b_name, delta, noise, outcome)


# -- helpers for the recognisers ------------------------------------------------------------------
def contexts(sweep: Sweep, axes: list[str]) -> list[tuple[str, dict[tuple, Group]]]:
    """Split the sweep's groups by the swept keys *not* in ``axes``.

    Returns ``[(context label, {axis values tuple: group})]``, in group order."""
    others = [k for k in sweep.swept_keys if k not in axes]
    out: dict[tuple, dict[tuple, Group]] = {}
    for g in sweep.groups:
        ctx = tuple(g.values.get(k) for k in others)
        out.setdefault(ctx, {})[tuple(g.values.get(a) for a in axes)] = g
    return [(", ".join(f"{k}={fmt_value(v)}" for k, v in zip(others, ctx)), cells) for ctx, cells in out.items()]


def _numeric(cells: dict[tuple, Group]) -> dict[float, Group]:
    """``{value: group}`` for a one-axis context, numeric values only (bools excluded)."""
    return {k[0]: g for k, g in cells.items()
            if isinstance(k[0], (int, float)) and not isinstance(k[0], bool)}


def pick_metric(groups: list[Group], opts: Options) -> str | None:
    """The decision metric for ``groups`` (module docstring); ``None`` when none is shared."""
    def present(m: str) -> bool:
        return all(g.stat(m) is not None for g in groups)

    if opts.metric:
        return opts.metric if present(opts.metric) else None
    first = None
    for m in PREFERRED:
        if not present(m):
            continue
        first = first or m
        values = {v for g in groups for v in g.stat(m).values}
        if len(values) > 1:
            return m
    return first


def _measured(metric: str, items: list[tuple[str, Group]]) -> str:
    """``"val/loss: ratio 2: 2.31 ± 0.02 (n=3); ..."``."""
    parts = []
    for name, g in items:
        s = g.stat(metric)
        parts.append(f"{name}: {s.text() if s else 'n/a'}")
    return f"{metric}: " + "; ".join(parts)


def _outcome(fails: list[str], holds_all: bool, reasons: list[str]) -> tuple[str, str]:
    """(status, reason) from failed parts / all parts holding; reasons are the comparison texts."""
    if fails:
        return NOT_SUPPORTED, "; ".join(fails + reasons)
    return (SUPPORTED if holds_all else INCONCLUSIVE), "; ".join(reasons)


Recogniser = Callable[[Sweep, Options], list[Verdict]]
REGISTRY: dict[str, Recogniser] = {}


def claim(cid: str) -> Callable[[Recogniser], Recogniser]:
    """Register a recogniser under claim id ``cid``."""
    def deco(fn: Recogniser) -> Recogniser:
        REGISTRY[cid] = fn
        return fn
    return deco


def _verdict(cid: str, status: str, reason: str, measured: str, context: str = "") -> Verdict:
    return Verdict(cid, status, reason, measured, PUBLISHED[cid], context)


def _missing(cid: str, need: str) -> list[Verdict]:
    return [_verdict(cid, INCONCLUSIVE, f"swept, but no context has {need}", "n/a")]


def _simple_axis(cid: str, sweep: Sweep, opts: Options, key: str, good: Any, bad: Any,
                 name: Callable[[Any], str]) -> list[Verdict]:
    """Verdicts for claims "``good`` is better than ``bad`` on ``key``" (C10 and similar)."""
    out = []
    for ctx, cells in contexts(sweep, [key]):
        g, b = cells.get((good,)), cells.get((bad,))
        if g is None or b is None:
            continue
        metric = pick_metric([g, b], opts)
        if metric is None:
            out.append(_verdict(cid, INCONCLUSIVE, "no metric shared by both groups", "n/a", ctx))
            continue
        c = compare(g.stat(metric), b.stat(metric), higher_is_better(metric), name(good), name(bad))
        status = {"better": SUPPORTED, "worse": NOT_SUPPORTED}.get(c.outcome, INCONCLUSIVE)
        out.append(_verdict(cid, status, c.text(), _measured(metric, [(name(good), g), (name(bad), b)]), ctx))
    return out or _missing(cid, f"both {key}={fmt_value(good)} and {fmt_value(bad)}")


# -- the claims ---------------------------------------------------------------------------------
@claim("C1")
def c1_ffn_ratio(sweep: Sweep, opts: Options) -> list[Verdict]:
    """FFN ratio 4 beats 2 (and 1); 8 gains less over 4 than 4 over 2."""
    key = "model.ffn_ratio"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        r = _numeric(cells)
        if 2 not in r or 4 not in r:
            continue
        metric = pick_metric(list(r.values()), opts)
        items = [(f"ratio {fmt_value(v)}", r[v]) for v in sorted(r)]
        if metric is None:
            out.append(_verdict("C1", INCONCLUSIVE, "no metric shared by all ratios", "n/a", ctx))
            continue
        hb = higher_is_better(metric)
        c42 = compare(r[4].stat(metric), r[2].stat(metric), hb, "4", "2")
        c41 = compare(r[4].stat(metric), r[1].stat(metric), hb, "4", "1") if 1 in r else None
        c84 = compare(r[8].stat(metric), r[4].stat(metric), hb, "8", "4") if 8 in r else None
        comps = [c for c in (c41, c42, c84) if c is not None]
        fails = [f"ratio {c.b} beats 4" for c in (c41, c42) if c is not None and c.outcome == "worse"]
        notes = [c.text() for c in comps]
        diminishing = None
        if c84 is not None:
            rate42, rate84, unit = _gain_rates(r[2], r[4], r[8], c42.delta, c84.delta)
            diminishing = rate84 < rate42
            notes.append(f"gain {unit}: 2→4 {rate42:.3g}, 4→8 {rate84:.3g}")
            if c84.outcome == "better" and not diminishing:
                fails.append("8 gains at least as much over 4 as 4 over 2 (no diminishing return)")
        holds = (c42.outcome == "better" and (c41 is None or c41.outcome == "better")
                 and diminishing is not False)
        status, reason = _outcome(fails, holds, notes)
        out.append(_verdict("C1", status, reason, _measured(metric, items), ctx))
    return out or _missing("C1", "ratios 2 and 4")


def _gain_rates(g2: Group, g4: Group, g8: Group, d42: float, d84: float) -> tuple[float, float, str]:
    """C1's gains 2→4 and 4→8: per million added parameters when all three groups have increasing
    parameter totals, else per doubling of the ratio (the raw differences)."""
    p2, p4, p8 = (g.params.get("total") for g in (g2, g4, g8))
    if p2 and p4 and p8 and p2 < p4 < p8:
        return d42 / ((p4 - p2) / 1e6), d84 / ((p8 - p4) / 1e6), "per M added params"
    return d42, d84, "per doubling"


@claim("C2")
def c2_ffn_share(sweep: Sweep, opts: Options) -> list[Verdict]:
    """The FFN's share of a block's parameters against 2/3, from the parameter counts."""
    if not sweep.groups:
        return []
    rows = [(g, block_share(g)) for g in sweep.groups if g.params.get("ffn") and g.params.get("attention")]
    if not rows:
        return [_verdict("C2", INCONCLUSIVE, "no parameter counts in metrics.json", "n/a")]
    base = [(g, s) for g, s in rows if s is not None and is_base_shape(g.config(), (g.jobs or g.failed)[0].choices)]
    measured = "; ".join(f"{g.label()}: {s:.3f}" if s is not None else f"{g.label()}: n/a" for g, s in rows)
    measured = "FFN share of block: " + measured
    if not base:
        return [_verdict("C2", INCONCLUSIVE, "no run of the base shape (d_ff = 4·d_model, n_heads·d_head = "
                         "d_model, relu/gelu FFN)", measured)]
    off = [(g, s) for g, s in base if abs(s - 2 / 3) > C2_TOL]
    status = NOT_SUPPORTED if off else SUPPORTED
    worst = max(base, key=lambda gs: abs(gs[1] - 2 / 3))
    reason = (f"{len(base)} base-shape setting(s), largest deviation from 2/3: {worst[1] - 2 / 3:+.3f} "
              f"(tolerance ±{C2_TOL})")
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
    job = (g.jobs or g.failed)[0]
    counts = layer_counts(g.config(), job.choices)
    if counts is None:
        return None
    n_attn, n_ffn = counts
    a, f = g.params["attention"] / n_attn, g.params["ffn"] / n_ffn
    return f / (f + a)


def is_base_shape(cfg: dict, choices: dict) -> bool:
    """d_ff = 4·d_model, n_heads·d_head = d_model, a relu/gelu FFN (not SwiGLU) and no parameter budget."""
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
    return (m.get("param_budget") is None and float(d_ff) == 4 * d and inner == d
            and "swiglu" not in ffn.lower())


@claim("C3")
def c3_heads(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Several heads beat one; too many heads hurt again."""
    key = "model.n_heads"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        h = _numeric(cells)
        multi = sorted(v for v in h if v > 1)
        if 1 not in h or not multi:
            continue
        metric = pick_metric(list(h.values()), opts)
        if metric is None:
            out.append(_verdict("C3", INCONCLUSIVE, "no metric shared by all head counts", "n/a", ctx))
            continue
        hb = higher_is_better(metric)
        sign = 1 if hb else -1
        best = max(multi, key=lambda v: sign * h[v].stat(metric).mean if h[v].stat(metric).n else -math.inf)
        ci = compare(h[best].stat(metric), h[1].stat(metric), hb, f"h={fmt_value(best)}", "h=1")
        comps, fails = [ci], []
        if ci.outcome == "worse":
            fails.append("one head beats the best multi-head setting")
        ii_holds = True                   # part (ii) untestable with one multi-head setting
        top = multi[-1]
        if len(multi) >= 2:
            if top != best:
                cii = compare(h[best].stat(metric), h[top].stat(metric), hb, f"h={fmt_value(best)}",
                              f"h={fmt_value(top)}")
                ii_holds = cii.outcome == "better"
            else:
                cii = compare(h[top].stat(metric), h[multi[-2]].stat(metric), hb, f"h={fmt_value(top)}",
                              f"h={fmt_value(multi[-2])}")
                ii_holds = False
                if cii.outcome == "better":
                    fails.append("the largest head count is the best (too many heads do not hurt)")
            comps.append(cii)
        holds = ci.outcome == "better" and ii_holds
        status, reason = _outcome(fails, holds, [c.text() for c in comps])
        if len(multi) < 2:
            reason += "; part (ii) not tested (one multi-head setting)"
        items = [(f"h={fmt_value(v)}", h[v]) for v in sorted(h)]
        out.append(_verdict("C3", status, reason, _measured(metric, items), ctx))
    return out or _missing("C3", "n_heads 1 and > 1")


def diverged(g: Group, metric: str) -> int:
    """Finished runs of ``g`` whose ``metric`` or ``val/loss`` is non-finite."""
    n = 0
    for j in g.jobs:
        vals = [j.metrics.get(metric), j.metrics.get("val/loss")]
        n += any(v is not None and not math.isfinite(v) for v in vals)
    return n


@claim("C4")
def c4_norm_warmup(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Post-LN needs warm-up; Pre-LN does not."""
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
            out.append(_verdict("C4", INCONCLUSIVE, "no metric shared by the four settings", "n/a", ctx))
            continue
        hb = higher_is_better(metric)
        div = {k: diverged(g, metric) for k, g in grid.items()}
        ca = compare(grid["post", w].stat(metric), grid["post", 0].stat(metric), hb, f"post@{w}", "post@0")
        cb = compare(grid["pre", 0].stat(metric), grid["pre", w].stat(metric), hb, "pre@0", f"pre@{w}")
        a_holds = ca.outcome == "better" or div["post", 0] > div["post", w]
        a_fails = not a_holds and ca.outcome == "worse"
        b_fails = cb.outcome == "worse" or div["pre", 0] > 0
        b_holds = cb.outcome in ("better", "tie") and not b_fails
        fails = (["Post-LN does better without warm-up"] if a_fails else []) + \
                (["Pre-LN suffers without warm-up"] if b_fails else [])
        reasons = [ca.text(), cb.text(), "diverged runs: " + ", ".join(f"{n}@{s}: {div[n, s]}" for n, s in grid)]
        status, reason = _outcome(fails, a_holds and b_holds, reasons)
        items = [(f"{n}@{s}", g) for (n, s), g in grid.items()]
        out.append(_verdict("C4", status, reason, _measured(metric, items), ctx))
    return out or _missing("C4", "pre and post at warm-up 0 and > 0")


LENGTH_RE = re.compile(r"^(?P<base>.+)@(?P<n>\d+(?:\.\d+)?)x$")


def length_metrics(keys: list[str], base: str | None = None) -> tuple[str, dict[float, str]] | None:
    """The ``@Nx`` metric family used by C5: ``(base, {N: key})`` with some N > 1, or ``None``."""
    families: dict[str, dict[float, str]] = {}
    for k in keys:
        m = LENGTH_RE.match(k)
        if m:
            families.setdefault(m["base"], {})[float(m["n"])] = k
    order = [base] if base else ["test/exact_match", "test/acc", "test/bleu", "test/loss"]
    order += sorted(families)
    for b in order:
        fam = families.get(b or "")
        if fam and any(n > 1 for n in fam):
            return b, dict(sorted(fam.items()))
    return None


@claim("C5")
def c5_length(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Sinusoidal positions extrapolate to longer test sequences; learned do not."""
    key = "model/pe"
    base = opts.metric.split("@")[0] if opts.metric else None
    fam = length_metrics(sweep.metric_keys, base)
    if key not in sweep.swept_keys or fam is None:
        return []
    base, lengths = fam
    hb = higher_is_better(base)
    out = []
    for ctx, cells in contexts(sweep, [key]):
        sin, lrn = cells.get(("sinusoidal",)), cells.get(("learned",))
        if sin is None or lrn is None:
            continue
        comps = [compare(sin.stat(k), lrn.stat(k), hb, f"sinusoidal@{n:g}x", f"learned@{n:g}x")
                 for n, k in lengths.items() if n > 1]
        fails = [f"learned beats sinusoidal at {c.a.split('@')[1]}" for c in comps if c.outcome == "worse"]
        holds = any(c.outcome == "better" for c in comps)
        status, reason = _outcome(fails, holds, [c.text() for c in comps])
        parts = []
        for (pe,), g in sorted(cells.items(), key=lambda kv: value_sort_key(kv[0][0])):
            vals = ", ".join(f"{n:g}x {g.stat(k).text() if g.stat(k) else 'n/a'}" for n, k in lengths.items())
            parts.append(f"{fmt_value(pe)}: {vals}")
        out.append(_verdict("C5", status, reason, f"{base}: " + "; ".join(parts), ctx))
    return out or _missing("C5", "both sinusoidal and learned")


@claim("C6")
def c6_pe_equal(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Learned and sinusoidal positions give nearly the same in-distribution quality."""
    key = "model/pe"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        sin, lrn = cells.get(("sinusoidal",)), cells.get(("learned",))
        if sin is None or lrn is None:
            continue
        metric = pick_metric([sin, lrn], opts)
        if metric is None:
            out.append(_verdict("C6", INCONCLUSIVE, "no metric shared by both groups", "n/a", ctx))
            continue
        c = compare(sin.stat(metric), lrn.stat(metric), higher_is_better(metric), "sinusoidal", "learned")
        measured = _measured(metric, [("sinusoidal", sin), ("learned", lrn)])
        if c.noise is None:
            status, margin = INCONCLUSIVE, math.nan
        else:
            margin = EQUIV_REL * max(abs(sin.stat(metric).mean), abs(lrn.stat(metric).mean))
            d = abs(c.delta)
            status = (SUPPORTED if d <= margin and c.noise <= margin else
                      NOT_SUPPORTED if d > margin and d > c.noise else INCONCLUSIVE)
        out.append(_verdict("C6", status, f"{c.text()}; equivalence margin {margin:.3g}", measured, ctx))
    return out or _missing("C6", "both sinusoidal and learned")


def head_size(cfg: dict) -> float | None:
    """d_k of a config: ``model.d_head``, else ``d_model / n_heads``."""
    m = cfg.get("model") or {}
    try:
        return float(m.get("d_head") or int(m["d_model"]) / int(m["n_heads"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


@claim("C9")
def c9_scale(sweep: Sweep, opts: Options) -> list[Verdict]:
    """1/√d_k scaling helps, decided at the largest head size."""
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
            out.append(_verdict("C9", INCONCLUSIVE, "no metric shared by the groups", "n/a", ctx))
            continue
        hb = higher_is_better(metric)
        comps = [compare(by_dk[dk][True].stat(metric), by_dk[dk][False].stat(metric), hb,
                         f"scaled@d_k={dk:g}", f"unscaled@d_k={dk:g}") for dk in both]
        top = comps[-1]
        status = {"better": SUPPORTED, "worse": NOT_SUPPORTED}.get(top.outcome, INCONCLUSIVE)
        items = [(f"{'scaled' if s else 'unscaled'}@d_k={dk:g}", by_dk[dk][s]) for dk in both for s in (True, False)]
        reason = f"decided at d_k={both[-1]:g}: " + "; ".join(c.text() for c in reversed(comps))
        out.append(_verdict("C9", status, reason, _measured(metric, items), ctx))
    return out or _missing("C9", "attn_scale true and false at one head size")


@claim("C10")
def c10_bidirectional(sweep: Sweep, opts: Options) -> list[Verdict]:
    """A full (bidirectional) encoder beats a causal one."""
    if "model/attention" not in sweep.swept_keys:
        return []
    return _simple_axis("C10", sweep, opts, "model/attention", "full", "causal", str)


@claim("C11")
def c11_head_dim(sweep: Sweep, opts: Options) -> list[Verdict]:
    """A larger key size beats a smaller one (largest against smallest d_head)."""
    key = "model.d_head"
    if key not in sweep.swept_keys:
        return []
    out = []
    for ctx, cells in contexts(sweep, [key]):
        d = _numeric(cells)
        if len(d) < 2:
            continue
        lo, hi = min(d), max(d)
        metric = pick_metric(list(d.values()), opts)
        if metric is None:
            out.append(_verdict("C11", INCONCLUSIVE, "no metric shared by all d_head", "n/a", ctx))
            continue
        c = compare(d[hi].stat(metric), d[lo].stat(metric), higher_is_better(metric),
                    f"d_head={fmt_value(hi)}", f"d_head={fmt_value(lo)}")
        status = {"better": SUPPORTED, "worse": NOT_SUPPORTED}.get(c.outcome, INCONCLUSIVE)
        out.append(_verdict("C11", status, c.text(),
                            _measured(metric, [(f"d_head={fmt_value(v)}", d[v]) for v in sorted(d)]), ctx))
    return out or _missing("C11", "two d_head values")


SEQ_METRICS = ("test/bleu", "val/bleu", "test/exact_match", "val/exact_match", "test/exact_match@1x")


@claim("C12")
def c12_regularisation(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Dropout helps; label smoothing costs perplexity but helps BLEU."""
    out: list[Verdict] = []
    if "model.dropout" in sweep.swept_keys:
        found = []
        for ctx, cells in contexts(sweep, ["model.dropout"]):
            p = _numeric(cells)
            pos = [v for v in p if v > 0]
            if 0 not in p or not pos:
                continue
            metric = pick_metric(list(p.values()), opts)
            if metric is None:
                found.append(_verdict("C12", INCONCLUSIVE, "dropout: no shared metric", "n/a", ctx))
                continue
            hb = higher_is_better(metric)
            sign = 1 if hb else -1
            best = max(pos, key=lambda v: sign * p[v].stat(metric).mean if p[v].stat(metric).n else -math.inf)
            c = compare(p[best].stat(metric), p[0].stat(metric), hb, f"dropout={fmt_value(best)}", "dropout=0")
            status = {"better": SUPPORTED, "worse": NOT_SUPPORTED}.get(c.outcome, INCONCLUSIVE)
            found.append(_verdict("C12", status, "dropout: " + c.text(),
                                  _measured(metric, [(f"dropout={fmt_value(v)}", p[v]) for v in sorted(p)]), ctx))
        out += found or _missing("C12", "dropout 0 and > 0")
    if "loss.label_smoothing" in sweep.swept_keys:
        found = []
        for ctx, cells in contexts(sweep, ["loss.label_smoothing"]):
            e = _numeric(cells)
            pos = sorted(v for v in e if v > 0)
            if 0 not in e or not pos:
                continue
            groups = list(e.values())
            wanted = ([opts.metric] if opts.metric and higher_is_better(opts.metric) else []) + list(SEQ_METRICS)
            seq = next((m for m in wanted if all(g.stat(m) for g in groups)), None)
            ppl = next((m for m in ("val/ppl", "val/loss") if all(g.stat(m) for g in groups)), None)
            if seq is not None:
                eps = max(pos, key=lambda v: e[v].stat(seq).mean if e[v].stat(seq).n else -math.inf)
            else:
                eps = pos[0]
            name = f"ls={fmt_value(eps)}"
            comps, fails, holds = [], [], seq is not None and ppl is not None
            if ppl is not None:
                ci = compare(e[0].stat(ppl), e[eps].stat(ppl), False, "ls=0", name)
                comps.append(ci)
                holds &= ci.outcome == "better"
                if ci.outcome == "worse":
                    fails.append("label smoothing lowers perplexity")
            if seq is not None:
                cii = compare(e[eps].stat(seq), e[0].stat(seq), True, name, "ls=0")
                comps.append(cii)
                holds &= cii.outcome == "better"
                if cii.outcome == "worse":
                    fails.append(f"label smoothing lowers {seq}")
            status, reason = _outcome(fails, holds, [c.text() for c in comps])
            if seq is None:
                reason += "; no BLEU/exact-match metric"
            items = [(f"ls={fmt_value(v)}", e[v]) for v in sorted(e)]
            measured = " | ".join(_measured(m, items) for m in (ppl, seq) if m)
            found.append(_verdict("C12", status, "label smoothing: " + reason, measured or "n/a", ctx))
        out += found or _missing("C12", "label_smoothing 0 and > 0")
    return out


# -- bench.json (C7, C8) ------------------------------------------------------------------------
@claim("C7")
def c7_attention_cost(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Time and memory exponents of attention against n from bench.json."""
    section = (opts.bench or {}).get("attention_cost")
    if not isinstance(section, (dict, list)):
        return []
    exps = bench_exponents(section) if isinstance(section, dict) else fit_rows(section)
    if not exps:
        return [_verdict("C7", INCONCLUSIVE, "bench.json attention_cost has no exponents or per-n rows", "n/a")]
    measured = "; ".join(f"{label} ({kind}) exponent {e:.2f}" for label, kind, e in exps)
    bad = [f"{label} = {e:.2f}" for label, _, e in exps if abs(e - 2) > C7_BAD]
    ok = all(abs(e - 2) <= C7_OK for _, _, e in exps)
    status = NOT_SUPPORTED if bad else SUPPORTED if ok else INCONCLUSIVE
    reason = (f"exponent far from 2: {', '.join(bad)}" if bad else
              f"all exponents within 2 ± {C7_OK}" if ok else f"exponents between ±{C7_OK} and ±{C7_BAD} of 2")
    return [_verdict("C7", status, reason, measured)]


@claim("C8")
def c8_attention_vs_lstm(sweep: Sweep, opts: Options) -> list[Verdict]:
    """Attention against an LSTM layer: crossover length against d."""
    section = (opts.bench or {}).get("attention_vs_lstm")
    if not isinstance(section, dict):
        return []
    flat = {path[-1]: v for path, v in leaves(section)}
    n, d = flat.get("crossover_n"), flat.get("d", flat.get("d_model"))
    if not isinstance(d, (int, float)) or isinstance(d, bool):
        return [_verdict("C8", INCONCLUSIVE, "bench.json attention_vs_lstm has no d", f"crossover_n={n}")]
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return [_verdict("C8", INCONCLUSIVE, "no crossover within the measured lengths", f"crossover_n=n/a, d={d:g}")]
    status = SUPPORTED if n >= d / 2 else NOT_SUPPORTED
    reason = f"crossover_n / d = {n / d:.2f} ({'≥' if status == SUPPORTED else '<'} 0.5)"
    return [_verdict("C8", status, reason, f"crossover_n={n:g}, d={d:g}")]


def evaluate(sweep: Sweep, opts: Options | None = None) -> list[Verdict]:
    """Every verdict of every registered claim the sweep addresses, in claim order."""
    opts = opts or Options()
    out: list[Verdict] = []
    for cid in sorted(REGISTRY, key=lambda c: int(c[1:])):
        out += REGISTRY[cid](sweep, opts)
    return out
