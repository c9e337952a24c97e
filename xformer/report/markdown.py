"""The text of ``report.md``: command, sweep table, failed jobs, parameter breakdown (C2), claim
verdicts and links to the plots. Pure functions from the aggregated data to Markdown strings."""

from __future__ import annotations

import os
from pathlib import Path

from .aggregate import Job, Sweep, fmt_value
from .catalog import COMMON_RULE
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
    """One row per group: swept values | n | failed | metric mean ± std ... | total params."""
    keys = sweep.swept_keys
    header = (keys or ["group"]) + ["n", "failed"] + metrics + ["params"]
    rows = []
    for g in sweep.groups:
        vals = [fmt_value(g.values[k]) for k in keys] or ["all jobs"]
        stats = [g.stat(m).text() if g.stat(m) else "–" for m in metrics]
        params = _count(g.params["total"]) if g.params.get("total") else "–"
        rows.append(vals + [str(g.n), str(len(g.failed))] + stats + [params])
    return table(header, rows)


def failed_table(jobs: list[Job], root: Path) -> str:
    """Failed/unfinished jobs: folder | status | overrides."""
    rows = [[_rel(j.path, root), j.status, j.override_text()] for j in jobs]
    return table(["job", "status", "overrides"], rows)


def params_table(sweep: Sweep) -> str:
    """Parameter counts by role per group, and the FFN share of one block (C2)."""
    rows = []
    for g in sweep.groups:
        if not g.params:
            continue
        share = block_share(g) if g.params.get("ffn") and g.params.get("attention") else None
        rows.append([g.label()] + [f"{int(g.params[r]):,}" if r in g.params else "–" for r in PARAM_ROLES]
                    + [f"{share:.3f}" if share is not None else "–"])
    if not rows:
        return "_No parameter counts in metrics.json._"
    return table(["group", *PARAM_ROLES, "FFN share of block"], rows)


def verdict_item(v: Verdict) -> str:
    """A list item: bold claim and status, the reason, the evidence (comparisons with their intervals,
    failed checks), measured and published numbers, and the rule applied."""
    ctx = f" [{v.context}]" if v.context else ""
    lines = [f"- **{v.claim}{ctx}: {v.status}**. {v.reason}."]
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


def render(command: str, sweep: Sweep, metrics: list[str], verdicts: list[Verdict], plots: list[Path],
           out_dir: Path, decision_metric: str | None, notes: list[str] | None = None) -> str:
    """The whole ``report.md``.

    Args:
        command: the command line; ``sweep``: the aggregated jobs; ``metrics``: table columns;
        ``verdicts``: claim verdicts; ``plots``: PNG files (linked relative to ``out_dir``);
        ``decision_metric``: the metric claims were judged on by default; ``notes``: extra lines.
    """
    seeds = sorted({fmt_value(j.seed) for j in sweep.finished})
    parts = ["# xformer ablation report", "", f"Command: `{command}`", ""]
    parts += ["Folders:"] + [f"- `{d}`" for d in sweep.dirs] + [""]
    parts += [f"- {note}" for note in notes or []]
    parts += [
        f"- jobs: {len(sweep.jobs)} ({len(sweep.finished)} finished, {len(sweep.failed)} failed or unfinished)",
        f"- swept keys: {', '.join(f'`{k}`' for k in sweep.swept_keys) or 'none'}",
        f"- fixed overrides: {', '.join(f'`{k}={fmt_value(v)}`' for k, v in sweep.fixed.items()) or 'none'}",
        f"- seeds: {', '.join(seeds) or 'none'}",
        f"- decision metric: `{decision_metric or 'n/a'}` (mean ± sample std over seeds, n = finished seeds)",
        "", "## Results", "",
    ]
    parts += [sweep_table(sweep, metrics) if sweep.groups else "_No finished job._", ""]
    parts += ["## Claim verdicts", "", "Common rule (`xformer/report/catalog.py`, `docs/claims.md`): " + COMMON_RULE, ""]
    parts += [verdict_item(v) for v in verdicts] or ["_No claim is addressed by these runs._"]
    parts += ["", "## Failed or unfinished jobs", ""]
    root = sweep.dirs[0] if sweep.dirs else out_dir
    parts += [failed_table(sweep.failed, root) if sweep.failed else "_None._", ""]
    parts += ["## Parameters (C2)", "", params_table(sweep), ""]
    parts += ["## Plots", ""]
    parts += [f"![{p.stem}]({_rel(p, out_dir)})" for p in plots] or ["_No plots._"]
    return "\n".join(parts) + "\n"
