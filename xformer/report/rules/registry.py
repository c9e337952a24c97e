"""The registry of verdict functions (:func:`claim`) and :func:`evaluate`, which runs them all."""

from __future__ import annotations

from typing import Callable

from ..aggregate import Sweep
from .results import Options, Verdict

Recogniser = Callable[[Sweep, Options], list[Verdict]]
REGISTRY: dict[str, list[Recogniser]] = {}


def claim(cid: str) -> Callable[[Recogniser], Recogniser]:
    """Register a verdict function under claim id ``cid`` (a claim may have several, e.g. C12)."""

    def deco(fn: Recogniser) -> Recogniser:
        REGISTRY.setdefault(cid, []).append(fn)
        return fn

    return deco


BENCH_CLAIMS = ("C7", "C8")
"""Claims decided from ``bench.json``, not from the sweep's jobs."""


def evaluate(sweep: Sweep, opts: Options | None = None) -> list[Verdict]:
    """Every verdict of every registered claim the sweep addresses, in claim order. Crashed or
    unfinished jobs outside a verdict's compared settings (e.g. a setting whose every seed crashed,
    which then has no group) are named in that verdict too."""
    opts = opts or Options()
    out: list[Verdict] = []
    for cid in sorted(REGISTRY, key=lambda c: int(c[1:])):
        for fn in REGISTRY[cid]:
            out += fn(sweep, opts)
    for v in out:
        if v.claim in BENCH_CLAIMS:
            continue
        named = {id(j) for _, g in v.settings for j in g.failed}
        rest = [j for j in sweep.failed if id(j) not in named]
        if rest:
            v.evidence.append(
                "crashed or unfinished elsewhere in the sweep, not counted: "
                + "; ".join(
                    f"{j.override_text()} ({j.path.name}), status {j.status}"
                    + (f": {j.error[:120]}" if j.error else "")
                    for j in rest
                )
            )
    return out
