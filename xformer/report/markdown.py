"""The text of ``report.md`` (pure functions from the aggregated data to Markdown): a summary table (a row per
claim), the command and the sweep, each claim with its parts table (the rules linked, not repeated) and plot,
the sweep table, failed and diverged jobs, the parameter breakdown, the other plots and the per-seed files."""

from __future__ import annotations

import os
from pathlib import Path

from .aggregate import Job, Sweep, fmt_value
from .rules.engine import count_text
from .rules.measures import block_share
from .rules.results import ClaimResult, PartResult

RULES_DOC = Path(__file__).resolve().parents[2] / "docs" / "report.md"
"""Where the test types and the checks every part gets are documented (linked from every report)."""


def rules_link(out_dir: Path) -> str:
    """A link to the test types' section of ``docs/report.md``: relative where the report lies in this
    checkout, else the file named in words."""
    if Path(out_dir).resolve().is_relative_to(RULES_DOC.parents[1]):
        return f"[docs/report.md § Test types]({os.path.relpath(RULES_DOC, Path(out_dir).resolve())}#test-types)"
    return "docs/report.md § Test types (in the xformer checkout)"


PARAM_ROLES = ("total", "attention", "ffn", "embedding", "positional", "norm", "other")


def table_row(cells) -> str:
    """One row of a Markdown table (``|`` escaped, line breaks as spaces)."""
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    return "\n".join([table_row(header), "|" + "---|" * len(header), *map(table_row, rows)])


def sweep_table(sweep: Sweep, metrics: list[str]) -> str:
    """One row per group: swept values | n | diverged | failed | metric mean ± std ... | total params."""
    keys = sweep.swept_keys
    header = (keys or ["group"]) + ["n", "diverged", "failed"] + metrics + ["params"]
    rows = []
    for g in sweep.groups:
        vals = [fmt_value(g.values[k]) for k in keys] or ["all jobs"]
        stats = [g.stat(m).text() if g.stat(m) else "–" for m in metrics]
        params = count_text(g.params["total"]) if g.params.get("total") else "–"
        rows.append(vals + [str(g.n), str(len(g.diverged)), str(len(g.failed))] + stats + [params])
    return table(header, rows)


def failed_table(jobs: list[Job], root: Path) -> str:
    """Failed, unfinished or diverged jobs: folder | status | step | overrides | error."""
    rows = []
    for j in jobs:
        step = "–" if j.diverged_step is None else str(j.diverged_step)
        overrides = " ".join(f"{k}={fmt_value(v)}" for k, v in j.overrides.items()) or "(no overrides)"
        rows.append([os.path.relpath(j.path, root), j.status, step, overrides, j.error[:200] or "–"])
    return table(["job", "status", "diverged at step", "overrides", "error"], rows)


def summary_table(results: list[ClaimResult]) -> str:
    """One row per claim: claim | verdict | parts (``(i) supported; (ii) inconclusive``) | budget |
    published (labelled as the paper's setting where the claim was guessed onto other jobs)."""
    rows = []
    for r in results:
        parts = "; ".join(f"{p.label} {p.verdict}" for p in r.parts if p.role != "descriptive") or "–"
        text = r.headline or r.published
        published = f"paper's setting, not these jobs' task: {text}" if text and r.note else text or "–"
        rows.append([r.claim, f"**{r.verdict}**", parts, r.budget or "–", published])
    return table(["claim", "verdict", "parts", "budget", "published (the paper's setting)"], rows)


def trend_text(p: PartResult) -> str:
    """The second-half trend of a part's gap: its slope per doubling of steps with its 95 % interval,
    the limit and what it shows (``–`` where none was measured)."""
    st = p.stability
    if st is None:
        return "–"
    if st.slope is None:
        return st.outcome
    return (
        f"{st.slope:+.3g} [95% {st.slope_lo:+.3g}, {st.slope_hi:+.3g}] per doubling vs limit {st.limit:+.3g}: "
        f"{st.outcome}"
    )


def qualified(verdict: str, problems: list[str], caveats: list[str]) -> str:
    """A part's verdict with its caveats and qualifiers (``not supported (not reproduced at this budget)``)."""
    out = verdict + (" (not reproduced at this budget)" if "not reproduced at this budget" in problems else "")
    return out + (" (" + "; ".join(caveats) + ")" if caveats else "")


