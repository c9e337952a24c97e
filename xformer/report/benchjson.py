"""Reading ``bench.json`` (written by ``xformer bench``; its format is not final, so every reader
here is defensive): the first readable JSON object, its numeric leaves, fitted cost exponents."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def load_bench(paths: list[Path]) -> dict | None:
    """The first readable JSON object among ``paths``; ``None`` when there is none."""
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(data, dict):
            return data
    return None


def leaves(node: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """All (key path, value) leaves of a JSON tree (list indices become path entries)."""
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in leaves(v, path + (str(k),))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in leaves(v, path + (str(i),))]
    return [(path, node)]


def _kind(text: str) -> str | None:
    t = text.lower()
    if "mem" in t or "byte" in t:
        return "memory"
    if any(w in t for w in ("time", "latency", "sec")) or t.endswith(("_ms", "_s")):
        return "time"
    return None


def bench_exponents(section: dict) -> list[tuple[str, str, float]]:
    """``[(label, "time"|"memory", exponent)]`` from an ``attention_cost`` section: numbers under a key
    naming an ``exponent``/``slope``; failing that, log-log fits over per-n rows (dicts with ``n``)."""
    found = []
    for path, v in leaves(section):
        text = ".".join(path).lower()
        if (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and ("exponent" in text or "slope" in text)
            and path[-1].lower() not in ("r2", "intercept", "stderr", "n")
        ):
            kind = _kind(text)
            if kind:
                found.append((".".join(path), kind, float(v)))
    if found:
        mine = [f for f in found if "xformer" in f[0].lower()]
        return mine or found
    return fit_rows(section)


def fit_rows(section: Any) -> list[tuple[str, str, float]]:
    """Log-log slopes of time/memory fields against ``n`` over the larger half of per-n rows."""
    rows: list[dict] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "n" in node and isinstance(node["n"], (int, float)):
                rows.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(section)
    out = []
    fields = sorted({k for r in rows for k, v in r.items() if k != "n" and isinstance(v, (int, float)) and _kind(k)})
    for f in fields:
        pts = sorted(
            (float(r["n"]), float(r[f])) for r in rows if isinstance(r.get(f), (int, float)) and r[f] > 0 and r["n"] > 0
        )
        pts = pts[len(pts) // 2 :] if len(pts) >= 4 else pts
        if len(pts) < 2:
            continue
        xs, ys = [math.log(x) for x, _ in pts], [math.log(y) for _, y in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx > 0:
            out.append((f"fit({f})", _kind(f), sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx))
    return out
