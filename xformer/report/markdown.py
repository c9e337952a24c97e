"""The text of ``report.md``: first a summary table (one row per verdict: verdict, budget, key Δ with
its interval, the same in %, the published figure), then the command and the sweep, the claim
verdicts each with its plot beside it, the sweep table, failed and diverged jobs, the parameter
breakdown (C2), the other plots and the per-seed files. Pure functions from the aggregated data to
Markdown strings."""

from __future__ import annotations

import os
from pathlib import Path

from .aggregate import Job, Sweep, fmt_value
from .catalog import COMMON_RULE, HEADLINES
from .claims import Verdict, block_share

PARAM_ROLES = ("total", "attention", "ffn", "embedding", "positional", "norm", "other")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _count(n: float) -> str:
    """``1234567`` → ``1.23 M``; ``12345`` → ``12.3 k``."""
    if n >= 1e6:
        return f"{n / 1e6:.3g} M"
    if n >= 1e3:
        return f"{n / 1e3:.3g} k"
    return f"{n:.0f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def sweep_table(sweep: Sweep, metrics: list[str]) -> str:
    """One row per group: swept values | n | diverged | failed | metric mean ± std ... | total params."""
    keys = sweep.swept_keys
    header = (keys or ["group"]) + ["n", "diverged", "failed"] + metrics + ["params"]
    rows = []
    for g in sweep.groups:
        vals = [fmt_value(g.values[k]) for k in keys] or ["all jobs"]
        stats = [g.stat(m).text() if g.stat(m) else "–" for m in metrics]
        params = _count(g.params["total"]) if g.params.get("total") else "–"
        rows.append(vals + [str(g.n), str(len(g.diverged)), str(len(g.failed))] + stats + [params])
    return table(header, rows)


def failed_table(jobs: list[Job], root: Path) -> str:
    """Failed, unfinished or diverged jobs: folder | status | step | overrides | error."""
    rows = [
        [
            _rel(j.path, root),
            j.status,
            str(j.diverged_step) if j.diverged_step is not None else "–",
            j.override_text(),
            j.error[:200] or "–",
        ]
        for j in jobs
    ]
    return table(["job", "status", "diverged at step", "overrides", "error"], rows)


def key_text(v: Verdict) -> tuple[str, str]:
    """The summary table's key Δ (with its 95 % interval) and relative effect of a verdict."""
    k = v.key
    if k is None:
        return "–", "–"
    head = f"{k.a} vs {k.b}: "
    if k.by_divergence:
        return head + "decided by divergence (" + (k.note or k.outcome) + ")", "–"
    if k.interval is None:
        d = f"{k.delta:+.3g}" if k.delta == k.delta else "n/a"
        return head + f"{d} ({k.outcome})", "–"
    iv = k.interval
    rel = k.relative()
    rel_text = f"{rel[0]:+.2g} % [{rel[1]:+.2g}, {rel[2]:+.2g}]" if rel else "–"
    return head + f"{iv.delta:+.3g} [{iv.lo:+.3g}, {iv.hi:+.3g}] {k.metric or v.metric}", rel_text


def summary_table(verdicts: list[Verdict]) -> str:
    """One row per verdict: claim | verdict | budget | key Δ [95 % interval] | relative | published."""
    rows = []
    for v in verdicts:
        ctx = f" [{v.context}]" if v.context else ""
        delta, rel = key_text(v)
        rows.append(
            [f"{v.claim}{ctx}", f"**{v.status}**", v.budget or "–", delta, rel, HEADLINES.get(v.claim, v.published)]
        )
    return table(
        [
            "claim",
            "verdict",
            "budget",
            "key Δ (95 % interval; positive: first setting better)",
            "relative (% of the second)",
            "published",
        ],
        rows,
    )


def params_table(sweep: Sweep) -> str:
    """Parameter counts by role per group, and the FFN share of one block (C2)."""
    rows = []
    for g in sweep.groups:
        if not g.params:
            continue
        share = block_share(g) if g.params.get("ffn") and g.params.get("attention") else None
        rows.append(
            [g.label()]
            + [f"{int(g.params[r]):,}" if r in g.params else "–" for r in PARAM_ROLES]
            + [f"{share:.3f}" if share is not None else "–"]
        )
    if not rows:
        return "_No parameter counts in metrics.json._"
    return table(["group", *PARAM_ROLES, "FFN share of block"], rows)


