"""C7 and C8: attention's cost, read from ``bench.json``."""

from __future__ import annotations

from ..aggregate import Sweep
from ..benchjson import bench_exponents, fit_rows, leaves
from .core import C7_BAD, C7_OK, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Options, Verdict, _verdict, claim


@claim("C7")
def c7_attention_cost(_sweep: Sweep, opts: Options) -> list[Verdict]:
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
    reason = (
        f"exponent far from 2: {', '.join(bad)}"
        if bad
        else f"all exponents within 2 ± {C7_OK}"
        if ok
        else f"exponents between ±{C7_OK} and ±{C7_BAD} of 2"
    )
    return [_verdict("C7", status, reason, measured)]


@claim("C8")
def c8_attention_vs_lstm(_sweep: Sweep, opts: Options) -> list[Verdict]:
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