def interval_header(r: ClaimResult) -> str:
    """``estimate [95 % interval]``, naming every confidence level the parts use."""
    levels = sorted({p.confidence for p in r.parts if p.confidence and p.lo is not None}, reverse=True)
    return "estimate [" + " or ".join(f"{c:.0%}" for c in levels) + " interval]" if levels else "estimate"


def parts_table(r: ClaimResult) -> str:
    """One row per part: part | role | test | says | verdict | estimate [interval] | margin (source) |
    detectable at 80 % | trend over the second half | declared | reason."""
    rows = []
    for i, p in enumerate(r.parts):
        margin = "–" if p.margin is None else f"{p.margin:.3g}"
        if p.margin_source:
            margin += f" ({p.margin_source})"
        detect = "–" if p.detectable is None else f"{p.detectable:.3g}"
        if p.seeds_needed is not None:
            more = f"~{p.seeds_needed} seeds a side decide it" if p.seeds_needed <= 1000 else "> 1000 seeds a side"
            detect += f"; {more}"
        part = p.label + (f" `{p.sweep}`" if p.sweep else "")
        verdict = qualified(f"**{p.verdict}**", p.problems, p.caveats)
        estimate = f"{p.interval_text()} {p.metric or ''}".strip()
        pre = part_preregistration(r.preregistration, i + 1)
        rows.append(
            [part, p.role, p.test, p.says or "–", verdict, estimate, margin, detect, trend_text(p), pre, p.reason]
        )
    return table(
        [
            "part",
            "role",
            "test",
            "says",
            "verdict",
            interval_header(r),
            "margin (source)",
            "detectable (80 %)",
            "trend of the gap (second half)",
            "declared",
            "reason",
        ],
        rows,
    )


def part_preregistration(record: dict | None, number: int, none: str = "–") -> str:
    """Part ``number``'s pre-registration in words, from its claim's record (``verdicts.json``'s
    ``preregistration``); ``none`` without one."""
    if not record:
        return none
    status = record.get("status", "")
    if status == "changed after the data":
        if number in (record.get("changed_parts") or []):
            k = (record.get("changed_parts_jobs_finished") or {}).get(str(number), record.get("jobs_finished"))
            n = record.get("n_jobs")
            return f"changed after {k} of {n} jobs had finished" if k is not None and n else "changed after the data"
        return "as frozen"
    return status


def params_table(sweep: Sweep) -> str:
    """Parameter counts by role per group, and the FFN share of one block."""
    rows = []
    for g in sweep.groups:
        if not g.params:
            continue
        share = block_share(g) if g.params.get("ffn") and g.params.get("attention") else None
        counts = [f"{int(g.params[r]):,}" if r in g.params else "–" for r in PARAM_ROLES]
        rows.append([g.label(), *counts, f"{share:.3f}" if share is not None else "–"])
    if not rows:
        return "_No parameter counts in metrics.json._"
    return table(["group", *PARAM_ROLES, "FFN share of block"], rows)


def claim_item(r: ClaimResult, plot: str | None = None) -> str:
    """A claim: its verdict at its budget and reason, the parts table, the plot, each part's evidence
    in a collapsed block, and the published figures."""
    at = f" at {r.budget}" if r.budget else ""
    states = (
        "a stable ranking (a gap shown to close over the second half makes a part inconclusive)"
        if r.at == "stable ranking"
        else "a result at its budget (the final interval decides; the trend is printed)"
    )
    scope = f" (on the parts reading {r.scope})" if r.scope else ""
    lines = [f"### {r.claim}{scope}: {r.verdict}", "", f"{r.statement}", "", f"**{r.verdict}**{at}: {r.reason}.", ""]
    if r.scope:
        lines += [
            "The other parts read sweeps not among these jobs; the claim's one verdict over all its sweeps is in "
            "`docs/results/README.md` (or: `xformer report` with every sweep's folder).",
            "",
        ]
    lines += [f"The claim states {states}."]
    if r.preregistration:
        lines += [f"Pre-registration: {preregistration_text(r.preregistration)}."]
    lines += ["", parts_table(r), ""]
    if plot:
        lines += [f"![{r.claim}]({plot})", ""]
    for p in r.parts:
        if p.evidence:
            lines += [f"<details><summary>{r.claim} {p.label} evidence</summary>", ""]
            lines += [f"- {e}" for e in p.evidence] + ["", "</details>", ""]
    if r.published:
        lines.append(f"Published: {r.published}" + (f" ({r.source})" if r.source else ""))
    return "\n".join(lines)


