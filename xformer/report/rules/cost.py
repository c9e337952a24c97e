"""C7 and C8: attention's cost, read from ``bench.json``.

``xformer bench`` writes its rows under ``sections``: ``sections.attention`` (per path -- ``explicit``,
the paper's algorithm with a materialised ``(n, n)`` score matrix; ``sdpa``, PyTorch's fused kernel;
``linear`` and ``linear_causal``, linear attention -- a ``time_exponent`` and a ``memory_exponent``)
and ``sections.recurrence`` (``crossover_n`` at ``config.d``). The older top-level
``attention_cost`` / ``attention_vs_lstm`` sections are read too."""

from __future__ import annotations

from ..aggregate import Sweep
from ..benchjson import bench_exponents, fit_rows, leaves
from .core import C7_BAD, C7_OK, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Options, Verdict, _verdict, claim


def bench_section(bench: dict | None, name: str, legacy: str) -> dict | list | None:
    """``bench["sections"][name]`` (what ``xformer bench`` writes), else the older ``bench[legacy]``."""
    bench = bench or {}
    sections = bench.get("sections")
    if isinstance(sections, dict) and isinstance(sections.get(name), dict):
        return sections[name]
    found = bench.get(legacy)
    return found if isinstance(found, (dict, list)) else None


#: The path of ``sections.attention`` the claim is about: the paper's algorithm, scores materialised.
CLAIM_PATH = "explicit"


def _path_exponents(section: dict) -> tuple[list[tuple[str, str, float]], list[str]]:
    """Exponents of the claim's path, and a note for each other path (fused SDPA keeps no ``(n, n)``
    matrix, linear attention is O(n): informative, not the claim's algorithm)."""
    exps, others = [], []
    for path, row in section.items():
        if not isinstance(row, dict) or "time_exponent" not in row:
            continue
        pair = [(kind, row.get(f"{kind}_exponent")) for kind in ("time", "memory")]
        pair = [(k, float(e)) for k, e in pair if isinstance(e, (int, float)) and not isinstance(e, bool)]
        if path == CLAIM_PATH:
            exps += [(f"{path}.{k}_exponent", k, e) for k, e in pair]
        else:
            others.append(f"{path}: " + ", ".join(f"{k} {e:.2f}" for k, e in pair))
    return exps, others


@claim("C7")
def c7_attention_cost(_sweep: Sweep, opts: Options) -> list[Verdict]:
    """Time and memory exponents of attention against n from bench.json (the explicit path)."""
    section = bench_section(opts.bench, "attention", "attention_cost")
    if section is None:
        return []
    others: list[str] = []
    if isinstance(section, dict) and isinstance(section.get(CLAIM_PATH), dict):
        exps, others = _path_exponents(section)
    else:
        exps = bench_exponents(section) if isinstance(section, dict) else fit_rows(section)
    if not exps:
        return [_verdict("C7", INCONCLUSIVE, "bench.json attention_cost has no exponents or per-n rows", "n/a")]
    measured = "; ".join(f"{label} ({kind}) exponent {e:.2f}" for label, kind, e in exps)
    if others:
        measured += f" (other paths, not the claim's algorithm: {'; '.join(others)})"
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
    section = bench_section(opts.bench, "recurrence", "attention_vs_lstm")
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