def verdict_item(v: Verdict, plot: str | None = None) -> str:
    """A list item: bold claim and status at its budget, the reason, its plot (``plot``: a relative
    path), the evidence (comparisons with their intervals, failed checks), measured and published
    numbers, and the rule applied."""
    ctx = f" [{v.context}]" if v.context else ""
    at = f" at {v.budget}" if v.budget else ""
    lines = [f"- **{v.claim}{ctx}: {v.status}**{at}: {v.reason}."]
    if plot:
        lines.append(f"\n  ![{v.claim} verdict]({plot})\n")
    lines += [f"  - evidence: {e}" for e in v.evidence]
    lines += [f"  - measured: {v.measured}", f"  - published: {v.published}"]
    if v.rule:
        lines.append(f"  - rule: {v.rule}")
    return "\n".join(lines)


def _rel(path: Path, root: Path) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return str(path)


def render(
    command: str,
    sweep: Sweep,
    metrics: list[str],
    verdicts: list[Verdict],
    plots: list[Path],
    out_dir: Path,
    decision_metric: str | None,
    notes: list[str] | None = None,
    verdict_plots: list[Path | None] | None = None,
    files: list[Path] | None = None,
) -> str:
    """The whole ``report.md``.

    Args:
        command: the command line; ``sweep``: the aggregated jobs; ``metrics``: table columns;
        ``verdicts``: claim verdicts; ``plots``: PNG files (linked relative to ``out_dir``);
        ``decision_metric``: the metric claims were judged on by default; ``notes``: extra lines;
        ``verdict_plots``: one PNG (or ``None``) per verdict, shown beside it; ``files``: the
        per-seed files written next to the report (:mod:`xformer.report.export`).
    """
    seeds = sorted({fmt_value(j.seed) for j in sweep.finished})
    parts = ["# xformer ablation report", ""]
    if verdicts:
        parts += [
            "## Summary",
            "",
            summary_table(verdicts),
            "",
            "Each verdict holds at the budget named (steps, tokens, schedule); the rule is in "
            "[Claim verdicts](#claim-verdicts). Relative: Δ as a percentage of the second setting's mean.",
            "",
        ]
    parts += [f"Command: `{command}`", ""]
    parts += ["Folders:"] + [f"- `{d}`" for d in sweep.dirs] + [""]
    parts += [f"- {note}" for note in notes or []]
    parts += [
        f"- jobs: {len(sweep.jobs)} ({len(sweep.finished)} finished, {len(sweep.diverged)} diverged, "
        f"{len(sweep.failed)} failed or unfinished)",
        f"- swept keys: {', '.join(f'`{k}`' for k in sweep.swept_keys) or 'none'}",
        f"- fixed overrides: {', '.join(f'`{k}={fmt_value(v)}`' for k, v in sweep.fixed.items()) or 'none'}",
        f"- seeds: {', '.join(seeds) or 'none'}",
        f"- decision metric: `{decision_metric or 'n/a'}` (mean ± sample std over seeds, n = finished seeds)",
        *(f"- not counted twice: {w}" for w in sweep.dropped),
        "",
    ]
    parts += [
        "## Claim verdicts",
        "",
        "Common rule (`xformer/report/catalog.py`, `docs/claims.md`): " + COMMON_RULE,
        "",
    ]
    vplots = list(verdict_plots or []) + [None] * len(verdicts)
    parts += [verdict_item(v, _rel(p, out_dir) if p else None) for v, p in zip(verdicts, vplots, strict=False)] or [
        "_No claim is addressed by these runs._"
    ]
    parts += ["", "## Results", ""]
    parts += [sweep_table(sweep, metrics) if sweep.groups else "_No finished job._", ""]
    parts += ["## Diverged, failed or unfinished jobs", ""]
    root = sweep.dirs[0] if sweep.dirs else out_dir
    odd = sweep.diverged + sweep.failed
    parts += [failed_table(odd, root) if odd else "_None._", ""]
    parts += ["## Parameters (C2)", "", params_table(sweep), ""]
    parts += ["## Plots", ""]
    parts += [f"![{p.stem}]({_rel(p, out_dir)})" for p in plots] or ["_No plots._"]
    if files:
        parts += [
            "",
            "## Per-seed files",
            "",
            "Enough to recompute every verdict without the job folders (`xformer report <this folder>` "
            "reads them back):",
            "",
        ]
        parts += [f"- [`{f.name}`]({_rel(f, out_dir)})" for f in files]
    return "\n".join(parts) + "\n"