def preregistration_text(pre: dict) -> str:
    """One sentence on a claim's declaration against the one frozen before its sweep's data."""
    status = pre.get("status", "not frozen")
    sha = (pre.get("frozen_sha256") or "")[:12]
    out = status + (f" (frozen declaration sha256 {sha}…)" if sha else "")
    if pre.get("changed_parts"):
        out += "; changed parts: " + ", ".join(str(i) for i in pre["changed_parts"])
    if pre.get("derived"):
        out += f"; {pre['derived']}"
    return out


def render(
    command: str,
    sweep: Sweep,
    metrics: list[str],
    verdicts: list[ClaimResult],
    plots: list[Path],
    out_dir: Path,
    decision_metric: str | None,
    notes: list[str],
    verdict_plots: list[Path | None],
    files: list[Path],
) -> str:
    """The whole ``report.md``: ``command`` (the command line), ``metrics`` (table columns), ``plots`` (PNGs
    linked relative to ``out_dir``), ``decision_metric`` (the table's first), ``notes`` (extra lines),
    ``verdict_plots`` (a PNG or ``None`` per verdict, shown beside it), ``files`` (the per-seed files)."""
    seeds = sorted({fmt_value(j.seed) for j in sweep.finished})
    parts = ["# xformer ablation report", ""]
    if verdicts:
        parts += [
            "## Summary",
            "",
            summary_table(verdicts),
            "",
            "Each verdict holds at the budget named (steps, tokens, schedule). How a part is decided (the test "
            f"types, the checks every part gets): {rules_link(out_dir)}.",
            "",
        ]
    parts += [f"Command: `{command}`", ""]
    parts += ["Folders:"] + [f"- `{d}`" for d in sweep.dirs] + [""]
    parts += [f"- {note}" for note in notes]
    parts += [
        f"- jobs: {len(sweep.jobs)} ({len(sweep.finished)} finished, {len(sweep.diverged)} diverged, "
        f"{len(sweep.failed)} failed or unfinished)",
        f"- swept keys: {', '.join(f'`{k}`' for k in sweep.swept_keys) or 'none'}",
        f"- fixed overrides: {', '.join(f'`{k}={fmt_value(v)}`' for k, v in sweep.fixed.items()) or 'none'}",
        f"- seeds: {', '.join(seeds) or 'none'}",
        f"- table metric: `{decision_metric or 'n/a'}` (mean ± sample std over seeds, n = finished seeds; each "
        "claim part names its own metric)",
        *(f"- not counted twice: {w}" for w in sweep.dropped),
        "",
    ]
    parts += ["## Claim verdicts", ""]
    plots_of = zip(verdicts, verdict_plots, strict=True)
    items = [claim_item(v, os.path.relpath(p, out_dir) if p else None) for v, p in plots_of]
    parts += items or [
        "_No claim asks about these runs (their experiment is not among any claim's sweeps; "
        "`xformer report DIR --claims FILE` decides your own)._"
    ]
    parts += ["", "## Results", ""]
    parts += [sweep_table(sweep, metrics) if sweep.groups else "_No finished job._", ""]
    parts += ["## Diverged, failed or unfinished jobs", ""]
    root = sweep.dirs[0] if sweep.dirs else out_dir
    odd = sweep.diverged + sweep.failed
    parts += [failed_table(odd, root) if odd else "_None._", ""]
    parts += ["## Parameters", "", params_table(sweep), ""]
    parts += ["## Plots", ""]
    parts += [f"![{p.stem}]({os.path.relpath(p, out_dir)})" for p in plots] or ["_No plots._"]
    if files:
        parts += [
            "",
            "## Per-seed files",
            "",
            "Enough to recompute every verdict without the job folders (`xformer report <this folder>` "
            "reads them back):",
            "",
        ]
        parts += [f"- [`{f.name}`]({os.path.relpath(f, out_dir)})" for f in files]
    return "\n".join(parts) + "\n"
